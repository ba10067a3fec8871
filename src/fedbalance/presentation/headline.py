"""The README's first screen: what the reproduction found, from a render of the reference set.

``tally_text``: the paper's headline claims counted by their verdict (``fedbalance.presentation.claims``), in a
sentence, and the project's own checks in another; ``install_figures``: the figures of ``figures.HEADLINE`` (drawn by rule ``figure`` of the render, PNG and the
plotted numbers as CSV) copied into docs/figures/. ``fedbalance reference docs`` (``fedbalance.presentation.refdocs``) calls both; tests/test_headline.py
checks the README's block against docs/claims-mnist.md and the CSVs against the reference set.
"""

from __future__ import annotations

import re
import shutil
from collections import Counter
from collections.abc import Iterable, Mapping
from pathlib import Path

import pandas as pd

from fedbalance.presentation.claims import FAILS, FEW_SEEDS, HOLDS, INDISTINCT, NO_DATA, VERDICTS, Claim, claims
from fedbalance.presentation.figures import HEADLINE, POINTS
from fedbalance.common.records import DEFAULT_ESTIMATOR

SAYS = {HOLDS: "hold", FAILS: "do not hold", INDISTINCT: "are not distinguishable at 95 %",
        FEW_SEEDS: "rest on too few seeds", NO_DATA: "lack data (the set holds none of their jobs)"}
"""How the tally says each verdict of ``claims.VERDICTS`` (a count before it)."""


def tally(verdicts: Iterable[str]) -> dict[str, int]:
    """How many claims have each verdict, in ``claims.VERDICTS``' order (every verdict, 0 included)."""
    counts = Counter(verdicts)
    unknown = set(counts) - set(VERDICTS)
    if unknown:
        raise ValueError(f"unknown verdicts {sorted(unknown)}; known: {list(VERDICTS)}")
    return {v: counts.get(v, 0) for v in VERDICTS}


PROJECT_CHECK = "(not a claim of the paper"
"""How the sentence of a claim that checks the paper's protocol, not a claim of the paper, begins
(``claims.PAPER``)."""


def is_project_check(claim: Claim) -> bool:
    """Whether ``claim`` is the project's own check rather than a claim of the paper."""
    return claim.sentence.text.startswith(PROJECT_CHECK)


def tally_text(final: pd.DataFrame, rounds: pd.DataFrame, source: str, *, estimator: str = DEFAULT_ESTIMATOR,
               looks: Mapping[str, int] | None = None) -> str:
    """The claims' verdicts on the render ``final``/``rounds`` of ``source`` (e.g. "the 299 jobs of reference/mnist"):
    a sentence counting the paper's claims by verdict ("Of the paper's 30 headline claims (35 verdicts: ...), judged
    on ...: 5 hold, ..."), the claims that hold and those that do not named in their own words, then a sentence for
    the project's own checks (``is_project_check``), which are not the paper's and not counted with them. A claim
    judged for both readings of the Ratio Loss (claim N and Nr) is one claim of two verdicts; the verdicts are
    counted."""
    everything = [c for c in claims(final, rounds, estimator, looks=looks, sensitivity=False) if c.paper]
    judged = [c for c in everything if not is_project_check(c)]
    own = [c for c in everything if is_project_check(c)]
    counts = tally(c.verdict for c in judged)
    parts = [f"**{n}** {SAYS[v]}" for v, n in counts.items() if n]
    listed = ", ".join(parts[:-1]) + f" and {parts[-1]}" if len(parts) > 1 else parts[0]
    numbers = list(dict.fromkeys(re.match(r"\d+", c.number).group(0) for c in judged))
    both = [c.number[:-1] for c in judged if c.number.endswith("r")]
    second = [c.number[:-1] for c in judged if c.number.endswith("p")]
    also = f"; claim {_listed(second)} for the paper's monitor and the configured estimator" if second else ""
    readings = "" if not both else (
        f" ({len(judged)} verdicts: claim{'s' if len(both) > 1 else ''} {_listed(both)} judged for both readings of "
        f"the Ratio Loss, the paper's equation and the released code's{also})")
    out = [f"Of the paper's {len(numbers)} headline claims{readings}, judged on {source} seed by seed (95 % "
           f"intervals), the verdicts: {listed}."]
    for verdict, words in ((HOLDS, "Hold"), (FAILS, "Do not hold")):
        named = [f"{c.number} ({c.text})" for c in judged if c.verdict == verdict]
        if named:
            out.append(f"{words}: {'; '.join(named)}.")
    if own:
        checks = "; ".join(f"claim {c.number}, {c.text.rstrip('.')}: **{c.verdict}**" for c in own)
        out.append(f"The project's own check{'s' if len(own) > 1 else ''} (not {'claims' if len(own) > 1 else 'a claim'}"
                   f" of the paper, not counted above): {checks}.")
    return "\n\n".join(out)


def _listed(items: list[str]) -> str:
    """'1', '1 and 2', '1, 2 and 15'."""
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + f" and {items[-1]}"


def install_figures(figures: str | Path, out_dir: str | Path, *, check: bool = False) -> list[Path]:
    """Copy each ``HEADLINE`` figure of a render (``figures``: its results_dir/figures: ``<name>.png`` and
    ``<name>.csv``) into ``out_dir`` where its plotted numbers differ from those there (or it is missing); the paths
    that differed (``check``: compare only, copy nothing). FileNotFoundError naming a figure the render lacks."""
    src, out = Path(figures), Path(out_dir)
    stale = []
    for name in HEADLINE:
        csv, png = src / f"{name}.{POINTS}", src / f"{name}.png"
        for p in (csv, png):
            if not p.is_file():
                raise FileNotFoundError(f"{p}: the render has no {name} figure (render the reference set first)")
        mine = out / csv.name
        if mine.is_file() and mine.read_text() == csv.read_text() and (out / png.name).is_file():
            continue
        stale += [mine, out / png.name]
        if not check:
            out.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(csv, mine)
            shutil.copyfile(png, out / png.name)
    return stale
