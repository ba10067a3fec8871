"""The looks of a reference set: which claims were read, at which seeds, before seeds or cells were added to them.

A claim read, found undecided, and then given more seeds is tested more than once: at one level each, the chance of a
false verdict grows with every look (docs/design.md, "Claims: looks"). The set's looks are recorded beside it, in
``<set>.looks.yaml`` (reference/mnist.looks.yaml beside reference/mnist: the set itself is sealed), one entry a look:
the claims read then (their numbers: "1" stands for 1 and 1r), when, at which commit, what the claims' cells held,
and what was added after. The render is the last look of every claim, so a claim has ``1 +`` the entries naming it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

LOOKS_SUFFIX = ".looks.yaml"
"""A set's looks file: the set's folder name with this suffix, beside it."""
NUMBER = re.compile(r"^(B?\d+)")
"""A claim number's base: '1' of '1r', 'B3' of 'B3'."""


class LooksError(ValueError):
    """A looks file that cannot be read: the message names the file and the entry."""


def looks_path(reference: str | Path) -> Path:
    """Where the looks of the set ``reference`` are recorded (``reference/mnist`` -> ``reference/mnist.looks.yaml``)."""
    p = Path(reference)
    return p.with_name(p.name + LOOKS_SUFFIX)


def parse_looks(data: Any, where: str) -> dict[str, int]:
    """Claim base number -> its looks before the render, from a looks file's parsed YAML (``where`` names it)."""
    if not isinstance(data, Mapping) or not isinstance(data.get("looks"), list):
        raise LooksError(f"{where}: needs a list under 'looks' (one entry a look: claims, date, commit, held, then)")
    count: dict[str, int] = {}
    for i, entry in enumerate(data["looks"]):
        claims = entry.get("claims") if isinstance(entry, Mapping) else None
        if not isinstance(claims, list) or not claims:
            raise LooksError(f"{where}: looks[{i}] names no claims (a list of claim numbers, e.g. [1, 2, 15])")
        for c in claims:
            m = NUMBER.match(str(c))
            if m is None or m.group(1) != str(c):
                raise LooksError(f"{where}: looks[{i}] claim {c!r} is not a claim number (1, 27, B3)")
            count[m.group(1)] = count.get(m.group(1), 0) + 1
    return count


def read_looks(path: str | Path | None) -> dict[str, int]:
    """Claim base number -> how many times it was read before the render (``parse_looks``); no file: none."""
    if path is None or not Path(path).is_file():
        return {}
    import yaml

    try:
        data = yaml.safe_load(Path(path).read_text())
    except yaml.YAMLError as exc:
        raise LooksError(f"{path}: not YAML ({exc})") from None
    return parse_looks(data, str(path))


def looks_of(number: str, earlier: Mapping[str, int]) -> int:
    """The looks of claim ``number`` ('1r' counts 1's): its earlier reads and the render."""
    m = NUMBER.match(number)
    return 1 + int(earlier.get(m.group(1), 0)) if m else 1
