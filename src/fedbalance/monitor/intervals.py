"""How sure the monitor is: a 95 % interval for every class's share of a round, from split-conformal calibration.

The score of class c in a round is the signed log ratio of the true share p_c to the estimated share p̂_c,

    r = log((p_c + ε) / (p̂_c + ε)),   ε = ``FLOOR``,

and the interval of a new round is p̂ read through the calibration rounds' quantiles of r:

    [(p̂_c + ε) e^{lo} − ε,  (p̂_c + ε) e^{hi} − ε]   clipped to [0, 1],

lo and hi the ⌊(α/2)(n+1)⌋-th and ⌈(1 − α/2)(n+1)⌉-th smallest of the n calibration scores of the same group
(split conformal with one quantile per tail, so each tail misses at most α/2 of the time). Groups (Mondrian
conformal) are built only from what the server knows: the estimator, the protocol (``protocol``), the round
(``ROUND_EDGES``) and the estimated share times Q (``SHARE_EDGES``); never the class's name or the true Γ. Coverage
≥ 1 − α holds when a new round's score is exchangeable with its group's calibration scores (docs/monitor.md,
"How sure the monitor is").
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

import numpy as np

ALPHA = 0.05
"""1 − the intervals' nominal coverage."""

FLOOR = 1e-3
"""ε of the score: shares are compared on a log scale above about 0.1 % of the round."""

SHARE_EDGES: tuple[float, ...] = (0.25, 0.5, 0.75, 1.0, 1.25, 1.5)
"""Edges of the groups on Q·p̂ (the estimated share against the uniform share 1/Q)."""

ROUND_EDGES: tuple[int, ...] = (1, 5)
"""Edges of the groups on the round: round 0, rounds 1–4, rounds 5 on."""

MINORITY_FRACTION = 0.5
"""A class is a minority class of its round when its share is below this fraction of 1/Q (the truth: its true
share; the monitor: its interval's upper end; the point estimate: p̂)."""

RANDOM, FIXED, CENTRALISED = "random", "fixed", "centralised"
PROTOCOLS: tuple[str, ...] = (RANDOM, FIXED, CENTRALISED)

CALIBRATION_FILE = "calibrations/monitor_intervals.json"
"""The shipped calibration (package data), fitted on the fit part of the reference set (``evidence.coverage``)."""


def protocol(mode: str, selection: str) -> str:
    """The protocol a round's composition comes from, as the server knows it: ``centralised`` (one pooled data set),
    ``random`` (clients drawn at random each round) or ``fixed`` (the same clients every round)."""
    if mode == "centralised":
        return CENTRALISED
    return RANDOM if selection == "random" else FIXED


def log_share_ratio(true_share: Any, est_share: Any, floor: float = FLOOR) -> np.ndarray:
    """The conformal score r = log((p + ε) / (p̂ + ε)) (positive where the estimate is too small)."""
    return np.log((np.asarray(true_share, float) + floor) / (np.asarray(est_share, float) + floor))


def share_bin(est_share: Any, q: int) -> np.ndarray:
    """The group index of Q·p̂ on ``SHARE_EDGES`` (0 .. len(SHARE_EDGES))."""
    return np.searchsorted(SHARE_EDGES, np.asarray(est_share, float) * q, side="right")


def round_bin(rounds: Any) -> np.ndarray:
    """The group index of the round on ``ROUND_EDGES``."""
    return np.searchsorted(ROUND_EDGES, np.asarray(rounds), side="right")


def conformal_bounds(scores: Sequence[float] | np.ndarray, alpha: float = ALPHA) -> tuple[float, float]:
    """(lo, hi): the ⌊(α/2)(n+1)⌋-th and ⌈(1 − α/2)(n+1)⌉-th smallest of ``scores`` (−inf / inf where that order
    exceeds n: too few scores to bound that tail); a new exchangeable score falls outside each with probability
    ≤ α/2."""
    s = np.sort(np.asarray(scores, float))
    n = len(s)
    k_lo = math.floor(alpha / 2 * (n + 1))
    k_hi = math.ceil((1 - alpha / 2) * (n + 1))
    lo = float(s[k_lo - 1]) if k_lo >= 1 else -math.inf
    hi = float(s[k_hi - 1]) if k_hi <= n else math.inf
    return lo, hi


def share_bounds(est_share: Any, lo: Any, hi: Any, floor: float = FLOOR) -> tuple[np.ndarray, np.ndarray]:
    """The interval [(p̂ + ε) e^lo − ε, (p̂ + ε) e^hi − ε] clipped to [0, 1], per class."""
    base = np.asarray(est_share, float) + floor
    with np.errstate(over="ignore"):
        low = base * np.exp(np.asarray(lo, float)) - floor
        high = base * np.exp(np.asarray(hi, float)) - floor
    return np.clip(low, 0.0, 1.0), np.clip(high, 0.0, 1.0)


def _key(estimator: str, proto: str, rbin: int, sbin: int) -> str:
    return f"{estimator}|{proto}|{int(rbin)}|{int(sbin)}"


@dataclass(frozen=True)
class Calibration:
    """Fitted bounds of the score per group: ``groups[key] = (lo, hi, n)``, key ``estimator|protocol|round|share``."""

    groups: Mapping[str, tuple[float, float, int]]
    alpha: float = ALPHA
    floor: float = FLOOR
    source: Mapping[str, Any] = field(default_factory=dict)

    def bounds(self, estimator: str, proto: str, rnd: int, est_share: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
        """(lo, hi) of the score for each class of one round's estimate (−inf, inf for a group not fitted)."""
        q = len(est_share)
        rb = int(round_bin(rnd))
        lo, hi = [], []
        for sb in share_bin(est_share, q):
            a, b, _ = self.groups.get(_key(estimator, proto, rb, int(sb)), (-math.inf, math.inf, 0))
            lo.append(a)
            hi.append(b)
        return np.array(lo, float), np.array(hi, float)

    def interval(self, estimator: str, proto: str, rnd: int, est_share: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
        """(low, high) shares of each class of one round's estimate ``est_share`` (shares summing to 1)."""
        lo, hi = self.bounds(estimator, proto, rnd, est_share)
        return share_bounds(est_share, lo, hi, self.floor)

    def estimators(self) -> set[str]:
        """The estimators it was fitted for."""
        return {k.split("|")[0] for k in self.groups}

    def covers(self, estimator: str, proto: str) -> bool:
        """It was fitted on rounds of ``estimator`` under protocol ``proto`` (in some group)."""
        return any(k.startswith(f"{estimator}|{proto}|") for k in self.groups)

    def to_json(self) -> dict[str, Any]:
        """A JSON document (infinite bounds as null)."""
        clean = {k: [None if not math.isfinite(a) else a, None if not math.isfinite(b) else b, n]
                 for k, (a, b, n) in sorted(self.groups.items())}
        return {"alpha": self.alpha, "floor": self.floor, "share_edges": list(SHARE_EDGES),
                "round_edges": list(ROUND_EDGES), "source": dict(self.source), "groups": clean}

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> Calibration:
        """The inverse of ``to_json``; ValueError when its groups were cut on other edges than this module's."""
        if list(doc["share_edges"]) != list(SHARE_EDGES) or list(doc["round_edges"]) != list(ROUND_EDGES):
            raise ValueError("monitor interval calibration: fitted on other group edges than fedbalance.monitor."
                             "intervals' SHARE_EDGES / ROUND_EDGES: refit it (benchmarks/monitor_intervals.py --write)")
        groups = {k: (-math.inf if a is None else float(a), math.inf if b is None else float(b), int(n))
                  for k, (a, b, n) in doc["groups"].items()}
        return cls(groups, float(doc["alpha"]), float(doc["floor"]), dict(doc.get("source", {})))


def fit(estimator: Iterable[str], proto: Iterable[str], rounds: Any, est_share: Any, true_share: Any, q: int,
        alpha: float = ALPHA, floor: float = FLOOR, source: Mapping[str, Any] | None = None) -> Calibration:
    """The calibration of the given scores: one (lo, hi) pair (``conformal_bounds``) per group, from parallel arrays
    of one entry per class and round (``q`` classes)."""
    est = np.asarray(list(estimator))
    pro = np.asarray(list(proto))
    rb = round_bin(rounds)
    sb = share_bin(est_share, q)
    score = log_share_ratio(true_share, est_share, floor)
    keys = np.char.add(np.char.add(np.char.add(np.char.add(est, "|"), pro), "|"),
                       np.char.add(np.char.add(rb.astype(str), "|"), sb.astype(str)))
    order = np.argsort(keys, kind="stable")
    keys, score = keys[order], score[order]
    uniq, start = np.unique(keys, return_index=True)
    ends = [*start[1:], len(keys)]
    groups = {str(k): (*conformal_bounds(score[a:b], alpha), int(b - a)) for k, a, b in zip(uniq, start, ends)}
    return Calibration(groups, alpha, floor, dict(source or {}))


@functools.cache
def shipped() -> Calibration | None:
    """The shipped calibration (``CALIBRATION_FILE``), None when the package holds none (read once)."""
    path = resources.files("fedbalance").joinpath(CALIBRATION_FILE)
    if not path.is_file():
        return None
    return Calibration.from_json(json.loads(path.read_text()))


def named_minority(high_share: Any, q: int, fraction: float = MINORITY_FRACTION) -> np.ndarray:
    """The classes a round's intervals name as minority: upper end below ``fraction`` / Q (also the truth's and the
    point estimate's rule, given the true or estimated share)."""
    return np.asarray(high_share, float) < fraction / q


def binomial_interval(hits: int, n: int, level: float = 1 - ALPHA) -> tuple[float, float]:
    """Clopper–Pearson interval of a proportion ``hits`` / ``n`` (``scipy.stats.binomtest``); (nan, nan) for n = 0."""
    if n == 0:
        return math.nan, math.nan
    from scipy.stats import binomtest

    ci = binomtest(int(hits), int(n)).proportion_ci(level, method="exact")
    return float(ci.low), float(ci.high)


def count_interval(calibration: Calibration, estimator: str, proto: str, rnd: int,
                   counts: Sequence[float]) -> tuple[list[float], list[float]] | None:
    """(low, high) counts of each class of one round's estimate ``counts`` (the round's total times the share
    interval); None when ``estimator`` was not calibrated under protocol ``proto`` or the total is not positive (a
    group of the two without calibration rounds gives the whole [0, total])."""
    total = float(sum(counts))
    if not calibration.covers(estimator, proto) or not total > 0:
        return None
    low, high = calibration.interval(estimator, proto, rnd, [c / total for c in counts])
    return [float(v) * total for v in low], [float(v) * total for v in high]
