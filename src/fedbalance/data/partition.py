"""Client partitions of the paper's experiments.

Section "Evaluation" and Supplementary "Data Splitting" of Wang et al. (AAAI 2021).
Each scheme is one pure function of ``(labels[, writers], parameters, seed)`` that
draws only from ``np.random.default_rng(seed)`` and returns a :class:`Partition`
of indices into the train split. Samples are always taken at random without
replacement across clients. A request that cannot be met raises
:class:`PartitionError`; no scheme silently returns fewer samples.

Imbalance measures (paper, "Monitoring Scheme"): local imbalance
``gamma_j = max_p N_p^j / min_p N_p^j``, global imbalance
``Gamma = max_p sum_j N_p^j / min_p sum_j N_p^j`` and the local/global mismatch
``CS_j = v_j . V / (|v_j| |V|)``; see :meth:`Partition.stats`.
"""

from __future__ import annotations

import inspect
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

import numpy as np

from fedbalance.atomic import atomic_write
from fedbalance.common.jobspec import PARTITION_KEYS, JobSpec, as_spec, partition_args  # noqa: F401  (re-exported)

__all__ = [
    "PartitionError",
    "Partition",
    "cosine_similarity",
    "composition",
    "monitor_partition",
    "imbalance_partition",
    "mismatch_partition",
    "writer_partition",
    "unused_writers",
    "make_partition",
    "class_demand",
    "samples_per_class",
    "shortfall",
    "SCHEMES",
]


class PartitionError(ValueError):
    """The requested partition is impossible with these labels and parameters."""


def _jsonable(value: Any) -> Any:
    """Plain JSON types: tuples, ranges and arrays become lists, numpy scalars Python ones."""
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, range, np.ndarray)):
        return [_jsonable(v) for v in value]
    if isinstance(value, np.bool_):
        return bool(value)
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating):
        return float(value)
    if isinstance(value, np.str_):
        return str(value)
    return value


def _index_array(indices: Any) -> np.ndarray:
    arr = np.sort(np.asarray(indices, dtype=np.int64).reshape(-1))
    arr.flags.writeable = False
    return arr


@dataclass(frozen=True, eq=False)
class Partition:
    """Disjoint client index sets into the train split, plus what made them.

    ``params`` holds every keyword argument of the scheme (``num_classes`` and
    ``seed`` included), normalised to JSON types, so
    ``make_partition(p.scheme, labels, writers, **p.params)`` rebuilds ``p``.
    """

    clients: tuple[np.ndarray, ...]
    num_classes: int
    minority_classes: tuple[int, ...] = ()
    scheme: str = ""
    params: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        clients = tuple(_index_array(c) for c in self.clients)
        pooled = np.concatenate(clients) if clients else np.empty(0, np.int64)
        if pooled.size and pooled.min() < 0:
            raise PartitionError("client indices must be non-negative")
        if np.unique(pooled).size != pooled.size:
            raise PartitionError("clients are not pairwise disjoint")
        object.__setattr__(self, "clients", clients)
        object.__setattr__(self, "num_classes", int(self.num_classes))
        object.__setattr__(self, "minority_classes", tuple(int(c) for c in self.minority_classes))
        object.__setattr__(self, "params", _jsonable(dict(self.params)))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Partition):
            return NotImplemented
        return (
            self.num_classes == other.num_classes
            and self.minority_classes == other.minority_classes
            and self.scheme == other.scheme
            and self.params == other.params
            and len(self.clients) == len(other.clients)
            and all(np.array_equal(a, b) for a, b in zip(self.clients, other.clients))
        )

    __hash__ = None  # type: ignore[assignment]

    @property
    def num_clients(self) -> int:
        return len(self.clients)

    def class_counts(self, labels: Any) -> np.ndarray:
        """``[num_clients, num_classes]`` int64 matrix of per-client class counts."""
        y = _as_labels(labels, self.num_classes)
        rows = [composition(y, c, self.num_classes) for c in self.clients]
        return np.stack(rows) if rows else np.zeros((0, self.num_classes), np.int64)

    def stats(self, labels: Any) -> dict:
        """Compositions and the paper's imbalance measures.

        ``gamma`` is the realised global Γ (``inf`` when a class has no sample at
        all); ``local_gamma`` is each client's max/min over the classes it holds
        (``nan`` for an empty client); ``cs`` is ``CS_j`` against the global
        composition ``V`` and ``mean_cs`` their mean over clients.
        """
        counts = self.class_counts(labels)
        total = counts.sum(axis=0)
        gamma = float(total.max() / total.min()) if total.size and total.min() > 0 else math.inf
        local_gamma = [
            float(row[row > 0].max() / row[row > 0].min()) if row.any() else math.nan
            for row in counts
        ]
        cs = [cosine_similarity(row, total) for row in counts]
        return {
            "class_counts": counts.tolist(),
            "global_counts": total.tolist(),
            "gamma": gamma,
            "local_gamma": local_gamma,
            "cs": cs,
            "mean_cs": float(np.mean(cs)) if cs else math.nan,
            "num_samples": counts.sum(axis=1).tolist(),
        }

    def to_json(self) -> dict:
        """JSON-ready dict; :meth:`from_json` inverts it exactly."""
        return {
            "scheme": self.scheme,
            "num_classes": self.num_classes,
            "minority_classes": list(self.minority_classes),
            "params": self.params,
            "clients": [c.tolist() for c in self.clients],
        }

    @classmethod
    def from_json(cls, d: dict) -> Partition:
        return cls(
            clients=tuple(np.asarray(c, dtype=np.int64) for c in d["clients"]),
            num_classes=d["num_classes"],
            minority_classes=tuple(d.get("minority_classes", ())),
            scheme=d.get("scheme", ""),
            params=d.get("params", {}),
        )

    def pooled(self) -> np.ndarray:
        """All indices of all clients, sorted (the centralised, non-FL training set)."""
        if not self.clients:
            return np.empty(0, np.int64)
        return np.sort(np.concatenate(self.clients))


def cosine_similarity(a: Any, b: Any) -> float:
    """``a . b / (|a| |b|)``; 0.0 when either vector is zero (as scikit-learn)."""
    a = np.asarray(a, dtype=np.float64).reshape(-1)
    b = np.asarray(b, dtype=np.float64).reshape(-1)
    norm = float(np.linalg.norm(a) * np.linalg.norm(b))
    return float(a @ b / norm) if norm > 0 else 0.0


def composition(labels: Any, indices: Any, num_classes: int) -> np.ndarray:
    """Class counts (int64, length ``num_classes``) of the samples at ``indices``."""
    y = _as_labels(labels, num_classes)
    idx = np.asarray(indices, dtype=np.int64).reshape(-1)
    return np.bincount(y[idx], minlength=num_classes).astype(np.int64)


def _as_labels(labels: Any, num_classes: int) -> np.ndarray:
    y = np.asarray(labels)
    if y.ndim != 1 or (y.size and not np.issubdtype(y.dtype, np.integer)):
        raise PartitionError(f"labels must be a 1-D integer array, got {y.dtype} of shape {y.shape}")
    if num_classes < 1:
        raise PartitionError(f"num_classes must be >= 1, got {num_classes}")
    if y.size and (y.min() < 0 or y.max() >= num_classes):
        raise PartitionError(f"labels must lie in [0, {num_classes}), found {y.min()}..{y.max()}")
    return y.astype(np.int64, copy=False)


def _positive_int(name: str, value: int) -> int:
    if int(value) != value or value < 1:
        raise PartitionError(f"{name} must be a positive integer, got {value}")
    return int(value)


def _check_minority(minority_classes: Iterable[int], num_classes: int) -> tuple[int, ...]:
    minority = tuple(int(c) for c in minority_classes)
    bad = [c for c in minority if not 0 <= c < num_classes]
    if bad:
        raise PartitionError(f"minority_classes {bad} not in [0, {num_classes})")
    if len(set(minority)) != len(minority):
        raise PartitionError(f"minority_classes has duplicates: {list(minority)}")
    return minority


def _rng(seed: Any) -> np.random.Generator:
    """``np.random.default_rng(seed)`` for a seed that fixes the draw: a non-negative integer (None, which would draw
    fresh entropy, a float, a bool or a negative number: PartitionError naming the seed)."""
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise PartitionError(f"seed must be a non-negative integer (it fixes the partition), got {seed!r}")
    return np.random.default_rng(int(seed))


def _check_gamma(gamma: float) -> float:
    if not (math.isfinite(gamma) and gamma >= 1):
        raise PartitionError(f"gamma must be a finite number >= 1, got {gamma}")
    return gamma


def shortfall(need: Any, have: Any, names: Any = None) -> list[str]:
    """One phrase per class whose demand ``need`` exceeds its supply ``have`` ("class 1 (disgust) needs 3500
    samples, has 436"); ``names``: the classes' names, when known."""
    need, have = np.asarray(need), np.asarray(have)
    label = (lambda p: f"class {p} ({names[p]})") if names is not None else (lambda p: f"class {p}")
    return [f"{label(p)} needs {need[p]} samples, has {have[p]}" for p in range(need.size) if need[p] > have[p]]


def _check_supply(need: np.ndarray, have: np.ndarray, knob: str) -> None:
    """PartitionError naming the classes (three, then a count) of which ``need`` asks more than ``have``."""
    short = shortfall(need, have)
    if short:
        shown = short if len(short) <= 3 else short[:3] + [f"{len(short) - 3} more classes"]
        raise PartitionError(
            f"partition.{knob} and partition.num_clients ask more samples than the dataset has: "
            + "; ".join(shown)
            + f"; lower partition.{knob} or partition.num_clients"
        )


def _draw_samples(
    labels: np.ndarray, holders: np.ndarray, per_class: np.ndarray, rng: np.random.Generator, knob: str
) -> tuple[np.ndarray, ...]:
    """Give every holder of class p ``per_class[p]`` random samples of p, without replacement.

    Class by class (ascending), a random permutation of the class's samples is
    cut into consecutive chunks for its holders in ascending client order. ``knob`` names the
    parameter that sets ``per_class``, for the error when a class has too few samples.
    """
    num_clients, num_classes = holders.shape
    need = holders.sum(axis=0) * per_class
    _check_supply(need, np.bincount(labels, minlength=num_classes), knob)
    parts: list[list[np.ndarray]] = [[] for _ in range(num_clients)]
    for p in range(num_classes):
        who = np.flatnonzero(holders[:, p])
        if who.size == 0:
            continue
        pool = rng.permutation(np.flatnonzero(labels == p))[: need[p]]
        for j, chunk in zip(who, np.split(pool, who.size)):
            parts[j].append(chunk)
    return tuple(np.concatenate(c) if c else np.empty(0, np.int64) for c in parts)


def _monitor_holders(num_clients: int, num_classes: int, rng: np.random.Generator) -> np.ndarray:
    """Client x class incidence of the monitor scheme: each client draws 1..Q, then that many distinct classes."""
    holders = np.zeros((num_clients, num_classes), dtype=bool)
    for j in range(num_clients):
        k = int(rng.integers(1, num_classes + 1))
        holders[j, rng.choice(num_classes, size=k, replace=False)] = True
    return holders


def monitor_partition(
    labels: Any, *, num_classes: int, num_clients: int = 100, samples_per_class: int = 50, seed: int
) -> Partition:
    """Monitor experiments: random classes, equal samples per class.

    Each client draws its number of classes uniformly from 1..Q, then that many
    distinct classes uniformly at random, and gets ``samples_per_class`` random
    samples of each, without replacement across clients (paper: 100 clients,
    50 samples per class).
    """
    y = _as_labels(labels, num_classes)
    num_clients = _positive_int("num_clients", num_clients)
    samples_per_class = _positive_int("samples_per_class", samples_per_class)
    rng = _rng(seed)
    holders = _monitor_holders(num_clients, num_classes, rng)
    per_class = np.full(num_classes, samples_per_class, dtype=np.int64)
    params = dict(num_classes=num_classes, num_clients=num_clients, samples_per_class=samples_per_class, seed=seed)
    return Partition(_draw_samples(y, holders, per_class, rng, "samples_per_class"), num_classes, (), "monitor", params)


def _classes_per_client(
    num_clients: int, num_classes: int, lo: int, hi: int, rng: np.random.Generator
) -> np.ndarray:
    """Per-client class counts in [lo, hi] whose sum is a multiple of ``num_classes``.

    Counts are drawn uniformly from lo..hi, then random clients with room are
    moved one step at a time to the nearest reachable multiple (down or up).
    """
    if not 1 <= lo <= hi <= num_classes:
        raise PartitionError(f"need 1 <= min_classes <= max_classes <= num_classes={num_classes}, got {lo}..{hi}")
    if num_clients * hi < num_classes:
        raise PartitionError(
            f"num_clients*max_classes = {num_clients * hi} < num_classes={num_classes}: some class would have no client"
        )
    top = num_clients * hi // num_classes * num_classes
    if top < num_clients * lo:
        raise PartitionError(
            f"no total of {num_clients} clients x {lo}..{hi} classes is a multiple of num_classes={num_classes} "
            f"(needed so every class is held by the same number of clients)"
        )
    k = rng.integers(lo, hi + 1, size=num_clients)
    total = int(k.sum())
    down, up = total % num_classes, -total % num_classes
    feasible = [(down, -1)] if total - down >= num_clients * lo else []
    feasible += [(up, 1)] if total + up <= num_clients * hi else []
    moves, step = min(feasible, key=lambda m: (m[0], rng.random()))
    for _ in range(moves):
        k[rng.choice(np.flatnonzero(k > lo) if step < 0 else np.flatnonzero(k < hi))] += step
    return k


def _balanced_design(k: np.ndarray, num_classes: int, rng: np.random.Generator, sweeps: int = 10) -> np.ndarray:
    """Random 0/1 client x class matrix with row sums ``k`` and equal column sums.

    Built greedily (each client, in random order, takes the classes still needed
    most, ties at random; this never fails because the remaining needs stay within
    one of each other), then randomised by ``sweeps * sum(k)`` checkerboard
    interchanges (Ryser): swap x in A\\B with y in B\\A. The proposal is symmetric,
    so the chain's stationary law is uniform over all designs with these margins.
    """
    num_clients = k.size
    need = np.full(num_classes, int(k.sum()) // num_classes)
    design = np.zeros((num_clients, num_classes), dtype=bool)
    for j in rng.permutation(num_clients):
        chosen = np.lexsort((rng.random(num_classes), -need))[: k[j]]
        design[j, chosen] = True
        need[chosen] -= 1
    if num_clients < 2:
        return design
    steps = sweeps * int(k.sum())
    a = rng.integers(num_clients, size=steps)
    b = (a + rng.integers(1, num_clients, size=steps)) % num_clients
    u = rng.random((steps, 2))
    for t in range(steps):
        only_a = np.flatnonzero(design[a[t]] & ~design[b[t]])
        only_b = np.flatnonzero(design[b[t]] & ~design[a[t]])
        if only_a.size and only_b.size:
            x = only_a[int(u[t, 0] * only_a.size)]
            y = only_b[int(u[t, 1] * only_b.size)]
            design[a[t], x] = design[b[t], y] = False
            design[a[t], y] = design[b[t], x] = True
    return design


def samples_per_class(
    num_classes: int, majority_samples: int, gamma: float, minority_classes: Iterable[int],
    balanced_samples: int | None = None,
) -> np.ndarray:
    """Samples each holder of a class gets (paper, Supplementary "Data Splitting": 250 per majority class, 250/Γ per
    minority class): ``majority_samples``, and ``max(1, round(majority_samples / gamma))`` for a minority class; at
    Γ = 1 every class gets ``balanced_samples`` when it is set (a dataset whose rarest class cannot supply the
    majority share balanced: docs/deviations.md, Fer2013)."""
    gamma = _check_gamma(gamma)
    if gamma == 1 and balanced_samples is not None:
        return np.full(num_classes, _positive_int("balanced_samples", balanced_samples), dtype=np.int64)
    per_class = np.full(num_classes, _positive_int("majority_samples", majority_samples), dtype=np.int64)
    per_class[list(_check_minority(minority_classes, num_classes))] = max(1, round(majority_samples / gamma))
    return per_class


def _imbalance_plan(
    num_classes: int, num_clients: int, min_classes: int, max_classes: int, majority_samples: int, gamma: float,
    minority_classes: Iterable[int], balanced_samples: int | None, rng: np.random.Generator,
) -> tuple[np.ndarray, np.ndarray]:
    """(classes per client k, samples per class): the draws before the incidence design, so ``class_demand`` and
    the scheme consume the generator alike. Every class is held by ``k.sum() / Q`` clients."""
    num_clients = _positive_int("num_clients", num_clients)
    per_class = samples_per_class(num_classes, majority_samples, gamma, minority_classes, balanced_samples)
    return _classes_per_client(num_clients, num_classes, int(min_classes), int(max_classes), rng), per_class


def _imbalance(
    labels: Any,
    num_classes: int,
    num_clients: int,
    min_classes: int,
    max_classes: int,
    majority_samples: int,
    gamma: float,
    minority_classes: Iterable[int],
    balanced_samples: int | None,
    seed: int,
) -> tuple[tuple[np.ndarray, ...], tuple[int, ...]]:
    y = _as_labels(labels, num_classes)
    minority = _check_minority(minority_classes, num_classes)
    rng = _rng(seed)
    k, per_class = _imbalance_plan(num_classes, num_clients, min_classes, max_classes, majority_samples, gamma,
                                   minority, balanced_samples, rng)
    knob = "balanced_samples" if gamma == 1 and balanced_samples is not None else "majority_samples"
    _check_supply(int(k.sum()) // num_classes * per_class, np.bincount(y, minlength=num_classes), knob)
    holders = _balanced_design(k, num_classes, rng)
    return _draw_samples(y, holders, per_class, rng, knob), minority


def _optional(**params: Any) -> dict[str, Any]:
    """The optional keyword arguments that are set (a partition's ``params`` records only those)."""
    return {k: v for k, v in params.items() if v is not None}


def imbalance_partition(
    labels: Any,
    *,
    num_classes: int,
    num_clients: int = 20,
    min_classes: int = 3,
    max_classes: int = 6,
    majority_samples: int = 250,
    gamma: float = 1.0,
    minority_classes: Iterable[int] = (2, 4, 7),
    balanced_samples: int | None = None,
    seed: int,
) -> Partition:
    """Loss comparison (tables Res_3_datasets, Sup_majority*): fixed global Γ.

    Each client holds ``min_classes..max_classes`` distinct classes and gets
    ``majority_samples`` random samples of each majority class and
    ``max(1, round(majority_samples / gamma))`` of each minority class (``samples_per_class``;
    at Γ = 1, ``balanced_samples`` of every class when set). Rounding is
    Python's ``round`` (half to even): 250/20 = 12.5 -> 12 and 250/100 = 2.5 -> 2,
    so the realised Γ is 250/12 and 125 for the nominal 20 and 100.

    The client x class incidence is a balanced design: every class is held by the
    same number m of clients (per-client class counts are drawn uniformly, then
    nudged so their sum is m*Q), so the global totals are ``majority_samples*m``
    and ``minority_count*m`` and the realised Γ is exactly their ratio. A range
    with no sum divisible by Q (e.g. ``num_clients*max_classes < Q``) raises
    :class:`PartitionError`.
    """
    clients, minority = _imbalance(
        labels, num_classes, num_clients, min_classes, max_classes, majority_samples, gamma, minority_classes,
        balanced_samples, seed,
    )
    params = dict(
        num_classes=num_classes,
        num_clients=num_clients,
        min_classes=min_classes,
        max_classes=max_classes,
        majority_samples=majority_samples,
        gamma=gamma,
        minority_classes=minority,
        **_optional(balanced_samples=balanced_samples),
        seed=seed,
    )
    return Partition(clients, num_classes, minority, "imbalance", params)


def mismatch_partition(
    labels: Any,
    *,
    num_classes: int,
    classes_per_client: int,
    num_clients: int = 20,
    majority_samples: int = 250,
    gamma: float = 10.0,
    minority_classes: Iterable[int] = (2, 4, 7),
    balanced_samples: int | None = None,
    seed: int,
) -> Partition:
    """Local/global mismatch (Sup_MFE, Res_mismatch): every client holds exactly c classes.

    :func:`imbalance_partition` with ``min_classes = max_classes = classes_per_client``;
    fewer classes per client give a lower mean CS (for Γ = 1 it is exactly
    sqrt(c/Q)). Exact Γ needs ``num_clients * c`` divisible by Q, else
    :class:`PartitionError` (e.g. Q = 7 with 20 clients: use 14 or 21).
    """
    clients, minority = _imbalance(
        labels,
        num_classes,
        num_clients,
        classes_per_client,
        classes_per_client,
        majority_samples,
        gamma,
        minority_classes,
        balanced_samples,
        seed,
    )
    params = dict(
        num_classes=num_classes,
        classes_per_client=classes_per_client,
        num_clients=num_clients,
        majority_samples=majority_samples,
        gamma=gamma,
        minority_classes=minority,
        **_optional(balanced_samples=balanced_samples),
        seed=seed,
    )
    return Partition(clients, num_classes, minority, "mismatch", params)


def writer_partition(
    labels: Any,
    writers: Any,
    *,
    num_classes: int,
    num_clients: int = 100,
    writers_per_client: int = 20,
    gamma: float = 1.0,
    minority_classes: Iterable[int] = range(7),
    seed: int,
    exclude_writers: Iterable[Any] = (),
) -> Partition:
    """FEMNIST: whole writers grouped into clients, minority classes thinned to N_o/Γ.

    ``num_clients * writers_per_client`` distinct writers (not in
    ``exclude_writers``) are drawn at random and dealt ``writers_per_client`` to a
    client with all their samples. For ``gamma > 1`` each minority class o (in
    ascending order) is thinned: with N_o its total over the chosen clients,
    clients are visited in a fresh random order and lose all their samples of o
    until ``max(1, floor(N_o / gamma))`` remain; the last client visited loses a
    random subset. So at most one client per minority class holds part of its
    original samples of o. A minority class absent from the chosen writers raises
    :class:`PartitionError`.
    """
    y = _as_labels(labels, num_classes)
    w = np.asarray(writers)
    if w.shape != y.shape:
        raise PartitionError(f"writers has shape {w.shape}, labels {y.shape}")
    num_clients = _positive_int("num_clients", num_clients)
    writers_per_client = _positive_int("writers_per_client", writers_per_client)
    gamma = _check_gamma(gamma)
    minority = _check_minority(minority_classes, num_classes)
    excluded = list(exclude_writers)
    ids = np.unique(w)
    free = np.flatnonzero(~np.isin(ids, np.asarray(excluded, dtype=ids.dtype))) if excluded else np.arange(ids.size)
    wanted = num_clients * writers_per_client
    if wanted > free.size:
        raise PartitionError(
            f"needs {wanted} writers ({num_clients} clients x {writers_per_client}), "
            f"{free.size} available ({ids.size} in data, {ids.size - free.size} excluded)"
        )
    rng = _rng(seed)
    owner_of_writer = np.full(ids.size, -1, dtype=np.int64)
    owner_of_writer[rng.permutation(free)[:wanted]] = np.repeat(np.arange(num_clients), writers_per_client)
    owner = owner_of_writer[np.searchsorted(ids, w)]
    if gamma > 1:
        for o in sorted(minority):
            total = int(np.count_nonzero((owner >= 0) & (y == o)))
            if total == 0:
                raise PartitionError(f"minority class {o} has no samples among the chosen writers")
            excess = total - max(1, math.floor(total / gamma))
            for j in rng.permutation(num_clients):
                if excess == 0:
                    break
                held = np.flatnonzero((owner == j) & (y == o))
                if held.size > excess:
                    held = rng.choice(held, size=excess, replace=False)
                owner[held] = -1
                excess -= held.size
    order = np.argsort(owner, kind="stable")
    bounds = np.searchsorted(owner[order], np.arange(num_clients + 1))
    clients = tuple(order[bounds[j] : bounds[j + 1]] for j in range(num_clients))
    params = dict(
        num_classes=num_classes,
        num_clients=num_clients,
        writers_per_client=writers_per_client,
        gamma=gamma,
        minority_classes=minority,
        seed=seed,
        exclude_writers=excluded,
    )
    return Partition(clients, num_classes, minority, "writers", params)


def unused_writers(partition: Partition, writers: Any) -> np.ndarray:
    """Sorted writer ids with no sample in any client (source of FEMNIST auxiliary data).

    A chosen writer whose every sample was removed by thinning counts as unused.
    """
    w = np.asarray(writers)
    return np.setdiff1d(np.unique(w), np.unique(w[partition.pooled()]))


def class_demand(scheme: str, *, num_classes: int, seed: int, **params: Any) -> np.ndarray:
    """Samples of each class that ``make_partition(scheme, ..., seed=seed, **params)`` takes from the training split,
    from the scheme's own draws before any sample is chosen: no labels needed (the shipped configs are checked
    against the real datasets' class counts with it, ``fedbalance.data.structures``). The writers scheme takes whole
    writers, not counts: PartitionError."""
    rng = _rng(seed)
    if scheme == "monitor":
        holders = _monitor_holders(_positive_int("num_clients", params["num_clients"]), num_classes, rng)
        return holders.sum(axis=0) * _positive_int("samples_per_class", params["samples_per_class"])
    if scheme in ("imbalance", "mismatch"):
        lo, hi = ((params["min_classes"], params["max_classes"]) if scheme == "imbalance"
                  else (params["classes_per_client"],) * 2)
        k, per_class = _imbalance_plan(
            num_classes, params["num_clients"], lo, hi, params["majority_samples"], params["gamma"],
            params.get("minority_classes", ()), params.get("balanced_samples"), rng,
        )
        return int(k.sum()) // num_classes * per_class
    raise PartitionError(f"scheme {scheme!r} takes whole writers: it has no class demand")


SCHEMES: dict[str, Callable[..., Partition]] = {
    "monitor": monitor_partition,
    "imbalance": imbalance_partition,
    "mismatch": mismatch_partition,
    "writers": writer_partition,
}


def make_partition(scheme: str, labels: Any, writers: Any = None, **params: Any) -> Partition:
    """Build a partition by scheme name; ``writers`` is used (and required) only by "writers"."""
    if scheme not in SCHEMES:
        raise ValueError(f"unknown partition scheme {scheme!r}; choose from {sorted(SCHEMES)}")
    takes = [p for p in inspect.signature(SCHEMES[scheme]).parameters if p not in ("labels", "writers")]
    unknown = sorted(set(params) - set(takes))
    if unknown:
        raise PartitionError(f"partition scheme {scheme!r} takes no parameter {', '.join(map(repr, unknown))}; "
                             f"it takes {takes}")
    if scheme == "writers":
        if writers is None:
            raise PartitionError("scheme 'writers' needs the writer id of every sample")
        return writer_partition(labels, writers, **params)
    return SCHEMES[scheme](labels, **params)


def spec_partitions(spec: Mapping[str, Any] | JobSpec, labels: Any, writers: Any = None, *, num_classes: int) -> dict[str, Partition]:
    """A job's partitions from its spec: "main", and "balanced" when ``switch_round`` is set (``job_partitions``).

    The one place that reads a job spec's partition keys, seed and ``switch_round``: the engine, the
    workflow's partition rule and the cost estimate all build a job's partitions here.
    """
    spec = as_spec(spec)
    scheme, kwargs = partition_args(spec)
    return job_partitions(scheme, kwargs, labels, writers, num_classes=num_classes, seed=spec.seed,
                          balanced=spec.switch_round is not None)


def job_partitions(
    scheme: str, params: Mapping[str, Any], labels: Any, writers: Any = None, *, num_classes: int, seed: int,
    balanced: bool = False,
) -> dict[str, Partition]:
    """{"main": the job's partition, "balanced": the same with gamma = 1 when ``balanced``}.

    ``balanced`` serves early acknowledgment (train on the balanced data from ``switch_round`` on);
    both partitions are drawn with the job's seed.
    """
    out = {"main": make_partition(scheme, labels, writers, num_classes=num_classes, seed=seed, **params)}
    if balanced:
        if "gamma" not in params:
            raise PartitionError(f"switch_round needs a partition scheme with gamma; {scheme!r} has none")
        out["balanced"] = make_partition(scheme, labels, writers, num_classes=num_classes, seed=seed, **{**params, "gamma": 1})
    return out


def save_partitions(partitions: Mapping[str, Partition], path: str | Path) -> None:
    """Write {name: Partition.to_json()} to ``path`` atomically."""
    payload = {name: p.to_json() for name, p in partitions.items()}
    atomic_write(path, lambda fh: json.dump(payload, fh))


def load_partitions(path: str | Path) -> dict[str, Partition]:
    """Read a file written by ``save_partitions``."""
    path = Path(path)
    if not path.is_file():
        raise PartitionError(f"partition file {path} does not exist")
    try:
        payload = json.loads(path.read_text())
        return {name: Partition.from_json(d) for name, d in payload.items()}
    except (json.JSONDecodeError, KeyError, TypeError, AttributeError) as exc:
        raise PartitionError(f"{path}: not a partition file ({exc})") from exc
