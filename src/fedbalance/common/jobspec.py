"""One job's parameters as a frozen, typed value (torch-free): ``JobSpec``.

``config.resolve_job`` merges a study's levels into the *configured* dict of a job and wraps it
here; the engine (``jobs``, ``fl``, ``centralised``), the partition rule, the twin check, replay and
the cost estimate read the typed fields, never the dict. Optional keys get their one default from
``JOB_DEFAULTS``; a required key that is unset is a ConfigError naming it.

The configured dict itself (``JobSpec.as_dict``) is what crosses process boundaries (Snakemake
params), what metrics.json records as ``config`` and what ``training_key`` and ``covers`` compare: it is the
job as asked for, before ``path: auto`` is resolved on a device (``JobSpec.path``).
"""

from __future__ import annotations

import copy
import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from fedbalance.common.records import Job


class ConfigError(ValueError):
    """An invalid study configuration or job spec; the message names the key."""


# Every key a job reads is required once the levels are merged (``REQUIRED_*``, checked by
# ``config.validate`` naming the key), except these optional ones. Each has one default, here: leaving
# it out means "off" or "none", or the paper's reading for a knob that also has the released code's.
# The partition schemes' keys (``PARTITION_KEYS``) are all required for their scheme, so the
# partition functions' own keyword defaults never apply to a configured job.
JOB_DEFAULTS: dict[str, Any] = {
    "options": {},  # dataset loader options: the loader's defaults (fedbalance.data.datasets)
    "minority_classes": [],  # no minority class
    "centralised_epochs": None,  # rounds x local_epochs
    "switch_round": None,  # no early acknowledgment
    "eval_samples": None,  # evaluate on the whole test split (the paper)
    "save_trajectory": False,
    "path": "auto",  # vectorised on CUDA, sequential on the CPU (same numbers)
    "empirical": False,
    "loss_params": {},  # each loss's constructor defaults (fedbalance.methods.losses)
    "monitor": {"record": False, "aux_source": "test", "aux_selection": "random", "ratio_clip": 5000.0},
}
REQUIRED_KEYS = (
    "source", "model", "mode", "rounds", "batch_size", "lr", "momentum", "weight_decay", "aggregation", "eval_every",
    "partition.scheme", "monitor.estimators",
)
REQUIRED_FL_KEYS = ("local_epochs", "selection", "clients_per_round")
REQUIRED_MONITOR_KEYS = (
    "monitor.aux_per_class", "monitor.t_ra", "monitor.variant", "monitor.alpha", "monitor.beta",
    "monitor.acknowledge.threshold", "monitor.acknowledge.rounds",
)


def has_key(spec: Mapping[str, Any], key: str) -> bool:
    """Whether the dotted ``key`` is set in ``spec``."""
    value: Any = spec
    for part in key.split("."):
        if not isinstance(value, Mapping) or part not in value:
            return False
        value = value[part]
    return True


def job_value(spec: Mapping[str, Any], key: str) -> Any:
    """The configured dict's value of a dotted ``key``, or its default in ``JOB_DEFAULTS`` when optional and unset.

    A required key that is unset raises ConfigError (``config.validate`` refuses such a config before any job runs).
    """
    if has_key(spec, key):
        value: Any = spec
        for part in key.split("."):
            value = value[part]
        return value
    default: Any = JOB_DEFAULTS
    for part in key.split("."):
        if not isinstance(default, Mapping) or part not in default:
            raise ConfigError(f"'{key}' is not set and has no default")
        default = default[part]
    return copy.deepcopy(default)


def base_loss(spec: Mapping[str, Any] | JobSpec) -> str:
    """The registered loss a job trains with: its ``loss``, or the base of a ``loss_variants`` entry."""
    if isinstance(spec, JobSpec):
        return spec.base_loss
    return str(spec.get("base_loss", spec["loss"]))


def _optional(spec: Mapping[str, Any], key: str, kind: type) -> Any:
    """A key that only some jobs need (local epochs of a centralised job, the monitor of a CE job): None when unset."""
    return kind(job_value(spec, key)) if has_key(spec, key) else None


@dataclass(frozen=True)
class MonitorSpec:
    """The job's ``monitor`` keys (``t_ra`` … ``ack_rounds`` are None for a job that runs no monitor)."""

    estimators: tuple[str, ...]
    record: bool
    aux_source: str
    aux_selection: str
    ratio_clip: float
    aux_per_class: int | None
    t_ra: float | None
    variant: str | None
    alpha: float | None
    beta: float | None
    ack_threshold: float | None
    ack_rounds: int | None

    def required(self, name: str) -> Any:
        """The value of field ``name``; ConfigError naming ``monitor.<key>`` when it is unset."""
        value = getattr(self, name)
        if value is None:
            key = {"ack_threshold": "acknowledge.threshold", "ack_rounds": "acknowledge.rounds"}.get(name, name)
            raise ConfigError(f"'monitor.{key}' is not set: the job runs the monitor")
        return value


@dataclass(frozen=True, eq=False)
class JobSpec:
    """One job's resolved parameters, typed, optional keys at their ``JOB_DEFAULTS``; build with ``from_config``."""

    job: Job
    base_loss: str
    source: str
    options: Mapping[str, Any]
    model: str
    mode: str
    rounds: int
    batch_size: int
    lr: float
    momentum: float
    weight_decay: float
    aggregation: str
    eval_every: int
    eval_samples: int | None
    local_epochs: int | None
    selection: str | None
    clients_per_round: int | None
    centralised_epochs: int | None
    switch_round: int | None
    save_trajectory: bool
    path: str
    empirical: bool
    minority_classes: tuple[int, ...]
    loss_params: Mapping[str, Any]
    partition: Mapping[str, Any]
    monitor: MonitorSpec
    configured: Mapping[str, Any] = dataclasses.field(repr=False)
    plugins: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    @classmethod
    def from_config(cls, spec: Mapping[str, Any] | JobSpec) -> JobSpec:
        """The typed spec of a configured dict (``config.resolve_job``'s merge, or metrics.json's ``config``).

        ConfigError naming the first required key that is unset (``required_keys``).
        """
        if isinstance(spec, JobSpec):
            return spec
        missing = [k for k in ("experiment", "dataset", "setting", "loss", "seed") if k not in spec]
        missing += [k for k in required_keys(spec) if not has_key(spec, k)] if not missing else []
        if missing:
            raise ConfigError(f"job spec: '{missing[0]}' is not set" + (f" (nor {', '.join(map(repr, missing[1:]))})" if missing[1:] else ""))
        v = lambda key: job_value(spec, key)  # noqa: E731
        ack = spec["monitor"].get("acknowledge") or {}
        switch, cen = v("switch_round"), v("centralised_epochs")
        return cls(
            job=Job(str(spec["experiment"]), str(spec["dataset"]), str(spec["setting"]), str(spec["loss"]), int(spec["seed"])),
            base_loss=base_loss(spec),
            source=str(v("source")),
            options=copy.deepcopy(dict(v("options"))),
            model=str(v("model")),
            mode=str(v("mode")),
            rounds=int(v("rounds")),
            batch_size=int(v("batch_size")),
            lr=float(v("lr")),
            momentum=float(v("momentum")),
            weight_decay=float(v("weight_decay")),
            aggregation=str(v("aggregation")),
            eval_every=int(v("eval_every")),
            eval_samples=None if v("eval_samples") is None else int(v("eval_samples")),
            local_epochs=_optional(spec, "local_epochs", int),
            selection=_optional(spec, "selection", str),
            clients_per_round=_optional(spec, "clients_per_round", int),
            centralised_epochs=None if cen is None else int(cen),
            switch_round=None if switch is None else int(switch),
            save_trajectory=bool(v("save_trajectory")),
            path=str(v("path")),
            empirical=bool(v("empirical")),
            minority_classes=tuple(int(c) for c in v("minority_classes")),
            loss_params=copy.deepcopy(dict(v("loss_params"))),
            partition=copy.deepcopy(dict(spec["partition"])),
            monitor=MonitorSpec(
                estimators=tuple(str(e) for e in v("monitor.estimators")),
                record=bool(v("monitor.record")),
                aux_source=str(v("monitor.aux_source")),
                aux_selection=str(v("monitor.aux_selection")),
                ratio_clip=float(v("monitor.ratio_clip")),
                aux_per_class=_optional(spec, "monitor.aux_per_class", int),
                t_ra=_optional(spec, "monitor.t_ra", float),
                variant=_optional(spec, "monitor.variant", str),
                alpha=_optional(spec, "monitor.alpha", float),
                beta=_optional(spec, "monitor.beta", float),
                ack_threshold=None if "threshold" not in ack else float(ack["threshold"]),
                ack_rounds=None if "rounds" not in ack else int(ack["rounds"]),
            ),
            configured=copy.deepcopy(dict(spec)),
            plugins=copy.deepcopy(dict(spec.get(PLUGINS) or {})),
        )

    @property
    def seed(self) -> int:
        return self.job.seed

    @property
    def name(self) -> str:
        """``<experiment>/<dataset>/<setting>/<loss>/seed<k>``: the job's result folder."""
        return self.job.path

    @property
    def scheme(self) -> str:
        return str(self.partition["scheme"])

    @property
    def is_fl(self) -> bool:
        return self.mode == "fl"

    def required(self, name: str) -> Any:
        """Field ``name`` (``local_epochs``, ``selection``, ``clients_per_round``); ConfigError when unset."""
        value = getattr(self, name)
        if value is None:
            raise ConfigError(f"'{name}' is not set: the {self.name} job needs it")
        return value

    def loss_kwargs(self) -> dict[str, Any]:
        """The constructor arguments of the job's loss: ``loss_params.<base loss>``, or ``loss_params.<loss>`` for a
        loss variant whose ``loss`` is a dotted path (``loss_params_key``)."""
        return dict(self.loss_params.get(loss_params_key(self.configured), {}))

    @property
    def estimator_targets(self) -> dict[str, str]:
        """Name -> dotted path of the config's own estimators among ``monitor.estimators`` (top-level ``estimators``)."""
        return {name: str(r["target"]) for name, r in (self.plugins.get("estimators") or {}).items()
                if r.get("how") == "dotted path"}

    def as_dict(self) -> dict[str, Any]:
        """The configured dict (a copy): the job as asked for, ``path`` unresolved."""
        return copy.deepcopy(dict(self.configured))

    def resolved_dict(self) -> dict[str, Any]:
        """The configured dict with the training path this run resolved (``with_path``)."""
        return {**self.as_dict(), "path": self.path}

    def with_path(self, path: str) -> JobSpec:
        """The same job on training path ``path`` (``jobs.resolve_path`` of ``auto``); the configured dict is kept."""
        return dataclasses.replace(self, path=path)


IDENTITY_KEYS = ("experiment", "setting")
"""Keys that only place a job (its result folder): nothing in a run is seeded from them."""

OUTPUT_KEYS = ("monitor.record", "save_trajectory", "empirical")
"""Keys that change what a job writes, never how it trains: the monitor's columns of a loss that does not
receive its outputs, ``trajectory.pt``, the empirical statistics of Y (each drawn from generators of its own,
``fl.TAG_MONITOR``, or from none)."""

MONITOR_FED_LOSSES = frozenset({"ratio", "la", "bsm"})
"""The registered losses that train on the monitor's outputs (its weights π or its composition estimate:
``losses.receives``); for every other loss the ``monitor`` keys shape only the recorded columns."""

PRIOR_FED_LOSSES = frozenset({"la", "bsm"})
"""The registered losses that train on the monitor's composition estimate (their prior: ``losses.receives`` "prior")."""

PLUGINS = "plugins"
"""The configured dict's key of the plug-ins a job uses (``config.configured_job``; absent when it uses none):
``loss`` (with what it ``receives``), ``dataset`` and ``estimators`` (name -> record), each ``plugins.Plugin.record``;
an estimator's record has its version only when the job trains on its estimate (``trained_estimators``)."""

PLUGIN_KINDS = {"loss": "losses", "dataset": "datasets", "estimators": "estimators"}
"""The keys of a spec's ``plugins`` -> their plug-in point (``fedbalance.common.plugins.KINDS``)."""


def plugin_items(spec: Mapping[str, Any] | JobSpec) -> list[tuple[str, str, str, Mapping[str, Any]]]:
    """(key of the spec's ``plugins``, plug-in kind, name, record) of every plug-in a job uses, estimators one by one
    (a loss is named by the job's base loss, a dataset by its source)."""
    spec = as_spec(spec)
    out = []
    for what, record in spec.plugins.items():
        named = record.items() if what == "estimators" else [(spec.base_loss if what == "loss" else spec.source, record)]
        out += [(what, PLUGIN_KINDS[what], str(name), rec) for name, rec in named]
    return out


MONITOR_FEEDS = frozenset({"weights", "prior"})
"""What a loss may receive from the monitor (``losses.FEEDS``): a loss that receives one trains on its outputs."""


def monitor_fed(spec: Mapping[str, Any] | JobSpec) -> bool:
    """The job's loss trains on the monitor's outputs: a loss of ``MONITOR_FED_LOSSES``, or a plug-in loss that
    receives the weights or the prior (as its spec records)."""
    configured = spec.configured if isinstance(spec, JobSpec) else spec
    if base_loss(configured) in MONITOR_FED_LOSSES:
        return True
    loss = (configured.get(PLUGINS) or {}).get("loss") or {}
    return bool(set(loss.get("receives") or ()) & MONITOR_FEEDS)


def receives_prior(spec: Mapping[str, Any] | JobSpec) -> bool:
    """The job's loss trains on the monitor's composition estimate: a loss of ``PRIOR_FED_LOSSES``, or a plug-in loss
    that receives the prior (as its spec records)."""
    configured = spec.configured if isinstance(spec, JobSpec) else spec
    loss = (configured.get(PLUGINS) or {}).get("loss") or {}
    return base_loss(configured) in PRIOR_FED_LOSSES or "prior" in (loss.get("receives") or ())


def trained_estimators(spec: Mapping[str, Any] | JobSpec) -> tuple[str, ...]:
    """The estimators whose estimates act on a job's training: the lead one (``monitor.estimators[0]``, whose estimate
    the engine hands the loss as its prior, ``fl.monitor_round``) for a loss that receives the prior; none otherwise.
    The Ratio Loss's weights π come from the per-class copies' dW, not from an estimate, and the lead's acknowledgment
    is recorded (``acknowledged``), never acted on: every other estimator changes only the monitor's columns."""
    configured = spec.configured if isinstance(spec, JobSpec) else spec
    if not receives_prior(configured):
        return ()
    names = (configured.get("monitor") or {}).get("estimators") or ()
    return tuple(str(n) for n in names[:1])


def loss_params_key(spec: Mapping[str, Any]) -> str:
    """The key of ``loss_params`` that holds the job's loss's constructor arguments: its base loss, or the loss's
    own name when the base is a dotted path (``loss_variants.<v>.loss: "module:Class"``: ``loss_params.<v>``)."""
    base = base_loss(spec)
    return str(spec["loss"]) if ":" in base else base


def _without(configured: Mapping[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    """``configured`` less the dotted ``keys``, for reading (the mappings on a removed key's path are copied,
    the rest shared with ``configured``)."""
    out = dict(configured)
    for key in keys:
        *head, last = key.split(".")
        node: dict[str, Any] | None = out
        for part in head:
            child = node.get(part)
            if not isinstance(child, Mapping):
                node = None
                break
            node[part] = dict(child)
            node = node[part]
        if node is not None:
            node.pop(last, None)
    return out


def runs_monitor(spec: Mapping[str, Any] | JobSpec) -> bool:
    """The monitor runs: the loss trains on its outputs (``MONITOR_FED_LOSSES``) or ``monitor.record`` is set."""
    spec = as_spec(spec)
    return monitor_fed(spec) or spec.monitor.record


def _training_dict(configured: Mapping[str, Any]) -> dict[str, Any]:
    """``training_key``'s dict (shares unchanged mappings with ``configured``: read it, do not change it)."""
    rest = _without(configured, IDENTITY_KEYS + OUTPUT_KEYS)
    trained = trained_estimators(configured)
    if not monitor_fed(configured):
        rest.pop("monitor", None)
    elif isinstance(rest.get("monitor"), Mapping) and "estimators" in rest["monitor"]:
        rest["monitor"] = {**rest["monitor"], "estimators": list(trained)}
    used = rest.get(PLUGINS)
    if isinstance(used, Mapping) and "estimators" in used:
        kept = {n: r for n, r in (used["estimators"] or {}).items() if n in trained}
        used = {k: v for k, v in used.items() if k != "estimators"} | ({"estimators": kept} if kept else {})
        if used:
            rest[PLUGINS] = used
        else:
            rest.pop(PLUGINS)
    return rest


def training_key(spec: Mapping[str, Any] | JobSpec) -> str:
    """What a job's training depends on: its configured dict less ``IDENTITY_KEYS``, ``OUTPUT_KEYS``, every ``monitor``
    key for a loss that does not train on the monitor's outputs, and the estimators (names and plug-in records) whose
    estimates it does not train on (``trained_estimators``: all but a prior-fed loss's lead one). Equal keys, equal
    trained models."""
    configured = spec.configured if isinstance(spec, JobSpec) else spec
    return json.dumps(_training_dict(configured), sort_keys=True, default=str)


def flat_keys(tree: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """Dotted key -> the value as JSON, for every leaf of ``tree`` (an empty mapping is a leaf)."""
    out: dict[str, str] = {}
    for key, value in tree.items():
        if isinstance(value, Mapping) and value:
            out.update(flat_keys(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = json.dumps(value, sort_keys=True, default=str)
    return out


def training_differences(a: Mapping[str, Any] | JobSpec, b: Mapping[str, Any] | JobSpec) -> dict[str, tuple[str, str]]:
    """The dotted keys (``seed`` among them) whose values differ between two jobs' training (``training_key``) ->
    (a's, b's) as JSON: empty when they train alike from the same seed."""
    fa, fb = (flat_keys(json.loads(training_key(x))) for x in (a, b))
    return {k: (fa.get(k, "unset"), fb.get(k, "unset")) for k in sorted(set(fa) | set(fb)) if fa.get(k) != fb.get(k)}


def monitor_key(spec: Mapping[str, Any] | JobSpec) -> str | None:
    """What a job's recorded monitor columns depend on besides its training: its ``monitor`` keys less
    ``monitor.record``, and its plug-in estimators' records; None when the monitor does not run."""
    if not runs_monitor(spec):
        return None
    configured = spec.configured if isinstance(spec, JobSpec) else spec
    estimators = (configured.get(PLUGINS) or {}).get("estimators") or {}
    return json.dumps([_without(configured, OUTPUT_KEYS).get("monitor", {}), estimators], sort_keys=True, default=str)


def covers(source: Mapping[str, Any] | JobSpec, target: Mapping[str, Any] | JobSpec) -> bool:
    """``target``'s outputs are ``source``'s, less some: the same training (``training_key``), the same monitor
    columns when ``target`` records them, and the empirical statistics when ``target`` asks for them.
    ``trajectory.pt`` is not among a job's outputs (metrics.json, rounds.csv): a copy never carries one."""
    s, t = as_spec(source), as_spec(target)
    if training_key(s) != training_key(t):
        return False
    if runs_monitor(t) and monitor_key(s) != monitor_key(t):
        return False
    return s.empirical or not t.empirical


def derivable(source: Mapping[str, Any] | JobSpec, target: Mapping[str, Any] | JobSpec) -> bool:
    """``target``'s outputs follow from ``source``'s trajectory (``fedbalance.jobs.derive``): the same training, a
    FedAvg run without a switch of partition whose loss does not train on the monitor, ``target`` records the
    monitor, ``source`` saved its trajectory and recorded the empirical statistics if ``target`` asks for them. Its monitor is run again, with its own keys, on every round's G_t."""
    s, t = as_spec(source), as_spec(target)
    return (
        training_key(s) == training_key(t) and s.save_trajectory and t.monitor.record and t.is_fl
        and t.switch_round is None and not monitor_fed(t) and (s.empirical or not t.empirical)
    )


BRANCH_KEYS = ("rounds", "switch_round")
"""Keys that change a FedAvg job only from a round on: ``switch_round`` from itself, ``rounds`` at its last round (the
final evaluation); two jobs equal in every other key train and record the rounds before both alike (``shared_rounds``)."""


def branch_key(spec: Mapping[str, Any] | JobSpec) -> str | None:
    """What the jobs that can share first rounds (``shared_rounds``) have in common: a FedAvg job's configured dict
    less its names and ``BRANCH_KEYS``, and whether it switches partition; None for a centralised job."""
    spec = as_spec(spec)
    if not spec.is_fl:
        return None
    rest = _without(spec.configured, IDENTITY_KEYS + BRANCH_KEYS)
    return json.dumps([rest, spec.switch_round is None], sort_keys=True, default=str)


def shared_rounds(source: Mapping[str, Any] | JobSpec, target: Mapping[str, Any] | JobSpec) -> int:
    """How many first rounds ``target`` trains and records exactly as ``source`` does, so that it can start from
    ``source``'s state after them (``fedbalance.jobs.run``' branches); 0 when it cannot. Both are FedAvg jobs of one
    ``branch_key`` (equal but in ``BRANCH_KEYS`` and their names, both switching partition or neither: the partitions
    are then the same) that differ somewhere: the rounds before the earlier switch, and before the shorter job's last
    (evaluated) round."""
    s, t = as_spec(source), as_spec(target)
    key = branch_key(s)
    if key is None or key != branch_key(t):
        return 0
    if s.rounds == t.rounds and s.switch_round == t.switch_round:
        return 0
    limits = [min(s.rounds, t.rounds) - (s.rounds != t.rounds)]
    if s.switch_round != t.switch_round:
        limits.append(min(s.switch_round, t.switch_round))
    return max(min(limits), 0)


def required_keys(spec: Mapping[str, Any]) -> list[str]:
    """The dotted keys a job with this (merged) configured dict reads and that have no default, less its
    partition scheme's own keys (``config.required_keys`` adds them: ``PARTITION_KEYS``)."""
    keys = list(REQUIRED_KEYS)
    if spec.get("mode") == "fl" or spec.get("centralised_epochs") is None:
        keys.append("local_epochs")
    if spec.get("mode") == "fl":
        keys += [k for k in REQUIRED_FL_KEYS if k not in keys]
    if base_loss(spec) == "ratio" or job_value(spec, "monitor.record") or (monitor_fed(spec) and PLUGINS in spec):
        keys += list(REQUIRED_MONITOR_KEYS)
    return keys


PARTITION_KEYS: dict[str, tuple[str, ...]] = {
    "monitor": ("num_clients", "samples_per_class"),
    "imbalance": ("num_clients", "min_classes", "max_classes", "majority_samples", "gamma"),
    "mismatch": ("num_clients", "classes_per_client", "majority_samples", "gamma"),
    "writers": ("num_clients", "writers_per_client", "gamma"),
}
"""The job spec's ``partition.<key>`` each scheme reads (all required for their scheme: ``config.validate``;
defined here, torch- and numpy-free, so that the workflow plans without the partition code)."""
OPTIONAL_PARTITION_KEYS: dict[str, tuple[str, ...]] = {
    "imbalance": ("balanced_samples",),
    "mismatch": ("balanced_samples",),
}
"""The ``partition.<key>`` a scheme also reads when set (unset: the scheme's reading without it)."""


def partition_dict(spec: Mapping[str, Any] | JobSpec) -> dict[str, Any]:
    """The configured dict a partition is made from (the workflow's partition rule): the job's, less the plug-ins that
    do not act on the partition, its loss's and estimators' records (every loss of a setting trains on one partition
    file; a dataset plug-in's record stays, its data fixes the partition)."""
    configured = as_spec(spec).as_dict()
    used = {k: v for k, v in (configured.pop(PLUGINS, None) or {}).items() if k == "dataset"}
    return {**configured, **({PLUGINS: used} if used else {})}


def partition_args(spec: Mapping[str, Any] | JobSpec) -> tuple[str, dict[str, Any]]:
    """(scheme, keyword arguments) of a job's partition, for ``make_partition``."""
    spec = as_spec(spec)
    p = spec.partition
    kwargs = {k: p[k] for k in PARTITION_KEYS[spec.scheme] + OPTIONAL_PARTITION_KEYS.get(spec.scheme, ()) if k in p}
    if spec.scheme != "monitor":
        kwargs["minority_classes"] = spec.minority_classes
    return spec.scheme, kwargs


def as_spec(spec: Mapping[str, Any] | JobSpec) -> JobSpec:
    """``spec`` itself, or the typed spec of a configured dict (the engine's entry points accept both)."""
    return JobSpec.from_config(spec)
