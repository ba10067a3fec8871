"""Composition estimators as one registry: each is one function and one ``@estimator`` line.

An estimator turns what the server sees into the round's class counts v_pt. Two kinds:

* **per round** (``history=False``): reads ``RoundInputs`` — the per-class copies' updates dW, the
  global model's change dG, the aux counts, the selected clients' totals, G_t and G_{t+1}.
* **history** (``history=True``): reads the ``Track`` — every round so far (this one included):
  its per-round estimates, the selected clients' ids and totals. ``requires`` names the per-round
  estimators it reads, which therefore run too.

``Observer`` is what the run (``fedbalance.engine.fl``) and ``fedbalance.jobs.replay`` call every round: it
owns the monitor and the track, runs the requested estimators in order and appends the round to
the track. ``track_estimates`` computes the history estimators of a track alone, from recorded
per-round estimates (``fedbalance.jobs.replay.recorded``: no model needed). The names written to
rounds.csv for the built-in estimators are ``fedbalance.common.records.ESTIMATORS`` (tests keep the two equal).
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn

from fedbalance.common import plugins
from fedbalance.monitor.monitor import (
    POOLED_BASE,
    Estimate,
    Monitor,
    estimate_composition,
    estimate_label_recovery,
    estimate_simulated,
    pooled_counts,
    uniform_guess,
)
from fedbalance.monitor.drift import estimate_drift
from fedbalance.monitor.readings import round_weights
from fedbalance.common.records import DRIFT, DRIFT_POOLED, POOLED, RLU, RLU_POOLED, SHARPENED, SHRUNK, est_column


@dataclass
class RoundInputs:
    """What the server has in round t for a per-round estimator (dW is computed once, when first read)."""

    monitor: Monitor
    model_t: nn.Module
    state_t1: dict[str, Tensor]
    totals: list[int]
    generator: torch.Generator
    loss_fn: nn.Module | None = None
    """The loss the round's clients trained with (π fed), when the caller has it (the run and replays do)."""
    _dW: Tensor | None = None

    @property
    def dW(self) -> Tensor:
        """Monitor step 1: [Q, Q, s], one copy of G_t per class trained on that class's aux samples."""
        if self._dW is None:
            self._dW = self.monitor.updates(self.model_t, self.generator)
        return self._dW

    @property
    def dG(self) -> Tensor:
        """W(G_{t+1}) - W(G_t), shape [Q, s]."""
        key = self.monitor.weight_key
        w_t = self.model_t.state_dict()[key].detach()
        return self.state_t1[key].detach().to(w_t.device) - w_t


@dataclass
class Track:
    """The rounds so far, as the server saw them: selected client ids (any hashable key), their totals,
    and each round's estimates (name -> counts). The last entry is the current round."""

    clients: list[list[Hashable]] = field(default_factory=list)
    totals: list[list[int]] = field(default_factory=list)
    estimates: list[dict[str, list[float]]] = field(default_factory=list)

    def add(self, clients: Sequence[Hashable], totals: Sequence[int], estimates: Mapping[str, Sequence[float]]) -> None:
        """Append one round."""
        self.clients.append(list(clients))
        self.totals.append([int(n) for n in totals])
        self.estimates.append({k: [float(v) for v in c] for k, c in estimates.items()})

    def series(self, name: str) -> list[list[float]]:
        """Estimator ``name``'s estimate of every round so far."""
        return [e[name] for e in self.estimates]

    @property
    def num_classes(self) -> int:
        return len(next(iter(self.estimates[-1].values())))


@dataclass(frozen=True)
class Estimator:
    """One registry entry: ``fn(RoundInputs)`` (per round) or ``fn(Track)`` (history) -> Estimate."""

    name: str
    fn: Callable[[Any], Estimate]
    history: bool = False
    requires: tuple[str, ...] = ()


REGISTRY: dict[str, Estimator] = {}


def estimator(name: str, *, history: bool = False, requires: Sequence[str] = ()) -> Callable[[Callable[[Any], Estimate]], Callable[[Any], Estimate]]:
    """Register ``fn`` as estimator ``name`` (the one line an estimator needs besides its function)."""

    def register(fn: Callable[[Any], Estimate]) -> Callable[[Any], Estimate]:
        unknown = [r for r in requires if r not in REGISTRY or REGISTRY[r].history]
        if unknown:
            raise ValueError(f"estimator {name!r} requires {unknown}, which are not registered per-round estimators")
        REGISTRY[name] = Estimator(name, fn, history, tuple(requires))
        return fn

    return register


def entry(name: str, target: str | None = None) -> Estimator:
    """The registry entry of estimator ``name``: a registered one (``REGISTRY``), an entry point of the group
    ``fedbalance.monitor.estimators``, or ``target``, the dotted path ``module:attribute`` a config names it by (its top-level
    ``estimators``); ValueError naming an unknown one (``fedbalance.common.plugins``)."""
    if name in REGISTRY and target is None:
        return REGISTRY[name]
    plugin = plugins.resolve("estimators", target or name, () if target else REGISTRY, f"estimator {name!r}")
    assert plugin is not None
    return as_estimator(plugin.load(), name, plugin.origin())


def as_estimator(obj: Any, name: str, origin: str) -> Estimator:
    """A plug-in's object as the registry entry ``name``: an ``Estimator`` (its own name replaced) or a function of
    one argument (a per-round estimator: ``fn(RoundInputs)``). Its result may be an ``Estimate`` or the class counts
    [Q]. PluginError naming ``origin`` for anything else, or for ``requires`` that are not registered per-round
    estimators. The entry's ``fn`` guards every call (``check_counts``): an exception of the plug-in, or a result that
    is not Q finite non-negative counts, is a PluginError naming ``origin``."""
    if isinstance(obj, Estimator):
        fn, history, requires = obj.fn, obj.history, tuple(obj.requires)
    elif callable(obj):
        fn, history, requires = obj, False, ()
    else:
        raise plugins.PluginError(f"{origin}: {obj!r} is neither a fedbalance.monitor.estimators.Estimator nor a function")
    try:
        params = [p for p in inspect.signature(fn).parameters.values()
                  if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        params = []
    if len(params) != 1:
        raise plugins.PluginError(f"{origin}: an estimator is fn(RoundInputs) or, with history=True, fn(Track): one "
                                  f"argument, not {len(params)}")
    unknown = [r for r in requires if r not in REGISTRY or REGISTRY[r].history]
    if unknown:
        raise plugins.PluginError(f"{origin}: requires {unknown}, which are not registered per-round estimators "
                                  f"({sorted(k for k, e in REGISTRY.items() if not e.history)})")

    who = f"estimator {name!r} ({origin})"

    def checked(inputs: Any) -> Estimate:
        try:
            out = fn(inputs)
        except plugins.PluginError:
            raise
        except Exception as exc:  # noqa: BLE001 - any failure of user code is reported as one line naming it
            raise plugins.PluginError(f"{who}: raised {plugins.one_line(exc)}") from None
        q = inputs.monitor.num_classes if isinstance(inputs, RoundInputs) else inputs.num_classes
        counts = check_counts(out.counts if isinstance(out, Estimate) else out, q, who)
        return out if isinstance(out, Estimate) else _as_estimate(counts, name)

    return Estimator(name, checked, history, requires)


def check_counts(out: Any, num_classes: int, origin: str) -> Tensor:
    """An estimator's result as counts [Q] (float64); PluginError naming ``origin`` unless it is Q finite non-negative
    numbers (the contract of a plug-in estimator, checked on every call: docs/extending.md)."""
    try:
        counts = torch.as_tensor(out, dtype=torch.float64).detach()
    except (TypeError, ValueError, RuntimeError) as exc:
        raise plugins.PluginError(f"{origin}: returned {type(out).__name__}, not an Estimate or class counts [Q] "
                                  f"({plugins.one_line(exc)})") from None
    if counts.dim() != 1 or counts.numel() != num_classes:
        raise plugins.PluginError(f"{origin}: returned counts of shape {tuple(counts.shape)}, not [{num_classes}] (one "
                                  f"per class of the job's {num_classes})")
    bad = [i for i, v in enumerate(counts.tolist()) if not math.isfinite(v) or v < 0]
    if bad:
        raise plugins.PluginError(f"{origin}: returned counts {[round(v, 4) for v in counts.tolist()]}, class(es) {bad} "
                                  "not a finite non-negative number")
    return counts


def named_targets(items: Sequence[str]) -> tuple[list[str], dict[str, str]]:
    """Command-line estimator names: ``name`` (registered or an installed plug-in) or ``name=module:attribute`` (a
    plug-in by dotted path, as a config's top-level ``estimators``); returns the names and the name -> path map."""
    names, targets = [], {}
    for item in items:
        name, sep, path = item.partition("=")
        if sep and (not name or not plugins.is_dotted(path)):
            raise ValueError(f"estimator {item!r}: write NAME=module:attribute")
        names.append(name)
        if sep:
            targets[name] = path
    return names, targets


def plugin_origins(names: Sequence[str], targets: Mapping[str, str] | None = None) -> dict[str, dict[str, Any]]:
    """name -> ``plugins.Plugin.ran`` (package, version, origin) of each plug-in among ``names``, as installed: what a
    replay records of the estimators it scored, as a job's metrics.json does (``plugins``)."""
    targets = targets or {}
    out = {}
    for n in names:
        if n in REGISTRY and n not in targets:
            continue
        found = plugins.resolve("estimators", targets.get(n, n), () if n in targets else REGISTRY, f"estimator {n!r}")
        if found is not None:
            out[n] = found.ran()
    return out


def plan(names: Sequence[str], targets: Mapping[str, str] | None = None) -> list[Estimator]:
    """The entries to run for ``names`` (``entry``; ``targets``: name -> dotted path of the config's own plug-ins):
    their requirements first, per-round before history; ValueError on an unknown name."""
    targets = targets or {}
    unknown = [n for n in names if n not in REGISTRY and n not in targets and n not in plugins.entry_points("estimators")]
    if unknown:
        raise ValueError(f"unknown composition estimator(s) {unknown}; registered: {sorted(REGISTRY)}, plug-ins: "
                         f"{sorted(plugins.entry_points('estimators'))}")
    known = {n: entry(n, targets.get(n)) for n in names}
    wanted: dict[str, Estimator] = {}
    for n in names:
        for r in (*known[n].requires, n):
            if r not in wanted:
                wanted[r] = known.get(r) or REGISTRY[r]
    return sorted(wanted.values(), key=lambda e: e.history)


def _from_composition(method: str) -> Callable[[RoundInputs], Estimate]:
    def fn(r: RoundInputs) -> Estimate:
        m = r.monitor
        return estimate_composition(r.dW, r.dG, n_aux=m.n_aux, client_totals=r.totals, method=method, t_ra=m.t_ra,
                                    aggregation=m.aggregation)

    fn.__doc__ = f"``monitor.estimate_composition(method={method!r})``."
    return fn


estimator("paper")(_from_composition("paper"))
estimator("released")(_from_composition("released"))
estimator("nnls")(_from_composition("nnls"))
estimator("paper_signed")(_from_composition("paper_signed"))


@estimator("simulated")
def _simulated(r: RoundInputs) -> Estimate:
    """``monitor.estimate_simulated``: per-class gradients along a simulated client's trajectory."""
    m = r.monitor
    return estimate_simulated(r.model_t, r.state_t1, m.aux_x, m.aux_y, m.num_classes, m.cfg, r.totals, r.generator,
                              aggregation=m.aggregation)


@estimator(RLU)
def _rlu(r: RoundInputs) -> Estimate:
    """``monitor.estimate_label_recovery`` started from ``released``'s estimate of the same dW: the output bias's change
    solved with the aux data's confidence along a simulated local run (RLU)."""
    m = r.monitor
    start = estimate_composition(r.dW, r.dG, n_aux=m.n_aux, client_totals=r.totals, method=POOLED_BASE, t_ra=m.t_ra,
                                 aggregation=m.aggregation).counts
    return estimate_label_recovery(r.model_t, r.state_t1, m.aux_x, m.aux_y, m.num_classes, m.cfg, r.totals, r.generator,
                                   aggregation=m.aggregation, initial=start)


@estimator(DRIFT)
def _drift(r: RoundInputs) -> Estimate:
    """``drift.estimate_drift`` started from ``released``'s estimate of the same dW: the output bias's change solved
    with a simulated client trained with the round's loss."""
    m = r.monitor
    start = estimate_composition(r.dW, r.dG, n_aux=m.n_aux, client_totals=r.totals, method=POOLED_BASE, t_ra=m.t_ra,
                                 aggregation=m.aggregation).counts
    return estimate_drift(r.model_t, r.state_t1, m.aux_x, m.aux_y, m.num_classes, m.cfg, r.totals, r.generator,
                          loss_fn=r.loss_fn, initial=start, aggregation=m.aggregation)


def _client_index(track: Track) -> tuple[list[list[int]], list[float]]:
    """The track's client keys as indices 0..K-1, and each client's total (docs/monitor.md)."""
    keys: dict[Hashable, int] = {}
    selected = [[keys.setdefault(c, len(keys)) for c in ids] for ids in track.clients]
    n = [0.0] * len(keys)
    for ids, tot in zip(selected, track.totals, strict=True):
        for i, t in zip(ids, tot, strict=True):
            n[i] = float(t)
    return selected, n


def _as_estimate(counts: Tensor, name: str) -> Estimate:
    return Estimate(counts=counts, kept=torch.ones(counts.numel(), dtype=torch.long), method=name, dropped=0)


@estimator(POOLED, history=True, requires=(POOLED_BASE,))
def pooled(track: Track) -> Estimate:
    """``released``'s per-round estimates pooled through the selected clients (``monitor.pooled_counts``)."""
    selected, n = _client_index(track)
    return _as_estimate(pooled_counts(track.series(POOLED_BASE), selected, n), POOLED)


@estimator(DRIFT_POOLED, history=True, requires=(DRIFT,))
def drift_pooled(track: Track) -> Estimate:
    """``drift``'s per-round estimates pooled through the selected clients (``monitor.pooled_counts``)."""
    selected, n = _client_index(track)
    return _as_estimate(pooled_counts(track.series(DRIFT), selected, n), DRIFT_POOLED)


@estimator(RLU_POOLED, history=True, requires=(RLU,))
def rlu_pooled(track: Track) -> Estimate:
    """``rlu``'s per-round estimates pooled through the selected clients (``monitor.pooled_counts``)."""
    selected, n = _client_index(track)
    return _as_estimate(pooled_counts(track.series(RLU), selected, n), RLU_POOLED)


SHRUNK_BASE = POOLED_BASE


EVIDENCE = 4.0
"""``shrunk`` leaves the uniform guess only when ||e - u||^2 > EVIDENCE x noise (docs/monitor.md, "shrunk")."""


def shrinkage_weight(deviation: float, noise: float, evidence: float = EVIDENCE) -> float:
    """w = 1 - noise / deviation when deviation > evidence x noise, else 0 (docs/monitor.md, "shrunk").

    ``deviation`` = ||e - u||^2 of an estimate e from the uniform guess u, ``noise`` = the estimate's
    expected squared error (its variance summed over classes). w = 1 keeps e; w = 0 is the uniform guess.
    The positive-part James–Stein factor, applied only when the deviation passes a test: were the
    composition uniform, ||e - u||^2 would be noise on average. With the noise estimated from the rounds'
    spread, as ``shrunk_counts`` does, 4 x noise (a deviation twice the noise's norm) is passed by chance
    under a uniform composition in about 2e-2 of cases at round 1 (2.6e-2 for the bare F(9, 9) statistic),
    about 4e-3 at round 2 and about 1e-4 for Q = 10 Gaussian classes once many rounds pin the noise down
    (tests/test_docs.py); below it the estimate is not told from the uniform guess and the guess is returned.
    """
    if not math.isfinite(deviation) or not math.isfinite(noise) or deviation <= 0 or deviation <= evidence * noise:
        return 0.0
    return max(0.0, 1.0 - noise / deviation)


def shrunk_counts(raw: Tensor, selected: Sequence[Sequence[int]], client_totals: Sequence[float]) -> tuple[Tensor, float]:
    """The pooled estimate of the last round shrunk towards the uniform guess by its measured noise; (counts, w).

    With the same clients every round, the rounds' estimates e_1..e_T of one composition scatter
    around it: their spread s^2 (per class, over rounds, ddof 1) measures the noise of one round's
    estimate, s^2 / T that of their mean. Where clients change (random selection) a round's
    composition is its own, and the round-to-round spread of the estimates minus that of the true
    compositions is not observable; so each round contributes its deviation from its own uniform guess
    and the noise is the spread of those deviations across rounds, over every round so far. The
    estimate is then u + w (p - u) with p the pooled estimate (``monitor.pooled_counts``), u the
    round's uniform guess and w = ``shrinkage_weight``(||p - u||^2, noise). Round 0 has no spread to
    measure: w = 0 (the uniform guess) unless the same clients come back.
    """
    raw = torch.as_tensor(raw, dtype=torch.float64)
    t, q = raw.shape
    counts = pooled_counts(raw, selected, client_totals)
    total = float(counts.sum())
    u = torch.full((q,), total / q, dtype=torch.float64)
    if t < 2:
        return u, 0.0
    share = raw / raw.sum(1, keepdim=True).clamp_min(1e-12) * total  # each round on the current round's scale
    same = all(sorted(s) == sorted(selected[-1]) for s in selected)
    if same:
        noise = float(share.var(0, unbiased=True).sum()) / t
    else:
        dev = share - total / q
        noise = float(dev.var(0, unbiased=True).sum())
    w = shrinkage_weight(float(((counts - u) ** 2).sum()), noise)
    return u + w * (counts - u), w


@estimator(SHRUNK, history=True, requires=(SHRUNK_BASE,))
def shrunk(track: Track) -> Estimate:
    """``pooled`` shrunk towards the uniform guess by the noise the rounds' estimates show (``shrunk_counts``)."""
    selected, n = _client_index(track)
    counts, _ = shrunk_counts(torch.as_tensor(track.series(SHRUNK_BASE)), selected, n)
    return _as_estimate(counts, SHRUNK)


SHARPEN = 2.0
"""The exponent of ``sharpened_counts``: on the six seed-0 protocol trajectories of docs/monitor.md the exponent that put
the most rounds nearest the truth was 2.0–2.1 with CE and 2.3–3.1 with the Ratio Loss; 2 is the smallest."""


def sharpened_counts(counts: Tensor, exponent: float = SHARPEN) -> Tensor:
    """Counts with shares ∝ share^``exponent``, on the same total (a uniform estimate stays uniform; docs/monitor.md,
    "sharpened": the composition estimators read the classes' shares compressed, about as their square roots)."""
    counts = torch.as_tensor(counts, dtype=torch.float64).clamp_min(0)
    total = float(counts.sum())
    if total <= 0:
        return counts
    powered = (counts / total) ** exponent
    return powered / powered.sum() * total


@estimator(SHARPENED, history=True, requires=(SHRUNK_BASE,))
def sharpened(track: Track) -> Estimate:
    """``shrunk``'s estimate sharpened (``sharpened_counts``): uniform where ``shrunk`` sees no evidence of imbalance."""
    selected, n = _client_index(track)
    counts, _ = shrunk_counts(torch.as_tensor(track.series(SHRUNK_BASE)), selected, n)
    return _as_estimate(sharpened_counts(counts), SHARPENED)


def track_estimates(track: Track, names: Sequence[str], targets: Mapping[str, str] | None = None) -> dict[str, Estimate]:
    """The history estimators among ``names`` for the track's last round (per-round estimates already in the track)."""
    return {e.name: e.fn(track) for e in plan(names, targets) if e.history and e.name in names}


class Observer:
    """The monitor of a run: runs the job's estimators every round and keeps the track they read.

    ``observe`` returns {"estimates": {name: Estimate}, "ratios": R, "weights": pi}: the estimators
    asked for (and those they require), and the Ratio-Loss weights from the same dW (a reading of other code's from
    the round: ``fedbalance.monitor.readings``).
    """

    def __init__(self, monitor: Monitor, names: Sequence[str], track: Track | None = None,
                 targets: Mapping[str, str] | None = None) -> None:
        self.monitor = monitor
        self.names = tuple(names)
        self.entries = plan(self.names, targets)
        self.track = Track() if track is None else track

    def observe(
        self,
        model_t: nn.Module,
        state_t1: dict[str, Tensor],
        totals: Sequence[int],
        generator: torch.Generator,
        *,
        clients: Sequence[Hashable],
        dW: Tensor | None = None,
        loss_fn: nn.Module | None = None,
    ) -> dict[str, Any]:
        """Round t+1's estimates from G_t (``model_t``), G_{t+1} (``state_t1``) and the selected clients; ``loss_fn``: the
        clients' loss of the round (for ``drift``; plain CE when None)."""
        r = RoundInputs(self.monitor, model_t, state_t1, list(totals), generator, loss_fn=loss_fn, _dW=dW)
        r.dW  # first from ``generator`` (the weights need it), then whatever an estimator draws (``simulated``)
        estimates = {e.name: e.fn(r) for e in self.entries if not e.history}
        self.track.add(clients, totals, {k: v.counts.tolist() for k, v in estimates.items()})
        for e in self.entries:
            if e.history:
                estimates[e.name] = e.fn(self.track)
                self.track.estimates[-1][e.name] = estimates[e.name].counts.tolist()
        ratios, weights = round_weights(r)
        return {"estimates": estimates, "ratios": ratios, "weights": weights}

    def restore(self, rows: Sequence[Mapping[str, Any]], clients: Sequence[Sequence[Hashable]],
                totals: Sequence[Sequence[int]]) -> None:
        """Rebuild the track of a resumed run from its recorded rows (``est_<name>`` of the per-round estimators)."""
        self.track = Track()
        names = [e.name for e in self.entries]
        for row, ids, tot in zip(rows, clients, totals, strict=True):
            self.track.add(ids, tot, {n: row[est_column(n)] for n in names if row.get(est_column(n)) is not None})


__all__ = ["REGISTRY", "Estimate", "Estimator", "Observer", "RoundInputs", "Track", "as_estimator", "check_counts", "entry",
           "estimator", "named_targets", "plan", "plugin_origins", "sharpened_counts", "shrinkage_weight", "shrunk_counts", "track_estimates", "uniform_guess"]
