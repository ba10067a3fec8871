"""The real datasets' label structure, labels only (no pixels): what every shipped partition is checked against.

``structures.json`` (package data) holds, for each built-in source, the class counts of the training and test splits
of the real files and where each number comes from; for FEMNIST, the writers of the full LEAF set as LEAF publishes
them and, for the partial LEAF copy a development machine holds, each writer's class counts.
``python scripts/label_structures.py DATA_DIR`` writes it from real files (``describe``); tests/test_real_structures.py
checks it against ``../shared/data`` and builds every partition of every shipped config on it. ``config.validate``
asks ``demand_problem`` of every partition of a study before any work, so that a config asking more samples of a class
than the real dataset has is refused when it loads, naming the family, dataset, setting, seed and class.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

STRUCTURES = Path(__file__).with_name("structures.json")
LEAF_LETTER_OFFSET = 10
"""LEAF's FEMNIST labels: 0-9 digits, 10-35 upper case, 36-61 lower case; letters merge to (y - 10) mod 26."""


@dataclass(frozen=True)
class Structure:
    """One dataset's label structure: class names, samples per class of each split, and (FEMNIST) its writers."""

    name: str
    classes: tuple[str, ...]
    train: tuple[int, ...] | None
    test: tuple[int, ...] | None
    origin: str
    writers: int | None = None
    writer_counts: Mapping[str, tuple[int, ...]] | None = None

    @property
    def num_classes(self) -> int:
        return len(self.classes)

    def labels(self, split: str = "train") -> np.ndarray:
        """Labels with the split's class counts, class by class (a stand-in for the real labels: every scheme but
        ``writers`` depends on the labels only through these counts)."""
        import numpy as np

        counts = self.train if split == "train" else self.test
        if counts is None:
            raise ValueError(f"{self.name}: its {split} class counts are not known ({self.origin})")
        return np.repeat(np.arange(len(counts)), counts).astype(np.int64)

    def writer_labels(self) -> tuple[np.ndarray, np.ndarray]:
        """(labels, writer ids) of the training split, writer by writer in sorted name order."""
        import numpy as np

        if self.writer_counts is None:
            raise ValueError(f"{self.name}: its writers' class counts are not known ({self.origin})")
        names = sorted(self.writer_counts)
        labels = [np.repeat(np.arange(self.num_classes), self.writer_counts[w]) for w in names]
        writers = [np.full(len(y), i, dtype=np.int64) for i, y in enumerate(labels)]
        return np.concatenate(labels).astype(np.int64), np.concatenate(writers)

    def letters(self) -> Structure:
        """FEMNIST's 62 LEAF classes merged into the 26 letters (``letters_only``; the authors' setting)."""
        if self.num_classes != 62:
            return self

        def merge(counts: tuple[int, ...] | None) -> tuple[int, ...] | None:
            if counts is None:
                return None
            out = [0] * 26
            for y, n in enumerate(counts[LEAF_LETTER_OFFSET:], start=LEAF_LETTER_OFFSET):
                out[(y - LEAF_LETTER_OFFSET) % 26] += n
            return tuple(out)

        writers = None if self.writer_counts is None else {w: merge(c) for w, c in self.writer_counts.items()}
        return Structure(self.name, tuple(c for c in self.classes[LEAF_LETTER_OFFSET:LEAF_LETTER_OFFSET + 26]),
                         merge(self.train), merge(self.test), self.origin + "; letters merged (letters_only)",
                         self.writers, writers)  # type: ignore[arg-type]

    def class_name(self, p: int) -> str:
        return f"class {p} ({self.classes[p]})"


@functools.cache
def _table() -> dict[str, Any]:
    return json.loads(STRUCTURES.read_text())


def structure(name: str) -> Structure:
    """The committed structure ``name`` (``mnist``, ``mnist5k``, ``cifar10``, ``fer2013``, ``femnist``,
    ``femnist_partial``); KeyError naming the known ones."""
    table = _table()
    if name not in table:
        raise KeyError(f"no label structure {name!r}; known: {sorted(table)}")
    entry = table[name]
    counts = entry.get("writer_counts")
    return Structure(
        name,
        tuple(entry["classes"]),
        None if entry.get("train") is None else tuple(entry["train"]),
        None if entry.get("test") is None else tuple(entry["test"]),
        entry["origin"],
        entry.get("writers"),
        None if counts is None else {w: tuple(c) for w, c in counts.items()},
    )


def for_source(source: str, options: Mapping[str, Any] | None = None) -> Structure | None:
    """The real structure behind a built-in data source with these loader options; None for a plug-in source (its
    structure is not known before its files are read)."""
    if source not in _table() or source == "femnist_partial":
        return None
    found = structure(source)
    if source == "femnist" and (options or {}).get("letters_only", True):
        found = found.letters()
    return found


def demand_problem(found: Structure, scheme: str, params: Mapping[str, Any], seed: int) -> str | None:
    """Why the partition ``(scheme, params, seed)`` cannot be built on ``found``'s training split (the classes
    short, named), or None when it can: the scheme's own class demand (``partition.class_demand``), or for the
    writers scheme the writers it takes."""
    import numpy as np

    from fedbalance.data.partition import PartitionError, class_demand, shortfall

    if scheme == "writers":
        wanted = int(params["num_clients"]) * int(params["writers_per_client"])
        if found.writers is not None and wanted > found.writers:
            return (f"the writers scheme takes {wanted} writers ({params['num_clients']} clients x "
                    f"{params['writers_per_client']}), the real {found.name} has {found.writers}")
        return None
    if found.train is None:
        return None
    try:
        need = class_demand(scheme, num_classes=found.num_classes, seed=seed, **params)
    except PartitionError as exc:
        return str(exc)
    short = shortfall(need, np.asarray(found.train), found.classes)
    if not short:
        return None
    knob = "samples_per_class" if scheme == "monitor" else (
        "balanced_samples" if float(params.get("gamma", 0)) == 1 and params.get("balanced_samples") else
        "majority_samples")
    return (f"its partition asks more samples than the real {found.name} training split has: " + "; ".join(short)
            + f"; lower partition.{knob} (docs/deviations.md, 'Data and partitions')")


def aux_problem(found: Structure, aux_per_class: int, aux_source: str) -> str | None:
    """Why ``aux_per_class`` auxiliary samples of every class cannot come from the split ``aux_source``, or None."""
    counts = found.test if aux_source == "test" else found.train
    if counts is None or found.writer_counts is not None or found.writers is not None:
        return None  # writer datasets draw from unused writers: not known before the partition
    short = [f"{found.class_name(p)} has {n}" for p, n in enumerate(counts) if n < aux_per_class]
    if not short:
        return None
    return (f"monitor.aux_per_class {aux_per_class} is more than the real {found.name} {aux_source} split holds of "
            + "; ".join(short))


def describe(data_dir: str | Path) -> dict[str, Any]:
    """The structures of the real files under ``data_dir`` (the README's layout), labels only, for structures.json:
    MNIST from its IDX label files, Fer2013 from fer2013.csv's emotion and Usage columns, the LEAF shards' writers
    (``femnist_partial``); a dataset whose files are absent is left out."""
    import numpy as np

    root = Path(data_dir)
    out: dict[str, Any] = {}
    raw = root / "MNIST" / "raw"
    if (raw / "train-labels-idx1-ubyte").is_file():
        from torchvision.datasets.mnist import read_label_file

        train, test = (np.bincount(read_label_file(str(raw / f"{s}-labels-idx1-ubyte")).numpy(), minlength=10)
                       for s in ("train", "t10k"))
        out["mnist"] = {"train": train.tolist(), "test": test.tolist()}
    csv = root / "fer2013" / "fer2013.csv"
    if csv.is_file():
        import pandas as pd

        from fedbalance.data.datasets import FER2013_USAGE

        df = pd.read_csv(csv, usecols=["emotion", "Usage"])
        split = df["Usage"].map(FER2013_USAGE)
        out["fer2013"] = {s: np.bincount(df["emotion"][split == s], minlength=7).tolist() for s in ("train", "test")}
    leaf = root / "femnist" / "leaf"
    if (leaf / "train").is_dir():
        writer_counts: dict[str, list[int]] = {}
        test = np.zeros(62, dtype=np.int64)
        for path in sorted((leaf / "train").glob("*.json")):
            shard = json.loads(path.read_text())
            for user in shard["users"]:
                writer_counts[user] = np.bincount(shard["user_data"][user]["y"], minlength=62).tolist()
        for path in sorted((leaf / "test").glob("*.json")):
            shard = json.loads(path.read_text())
            for user in shard["users"]:
                test += np.bincount(shard["user_data"][user]["y"], minlength=62)
        train = np.sum(list(writer_counts.values()), axis=0)
        out["femnist_partial"] = {"train": train.tolist(), "test": test.tolist(), "writers": len(writer_counts),
                                  "writer_counts": writer_counts}
    return out
