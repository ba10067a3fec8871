"""Study configuration: load, validate (JSON schema + cross-key checks), expand into jobs.

A job is one (experiment, dataset, setting, loss, seed). Its parameters are merged key by key:
``defaults < datasets[d] < experiments[e].params < experiments[e].dataset_params[d] < setting``.
After merging, every key a job reads is required (``required_keys``) unless it is optional with its
one default in ``JOB_DEFAULTS``. Files are read strictly (a duplicate key is an error); NaN/inf,
colliding setting names and unknown dataset options are refused. The Snakefile validates with the
same schema (workflow/schemas/config.schema.yaml) and this module's ``validate``.
"""

from __future__ import annotations

import copy
import functools
import itertools
import json
import math
import os
import re
import sys
from pathlib import Path
from typing import Any, Callable, Collection, Mapping

import jsonschema
import yaml

from fedbalance.common import plugins
from fedbalance.jobs.seal import SealError, refuse_inside
from fedbalance.common.jobspec import (  # noqa: F401  (re-exported: the config's readers import them from here)
    JOB_DEFAULTS,
    IDENTITY_KEYS,
    OPTIONAL_PARTITION_KEYS,
    PARTITION_KEYS,
    PLUGINS,
    ConfigError,
    JobSpec,
    base_loss,
    covers,
    flat_keys,
    has_key,
    job_value,
    loss_params_key,
    partition_args,
    plugin_items,
    runs_monitor,
    trained_estimators,
    training_key,
)
from fedbalance.common.jobspec import required_keys as _spec_required_keys
from fedbalance.common.records import ESTIMATORS, Job, setting_name  # noqa: F401  (Job: re-exported)

SCHEMA_PATH = Path(__file__).parents[1] / "config.schema.yaml"  # package data at the package's top
_SETTING_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]*")  # one folder: not ".", "..", hidden
_NAME = re.compile(r"[A-Za-z0-9_-]+")
# The job keys that fix a job's data: set for a dataset (datasets.<d> or defaults), never below it.
DATA_KEYS = ("source", "options")
MAX_CPUS_ENV = "FEDBALANCE_MAX_CPUS"
"""The environment variable that raises the ceiling on CPUs (``max_cpus``)."""



class _StrictLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses a key given twice in one mapping (PyYAML keeps the last)."""


def _construct_mapping(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
    seen: dict[Any, int] = {}
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":
            continue
        key = loader.construct_object(key_node, deep=True)
        line = key_node.start_mark.line + 1
        try:
            if key in seen:
                raise ConfigError(f"line {line}: key {key!r} is given twice in one mapping (first on line {seen[key]})")
            seen[key] = line
        except TypeError:  # an unhashable key: construct_mapping reports it
            continue
    return loader.construct_mapping(node, deep=deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def read_yaml(path: str | Path) -> Any:
    """Parse a YAML file strictly: ConfigError naming the file (and line) on bad YAML or a duplicate key."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file {path} does not exist")
    try:
        return yaml.load(path.read_text(), Loader=_StrictLoader)  # noqa: S506 - a SafeLoader subclass
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: not a readable text file: {exc}") from exc


def schema() -> dict:
    """The configuration's JSON schema (a copy of the file's, parsed once a process)."""
    return copy.deepcopy(_schema())


@functools.lru_cache(maxsize=1)
def _schema() -> dict:
    return read_yaml(SCHEMA_PATH)


def deep_merge(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """Merge ``override`` into a copy of ``base``; nested mappings merge key by key."""
    out = copy.deepcopy(dict(base))
    _merge_into(out, override)
    return out


def _merge_into(out: dict[str, Any], override: Mapping[str, Any]) -> None:
    """``deep_merge`` into ``out``, a copy the caller owns (each base mapping is copied once, not per level)."""
    for k, v in override.items():
        if isinstance(v, Mapping) and isinstance(out.get(k), Mapping):
            if not isinstance(out[k], dict):
                out[k] = dict(out[k])
            _merge_into(out[k], v)
        else:
            out[k] = copy.deepcopy(v)


def _set_dotted(d: dict[str, Any], key: str, value: Any) -> dict[str, Any]:
    head, _, rest = key.partition(".")
    return {head: _set_dotted({}, rest, value) if rest else value}


def settings(cfg: Mapping[str, Any], experiment: str) -> dict[str, dict[str, Any]]:
    """Setting name -> job overrides of one experiment (explicit ``settings`` plus the ``grid`` product).

    Raises ConfigError, naming both, when two settings get the same name (e.g. grid values 10 and
    10.0 are both ``g10``, or an explicit setting is named like a grid one).
    """
    exp = cfg["experiments"][experiment]
    out = {k: dict(v) for k, v in exp.get("settings", {}).items()}
    origin = {k: f"settings.{k}" for k in out}
    grid = exp.get("grid", {})
    if grid:
        axes = [[(prefix, ax["key"], v) for v in ax["values"]] for prefix, ax in grid.items()]
        for combo in itertools.product(*axes):
            name = setting_name(*((p, v) for p, _, v in combo))
            what = "grid values " + ", ".join(f"{key}={v!r}" for _, key, v in combo)
            if name in out:
                raise ConfigError(
                    f"experiments.{experiment}: the {what} and the {origin[name]} are both named setting {name!r}; "
                    "make the values distinct or rename the setting"
                )
            over: dict[str, Any] = {}
            for _, key, v in combo:
                over = deep_merge(over, _set_dotted({}, key, v))
            out[name] = over
            origin[name] = what
    if not out:
        raise ConfigError(f"experiments.{experiment}: needs 'settings' or 'grid'")
    return out


@functools.cache
def base_losses() -> tuple[str, ...]:
    """The registered loss names (``fedbalance.methods.losses.LOSSES``), as the schema lists them (read once: a study's
    validation asks for them per job)."""
    return tuple(_schema()["$defs"]["registered_losses"]["enum"])


def _builtin_sources() -> list[str]:
    from fedbalance.data.datasets import available_datasets

    return available_datasets()


def _plugin(kind: str, name: str, where: str, builtin: Collection[str]) -> plugins.Plugin | None:
    """``plugins.resolve`` with its error as a ConfigError naming ``where``."""
    try:
        return plugins.resolve(kind, name, builtin, where)
    except plugins.PluginError as exc:
        raise ConfigError(str(exc)) from None


def _loss_record(name: str, path: tuple[str, ...], where: str = "loss") -> dict[str, Any] | None:
    """The spec's record of loss ``name`` when it is a plug-in (with what it ``receives``), None for a registered one;
    ConfigError starting with ``where`` when it is neither or breaks the loss protocol. ``path``: ``sys.path``, which
    decides what a name resolves to. Cached until ``plugins.forget``."""
    return _cached_loss_record(name, path, where, plugins.generation())


@functools.lru_cache(maxsize=64)
def _cached_loss_record(name: str, path: tuple[str, ...], where: str, generation: int) -> dict[str, Any] | None:
    plugin = _plugin("losses", name, where, base_losses())
    if plugin is None:
        return None
    from fedbalance.methods.losses import check_loss_class

    try:
        cls = check_loss_class(plugin.load(), plugin.origin())
    except plugins.PluginError as exc:
        raise ConfigError(f"{where}: {exc}") from None
    return {**plugin.record(), "receives": sorted(cls.receives), "vectorisable": bool(cls.vectorisable)}


def plugin_records(cfg: Mapping[str, Any], spec: Mapping[str, Any]) -> dict[str, Any]:
    """The plug-ins a job's merged dict uses (``jobspec.PLUGINS``): its loss, its dataset's source and the estimators
    it records that are not built in, each as ``plugins.Plugin.record``; {} for a job of built-ins only. An estimator's
    record carries its version only when the job trains on its estimate (``jobspec.trained_estimators``): any other
    estimator changes the monitor's columns, not the training, and its version is recorded where those are
    (metrics.json's ``plugins``)."""
    out: dict[str, Any] = {}
    loss = _loss_record(str(spec["base_loss"]), tuple(sys.path))
    if loss is not None:
        out["loss"] = copy.deepcopy(loss)
    source = spec.get("source")
    if isinstance(source, str) and source not in _builtin_sources():
        found = _plugin("datasets", source, f"datasets.{spec['dataset']}.source", _builtin_sources())
        if found is not None:
            out["dataset"] = found.record()
    own = cfg.get("estimators") or {}
    trained = set(trained_estimators({**spec, PLUGINS: out}))
    records = {}
    for name in (spec.get("monitor") or {}).get("estimators") or ():
        if name in ESTIMATORS:
            continue
        found = _plugin("estimators", own.get(name, name), "monitor.estimators", ESTIMATORS)
        if found is not None:
            records[name] = found.record(version=name in trained)
    if records:
        out["estimators"] = records
    return out


def study_plugins(cfg: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Every plug-in the study's jobs use, once, in the jobs' order: ``kind`` (loss, estimator, dataset), ``name`` (as
    the config names it), ``package``, ``version`` (as installed now), ``origin`` (``plugins.Plugin.origin``),
    ``jobs`` (how many use it: an estimator, those that run the monitor) and ``trains`` (how many train on it: every job
    using a loss or dataset, an estimator's only where a prior-fed loss trains on its estimate). ConfigError when one is
    no longer installed as planned."""
    found: dict[tuple[str, str], dict[str, Any]] = {}
    for spec in resolve_jobs(cfg, jobs(cfg)).values():
        trained = set(trained_estimators(spec))
        for what, kind, name, rec in plugin_items(spec):
            if what == "estimators" and not runs_monitor(spec):
                continue
            if (what, name) not in found:
                try:
                    now = plugins.check_installed(kind, name, rec)
                except plugins.PluginError as exc:
                    raise ConfigError(str(exc)) from None
                found[what, name] = {"kind": plugins.SINGULAR[kind], "name": name, "package": now.package,
                                     "version": now.version, "origin": now.origin(), "jobs": 0, "trains": 0}
            found[what, name]["jobs"] += 1
            found[what, name]["trains"] += int(what != "estimators" or name in trained)
    return list(found.values())


def estimator_versions(cfg: Mapping[str, Any], job: Job) -> dict[str, str]:
    """The plug-in estimators ``job`` names, name -> "package version" (or "target version") as installed now: what its
    monitor's columns depend on besides its spec, which records an estimator's version only where the job trains on
    it (``plugin_records``). The workflow re-derives a derived job, whose outputs are its monitor's, when one changes."""
    out = {}
    for what, kind, name, rec in plugin_items(resolve_job(cfg, job)):
        if what == "estimators":
            try:
                now = plugins.check_installed(kind, name, rec)
            except plugins.PluginError as exc:
                raise ConfigError(str(exc)) from None
            out[name] = f"{now.package or now.target} {now.version}"
    return out


def dataset_plugin(cfg: Mapping[str, Any], dataset: str) -> dict[str, Any] | None:
    """The record (``plugins.Plugin.record``) of dataset ``dataset``'s source when it is a plug-in, else None: what the
    workflow's data preparation depends on besides the source's name and options."""
    source = dataset_spec(cfg, dataset).get("source")
    if not isinstance(source, str) or source in _builtin_sources():
        return None
    found = _plugin("datasets", source, f"datasets.{dataset}.source", _builtin_sources())
    return None if found is None else found.record()


def resolve_job(cfg: Mapping[str, Any], job: Job) -> JobSpec:
    """The full parameter set of one job, typed (``JobSpec``; its ``as_dict()``: the configured dict).

    A loss named under ``loss_variants`` trains its base loss (``base_loss``) with the variant's
    ``params`` merged last, after the setting.
    """
    return JobSpec.from_config(configured_job(cfg, job))


def resolve_jobs(cfg: Mapping[str, Any], which: Collection[Job]) -> dict[Job, JobSpec]:
    """``resolve_job`` of each of ``which``, each experiment's settings built once. The specs of the last few
    configs (by content) are kept, so the twins, derived jobs and costs of one config resolve its jobs once."""
    key = json.dumps(cfg, sort_keys=True, default=str)
    known = _RESOLVED.pop(key, {})
    _RESOLVED[key] = known  # the most recent last
    while len(_RESOLVED) > _RESOLVED_CONFIGS:
        del _RESOLVED[next(iter(_RESOLVED))]
    todo = [j for j in which if j not in known]
    overrides = {name: settings(cfg, name) for name in {j.experiment for j in todo}}
    for job in todo:
        known[job] = JobSpec.from_config(configured_job(cfg, job, overrides[job.experiment]))
    return {j: known[j] for j in which}


_RESOLVED: dict[str, dict[Job, JobSpec]] = {}
_RESOLVED_CONFIGS = 4


def configured_job(cfg: Mapping[str, Any], job: Job, overrides: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The merged configured dict of one job (the schema's ``job``), before typing: what ``validate`` checks.
    ``overrides``: ``settings(cfg, job.experiment)``, when the caller has it."""
    exp = cfg["experiments"][job.experiment]
    spec = deep_merge(cfg.get("defaults", {}), cfg["datasets"][job.dataset])
    spec = deep_merge(spec, exp.get("params", {}))
    spec = deep_merge(spec, exp.get("dataset_params", {}).get(job.dataset, {}))
    spec = deep_merge(spec, (overrides if overrides is not None else settings(cfg, job.experiment))[job.setting])
    variant = (cfg.get("loss_variants") or {}).get(job.loss)
    if variant is not None:
        spec = deep_merge(spec, variant.get("params", {}))
    spec.update(dataset=job.dataset, experiment=job.experiment, setting=job.setting, loss=job.loss, seed=job.seed)
    spec["base_loss"] = variant["loss"] if variant is not None else job.loss
    records = plugin_records(cfg, spec)
    if records:
        spec[PLUGINS] = records
    return spec


def jobs(cfg: Mapping[str, Any], experiments: list[str] | None = None) -> list[Job]:
    """Every job of the study (or of the named experiments), sorted."""
    out = []
    for name, exp in cfg["experiments"].items():
        if experiments is not None and name not in experiments:
            continue
        seeds = exp.get("seeds", cfg.get("seeds", [0]))
        for d, s, loss, seed in itertools.product(exp["datasets"], settings(cfg, name), exp["losses"], seeds):
            out.append(Job(name, d, s, loss, seed))
    return sorted(out)


def run_key(spec: Mapping[str, Any] | JobSpec) -> str:
    """What a job's results depend on: its configured dict less the names that only place it (``IDENTITY_KEYS``).

    Nothing in a run is seeded from the experiment's or setting's name (partitions and every
    generator derive from ``seed``), so two jobs with equal keys give equal results.
    """
    configured = spec.as_dict() if isinstance(spec, JobSpec) else spec
    rest = {k: v for k, v in configured.items() if k not in IDENTITY_KEYS}
    return json.dumps(rest, sort_keys=True, default=str)


def earlier_sources(
    cfg: Mapping[str, Any],
    experiments: list[str] | None,
    match: Callable[[JobSpec, JobSpec], bool],
    skip: Collection[Job] = (),
) -> dict[Job, Job]:
    """Each job (not in ``skip``) that ``match(source, job)`` pairs with an earlier job of its training
    (``jobspec.training_key``) that is itself unpaired, mapped to that job. "Earlier" follows the experiments'
    order in the config, then ``jobs``' order."""
    order = {name: i for i, name in enumerate(cfg["experiments"])}
    kept: dict[str, list[tuple[Job, JobSpec]]] = {}
    out: dict[Job, Job] = {}
    todo = [j for j in sorted(jobs(cfg, experiments), key=lambda j: (order[j.experiment], j)) if j not in skip]
    specs = resolve_jobs(cfg, todo)
    for job in todo:
        spec = specs[job]
        group = kept.setdefault(training_key(spec), [])
        source = next((j for j, s in group if match(s, spec)), None)
        if source is not None:
            out[job] = source
        else:
            group.append((job, spec))
    return out


def twins(cfg: Mapping[str, Any], experiments: list[str] | None = None) -> dict[Job, Job]:
    """Each job whose outputs an earlier job's cover (``jobspec.covers``), mapped to that job (the one trained).

    E.g. a sweep's default point (``alpha`` at its default α) is the loss comparison's job, trained once,
    though the loss comparison also records the monitor and saves its trajectory (``OUTPUT_KEYS``).
    """
    return earlier_sources(cfg, experiments, covers)


def _key(path: Any) -> str:
    return ".".join(str(p) for p in path) or "<top level>"


def required_keys(spec: Mapping[str, Any]) -> list[str]:
    """The dotted keys a job with this (merged) spec reads and that have no default."""
    scheme = (spec.get("partition") or {}).get("scheme")
    return _spec_required_keys(spec) + [f"partition.{k}" for k in PARTITION_KEYS.get(scheme, ())]


def _check_required(spec: Mapping[str, Any], where: str) -> None:
    missing = [k for k in required_keys(spec) if not has_key(spec, k)]
    if missing:
        d, e = spec["dataset"], spec["experiment"]
        raise ConfigError(
            f"{where}: '{missing[0]}' is not set"
            + (f" (nor {', '.join(repr(k) for k in missing[1:])})" if len(missing) > 1 else "")
            + f"; set it under defaults (or datasets.{d}, experiments.{e}.params, "
            f"experiments.{e}.dataset_params.{d}, or the setting)"
        )


def _check_job(spec: Mapping[str, Any], where: str) -> None:
    _check_required(spec, where)
    from fedbalance.data.datasets import dataset_info

    from fedbalance.data.datasets import DataError

    try:
        q = dataset_info(spec["source"], **job_value(spec, "options"))["num_classes"]
    except DataError as exc:
        raise ConfigError(f"{where}.options: {exc}") from None
    bad = [c for c in spec.get("minority_classes", []) if c >= q]
    if bad:
        raise ConfigError(f"{where}.minority_classes: {bad} not a class of {spec['source']} ({q} classes)")
    p = spec["partition"]
    if spec["mode"] == "fl" and spec["clients_per_round"] > p["num_clients"]:
        raise ConfigError(
            f"{where}.clients_per_round: {spec['clients_per_round']} selected clients but only "
            f"partition.num_clients = {p['num_clients']}"
        )
    if p["scheme"] == "imbalance" and not p["min_classes"] <= p["max_classes"] <= q:
        raise ConfigError(f"{where}.partition: need min_classes <= max_classes <= {q}, got {p['min_classes']}, {p['max_classes']}")
    if p["scheme"] == "mismatch" and p["classes_per_client"] > q:
        raise ConfigError(f"{where}.partition.classes_per_client: {p['classes_per_client']} > {q} classes")
    if p["scheme"] == "mismatch" and (p["num_clients"] * p["classes_per_client"]) % q:
        raise ConfigError(
            f"{where}.partition.num_clients: {p['num_clients']} clients x {p['classes_per_client']} classes is not a "
            f"multiple of {q} classes, so the classes cannot be held equally often"
        )
    if spec.get("switch_round") is not None and spec["switch_round"] >= spec["rounds"]:
        raise ConfigError(f"{where}.switch_round: {spec['switch_round']} is not before rounds = {spec['rounds']}")


def _get_path(value: Any, path: tuple) -> Any:
    for k in path:
        value = value[k]
    return value


def _non_finite(value: Any, path: tuple) -> tuple | None:
    """The path of the first NaN or infinite number in ``value`` (JSON schema's ``number`` admits them)."""
    if isinstance(value, float) and not math.isfinite(value):
        return path
    if isinstance(value, Mapping):
        items: Any = value.items()
    elif isinstance(value, (list, tuple)):
        items = enumerate(value)
    else:
        return None
    for k, v in items:
        found = _non_finite(v, (*path, k))
        if found is not None:
            return found
    return None


def dataset_spec(cfg: Mapping[str, Any], dataset: str) -> dict[str, Any]:
    """``defaults`` merged with ``datasets[dataset]``: the level that fixes a dataset's data (``DATA_KEYS``).

    Data preparation reads ``source`` and ``options`` from here; ``validate`` refuses a job whose
    own values of these keys differ (``_check_data_keys``), so every job trains on the data prepared.
    """
    return deep_merge(cfg.get("defaults", {}), cfg["datasets"][dataset])


def data_args(spec: Mapping[str, Any]) -> tuple[str | None, dict[str, Any]]:
    """(source, loader options) of a job or dataset spec."""
    return spec.get("source"), dict(job_value(spec, "options"))


def _check_dataset_options(cfg: Mapping[str, Any]) -> None:
    from fedbalance.data.datasets import DataError, dataset_info

    for name in cfg["datasets"]:
        source, options = data_args(dataset_spec(cfg, name))
        if source is None:
            continue
        try:
            dataset_info(source, **options)
        except DataError as exc:
            raise ConfigError(f"datasets.{name}.options: {exc}") from None


def partition_key(spec: Mapping[str, Any] | JobSpec) -> str:
    """What a job's partition file depends on besides its seed: data, scheme and keys, the balanced switch."""
    typed = JobSpec.from_config(spec)
    return json.dumps(
        [[typed.source, dict(typed.options)], partition_args(typed), typed.switch_round is not None], sort_keys=True, default=str
    )


def _where_set(cfg: Mapping[str, Any], job: Job, key: str) -> str:
    """The config level (below ``datasets``) that sets the top-level job ``key`` of ``job`` last."""
    exp = cfg["experiments"][job.experiment]
    levels = [
        (f"experiments.{job.experiment}.params", exp.get("params", {})),
        (f"experiments.{job.experiment}.dataset_params.{job.dataset}", exp.get("dataset_params", {}).get(job.dataset, {})),
        (f"experiments.{job.experiment}.settings.{job.setting}", settings(cfg, job.experiment)[job.setting]),
        (f"loss_variants.{job.loss}.params", ((cfg.get("loss_variants") or {}).get(job.loss) or {}).get("params", {})),
    ]
    found = [name for name, level in levels if key in level]
    return found[-1] if found else f"experiments.{job.experiment}"


def _check_data_keys(cfg: Mapping[str, Any], job: Job, spec: Mapping[str, Any], where: str) -> None:
    """A job's ``source`` and ``options`` are its dataset's: the workflow prepares one data set per dataset."""
    have, want = data_args(spec), data_args(dataset_spec(cfg, job.dataset))
    for i, key in enumerate(DATA_KEYS):
        if have[i] != want[i]:
            raise ConfigError(
                f"{where}: {_where_set(cfg, job, key)} sets {key} = {have[i]!r}, but datasets.{job.dataset} has "
                f"{want[i]!r}; a dataset's data is set under datasets.{job.dataset} only (the workflow prepares and "
                f"partitions it once): declare another dataset under datasets for other data"
            )


def _check_one_partition(cfg: Mapping[str, Any], job: Job, spec: Mapping[str, Any], first: Mapping[str, Any]) -> None:
    """Every loss of a setting trains on one partition file: a loss variant may not change what it depends on."""
    if partition_key(spec) == partition_key(first):
        return
    keys = [f"partition.{k}" for k in sorted(set(spec["partition"]) | set(first["partition"]))]
    keys += ["switch_round", "minority_classes"]
    diff = [k for k in keys if has_key(spec, k) != has_key(first, k) or (has_key(spec, k) and job_value(spec, k) != job_value(first, k))]
    variant, other = (job.loss, first["loss"]) if job.loss in (cfg.get("loss_variants") or {}) else (first["loss"], job.loss)
    raise ConfigError(
        f"experiments.{job.experiment}[{job.dataset}, {job.setting}, {job.loss}]: loss_variants.{variant}.params "
        f"changes {', '.join(diff) or 'the partition'} (against the loss {other} of the same setting), but "
        f"every loss of a setting trains on the same partition file; set {diff[0] if diff else 'it'} in a setting of "
        f"experiments.{job.experiment} instead"
    )


def max_cpus() -> int:
    """The most CPUs (torch threads, concurrent jobs) a config or command may ask for: ``FEDBALANCE_MAX_CPUS`` when set,
    else the CPUs this process may use."""
    value = os.environ.get(MAX_CPUS_ENV, "").strip()
    if value:
        if not value.isdigit() or int(value) < 1:
            raise ConfigError(f"{MAX_CPUS_ENV}={value!r}: not a whole number >= 1")
        return int(value)
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def check_threads(threads: Any, where: str) -> None:
    """``threads`` torch threads: at least 1, at most the machine's CPUs (``max_cpus``; more only slows every job)."""
    ceiling = max_cpus()
    if isinstance(threads, int) and not 1 <= threads <= ceiling:
        raise ConfigError(
            f"{where}: {threads} torch threads; ask for 1 to {ceiling} (this machine's CPUs; set {MAX_CPUS_ENV} to "
            "allow more, e.g. for a cluster's larger nodes)"
        )


def _folder(path: str) -> Path:
    """Where a configured folder lies (relative to the working folder; links followed)."""
    return Path(os.path.expanduser(path)).resolve()


def _check_reference_dir(reference: Any, results: str) -> None:
    """A reference set is read, never written: not empty, and apart from results_dir (neither inside the other)."""
    if reference is None:
        return
    if not isinstance(reference, str) or not reference.strip():
        raise ConfigError(
            f"reference_dir: {reference!r} names no folder; leave it out (or null) to train the study, or name a "
            "reference set to render (e.g. reference/mnist)"
        )
    ref, res = _folder(reference), _folder(results)
    how = ("the same folder" if ref == res else "results_dir lies inside reference_dir" if ref in res.parents
           else "reference_dir lies inside results_dir" if res in ref.parents else None)
    if how is not None:
        raise ConfigError(
            f"reference_dir {reference!r} ({ref}) and results_dir {results!r} ({res}): {how}; a render copies the "
            "reference set into results_dir and must never write into the set: choose a results_dir apart from it "
            "(e.g. results_reference)"
        )


def _check_names_and_dirs(cfg: Mapping[str, Any]) -> None:
    """Names that become path components, and the output folder (before the schema's terser messages)."""
    for level in ("datasets", "experiments", "loss_variants"):
        for name in cfg.get(level) or {}:
            if not isinstance(name, str) or not _NAME.fullmatch(name):
                raise ConfigError(
                    f"{level}: name {name!r} is not allowed: a name is one folder of every result path and must "
                    f"match {_NAME.pattern} (letters, digits, '_' and '-'; no '/' or '.')"
                )
    results, data = cfg.get("results_dir", "results"), cfg.get("data_dir", "data")
    if isinstance(data, str) and not data.strip():
        raise ConfigError("data_dir: empty; name the folder the datasets live in (default: data)")
    if isinstance(results, str):
        if not results.strip():
            raise ConfigError("results_dir: empty; name the folder every output goes below (default: results)")
        if _folder(results) == Path(_folder(results).anchor):
            raise ConfigError(f"results_dir: {results!r} is the filesystem root; name a folder of its own")
        if isinstance(data, str) and _folder(results) == _folder(data):
            raise ConfigError(f"results_dir: {results!r} is data_dir too ({data!r}, both {_folder(data)}); outputs and "
                              "data need folders of their own")
        _check_reference_dir(cfg.get("reference_dir"), results)
    for key, folder in (("results_dir", results), ("data_dir", data)):  # both written: outputs, downloads
        if isinstance(folder, str):
            try:
                refuse_inside(folder, key)
            except SealError as exc:
                raise ConfigError(str(exc)) from None


def with_defaults(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``cfg`` with the schema's top-level defaults filled (what ``validate`` returns, unchecked)."""
    out = copy.deepcopy(dict(cfg))
    for k, prop in schema()["properties"].items():
        if "default" in prop:
            out.setdefault(k, prop["default"])
    return out


def validate(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """Check ``cfg`` against the schema and across keys; return it with top-level defaults filled.

    Raises ConfigError naming the offending key before any work starts.
    """
    _check_names_and_dirs(cfg)
    bad = _non_finite(cfg, ())
    if bad is not None:
        value = _get_path(cfg, bad)
        raise ConfigError(f"{_key(bad)}: {value} is not a finite number")
    s = schema()
    errors = sorted(jsonschema.Draft202012Validator(s).iter_errors(cfg), key=lambda e: list(e.absolute_path))
    if errors:
        e = errors[0]
        raise ConfigError(f"{_key(e.absolute_path)}: {e.message}")
    out = with_defaults(cfg)
    _check_plugins(out)
    _check_dataset_options(out)
    check_threads(out["threads"], "threads")
    job_schema = {"$defs": s["$defs"], **s["$defs"]["job"]}
    registered = base_losses()
    variants = out.get("loss_variants") or {}
    planned: list[tuple[Job, dict[str, Any]]] = []
    entry_losses = plugins.entry_points("losses")
    for name, exp in out["experiments"].items():
        for loss in exp["losses"]:
            if loss not in registered and loss not in variants and loss not in entry_losses:
                raise ConfigError(
                    f"experiments.{name}.losses: unknown loss {loss!r}; registered: {list(registered)}, "
                    f"loss_variants: {sorted(variants)}, plug-ins: {sorted(entry_losses)}"
                )
    for name, exp in out["experiments"].items():
        for d in exp["datasets"]:
            if d not in out["datasets"]:
                raise ConfigError(f"experiments.{name}.datasets: unknown dataset {d!r} (not under datasets)")
        for setting in settings(out, name):
            if not _SETTING_NAME.fullmatch(setting):
                raise ConfigError(
                    f"experiments.{name}: setting name {setting!r} must match {_SETTING_NAME.pattern} (one folder of "
                    "every result path: letters, digits, '_', '-' and '.', not first)"
                )
        for setting, over in settings(out, name).items():
            err = next(iter(jsonschema.Draft202012Validator(job_schema).iter_errors(over)), None)
            if err is not None:
                raise ConfigError(f"experiments.{name}.{setting}.{_key(err.absolute_path)}: {err.message}")
            for d in exp["datasets"]:
                first = _configured(out, Job(name, d, setting, exp["losses"][0], 0))
                for loss in exp["losses"]:
                    job = Job(name, d, setting, loss, 0)
                    spec = _configured(out, job)
                    where = f"experiments.{name}[{d}, {setting}, {loss}]"
                    _check_data_keys(out, job, spec, where)
                    if loss != exp["losses"][0] and loss not in variants and PLUGINS not in spec:
                        _check_required(spec, where)
                    else:
                        _check_job(spec, where)
                    _check_loss_params(out, spec, where)
                    _check_contracts(out, spec, where)
                    _check_one_partition(out, job, spec, first)
                    planned.append((job, spec))
    _check_real_data(out, planned)
    return out


def _check_real_data(cfg: Mapping[str, Any], planned: list[tuple[Job, dict[str, Any]]]) -> None:
    """Every partition of the study (each seed, the balanced one of a switch too) and its auxiliary data on the real
    dataset's class counts (``fedbalance.data.structures``), for the built-in sources: ConfigError naming the family,
    dataset, setting, seed and class, before any work. The partition rule checks the labels actually prepared."""
    try:
        import numpy  # noqa: F401
    except ImportError:  # the workflow catalog's lint runs Snakemake alone (no numpy): the partition rule still checks
        return
    from fedbalance.data import structures

    done: set[str] = set()
    for job, spec in planned:
        found = structures.for_source(*data_args(spec))
        if found is None:
            continue
        typed = JobSpec.from_config(spec)
        where = f"experiments.{job.experiment}[{job.dataset}, {job.setting}, {job.loss}]"
        if runs_monitor(typed) and typed.monitor.aux_per_class is not None:
            problem = structures.aux_problem(found, typed.monitor.aux_per_class, typed.monitor.aux_source)
            if problem:
                raise ConfigError(f"{where}: {problem}")
        scheme, kwargs = partition_args(typed)
        variants = [kwargs] + ([{**kwargs, "gamma": 1}] if typed.switch_round is not None and "gamma" in kwargs else [])
        for seed in cfg["experiments"][job.experiment].get("seeds", cfg.get("seeds", [0])):
            for params in variants:
                key = json.dumps([found.name, found.num_classes, scheme, params, seed], sort_keys=True, default=str)
                if key in done:
                    continue
                done.add(key)
                problem = structures.demand_problem(found, scheme, params, seed)
                if problem:
                    what = " (its balanced partition, from switch_round on)" if params is not kwargs else ""
                    raise ConfigError(
                        f"experiments.{job.experiment}[{job.dataset}, {job.setting}, seed {seed}]{what}: {problem}"
                    )


def _configured(cfg: Mapping[str, Any], job: Job) -> dict[str, Any]:
    """``configured_job``, its ConfigError (a plug-in estimator the job names) prefixed with the job's place."""
    try:
        return configured_job(cfg, job)
    except ConfigError as exc:
        raise ConfigError(f"experiments.{job.experiment}[{job.dataset}, {job.setting}, {job.loss}].{exc}") from None


def _check_plugins(cfg: Mapping[str, Any]) -> None:
    """The config's plug-ins before any job (docs/extending.md): no name shadows another silently (a built-in, an
    entry point, a loss variant, the top-level ``estimators``), every dotted path and entry-point name the config
    uses imports, and each follows its plug-in point's contract. ConfigError naming the key."""
    variants = cfg.get("loss_variants") or {}
    own = cfg.get("estimators") or {}
    estimator_builtin: Collection[str] = ESTIMATORS
    if plugins.entry_points("estimators") or own:
        from fedbalance.monitor.estimators import REGISTRY, as_estimator

        estimator_builtin = REGISTRY
    used = {"losses": {loss for exp in cfg["experiments"].values() for loss in exp["losses"]}
            | {str(v["loss"]) for v in variants.values()},
            "estimators": _named_under(cfg, "estimators"), "datasets": _named_under(cfg, "source")}
    for kind, builtin, named in (("losses", base_losses(), {v: f"loss_variants.{v}" for v in variants}),
                                 ("estimators", estimator_builtin, {e: f"estimators.{e}" for e in own}),
                                 ("datasets", _builtin_sources(), {})):
        clash = plugins.clashes(kind, builtin, named, used[kind])
        if clash is not None:
            raise ConfigError(clash)
    for name, variant in variants.items():
        _loss_record(str(variant["loss"]), tuple(sys.path), f"loss_variants.{name}.loss")
    for name, target in own.items():
        found = _plugin("estimators", target, f"estimators.{name}", ())
        assert found is not None
        try:
            as_estimator(found.load(), name, found.origin())
        except plugins.PluginError as exc:
            raise ConfigError(f"estimators.{name}: {exc}") from None
    levels = [("defaults", cfg.get("defaults") or {})] + [(f"datasets.{d}", v) for d, v in cfg["datasets"].items()]
    for key, level in levels:
        source = level.get("source")
        if isinstance(source, str) and source not in _builtin_sources():
            found = _plugin("datasets", source, f"{key}.source", _builtin_sources())
            assert found is not None
            from fedbalance.data.datasets import check_source

            try:
                check_source(found.load(), found.origin())
            except plugins.PluginError as exc:
                raise ConfigError(f"{key}.source: {exc}") from None


def _named_under(node: Any, key: str) -> set[str]:
    """Every string the config gives under ``key`` at any depth, alone or in a list (the estimators a study names,
    its dataset sources)."""
    found: set[str] = set()
    if isinstance(node, Mapping):
        for k, v in node.items():
            if k == key:
                found |= {v} if isinstance(v, str) else {x for x in v if isinstance(x, str)} if isinstance(v, list) else set()
            found |= _named_under(v, key)
    elif isinstance(node, list):
        for v in node:
            found |= _named_under(v, key)
    return found


def _check_contracts(cfg: Mapping[str, Any], spec: Mapping[str, Any], where: str) -> None:
    """Each plug-in a job uses, called once on a tiny synthetic input of the job's shapes (``fedbalance.jobs.contracts``:
    cached by plug-in, version and shapes; torch is imported only for a config with plug-ins). ConfigError naming the
    config key, the plug-in and its origin when one breaks its contract."""
    used = spec.get(PLUGINS) or {}
    if not used:
        return
    from fedbalance.jobs import contracts
    from fedbalance.data.datasets import dataset_info

    options = job_value(spec, "options")
    info = dataset_info(spec["source"], **options)
    if "dataset" in used:
        key = f"datasets.{spec['dataset']}.source"
        found = plugins.from_record("datasets", str(spec["source"]), used["dataset"])
        try:
            contracts.check_dataset(str(spec["source"]), found.version, str(spec["model"]),
                                    json.dumps(options, sort_keys=True, default=str))
        except plugins.PluginError as exc:
            raise ConfigError(f"{key}: dataset {spec['source']!r} ({found.origin()}): {exc}") from None
    if "loss" in used:
        found = plugins.from_record("losses", str(spec["base_loss"]), used["loss"])
        kwargs = job_value(spec, "loss_params").get(loss_params_key(spec), {})
        try:
            contracts.check_loss(str(spec["base_loss"]), found.version, int(info["num_classes"]),
                                 json.dumps(kwargs, sort_keys=True, default=str), job_value(spec, "path") != "sequential")
        except plugins.PluginError as exc:
            raise ConfigError(f"{where}: loss {spec['loss']!r} ({found.origin()}): {exc}") from None
    own = cfg.get("estimators") or {}
    for name in used.get("estimators") or {}:
        found = _plugin("estimators", own.get(name, name), f"{where}.monitor.estimators", ESTIMATORS)
        assert found is not None
        try:
            contracts.check_estimator(name, own.get(name), found.version, int(info["num_classes"]),
                                      int(info["in_channels"]), tuple(info["image_size"]))
        except plugins.PluginError as exc:
            text = str(exc) if found.origin() in str(exc) else f"{found.origin()}: {exc}"
            head = "" if text.startswith(f"estimator {name!r}") else f"estimator {name!r}: "
            raise ConfigError(f"{where}.monitor.estimators: {head}{text}") from None


def _check_loss_params(cfg: Mapping[str, Any], spec: Mapping[str, Any], where: str) -> None:
    """A job's ``loss_params`` name losses there are (registered, plug-in entry points, loss variants of a dotted
    path), its plug-in loss accepts its own, and a sequential-only plug-in loss is not put on the vectorised path."""
    variants = cfg.get("loss_variants") or {}
    dotted = {v for v, body in variants.items() if plugins.is_dotted(str(body["loss"]))}
    known = set(base_losses()) | set(plugins.entry_points("losses")) | dotted
    for key in job_value(spec, "loss_params"):
        if key not in known:
            raise ConfigError(f"{where}.loss_params.{key}: no loss of that name (registered: {list(base_losses())}, "
                              f"plug-ins: {sorted(set(plugins.entry_points('losses')) | dotted)})")
    record = (spec.get(PLUGINS) or {}).get("loss")
    if record is None:
        return
    from fedbalance.methods.losses import loss_class, loss_parameters

    accepted = loss_parameters(loss_class(str(spec["base_loss"])))
    key = loss_params_key(spec)
    unknown = sorted(set(job_value(spec, "loss_params").get(key, {})) - set(accepted))
    if unknown:
        raise ConfigError(f"{where}.loss_params.{key}: {unknown} not parameters of the loss {spec['base_loss']!r} "
                          f"(it accepts {accepted})")
    if not record.get("vectorisable", True) and job_value(spec, "path") == "vectorised":
        raise ConfigError(f"{where}.path: 'vectorised', but the loss {spec['base_loss']!r} is declared sequential-only "
                          "(vectorisable = False); set path to 'sequential' or 'auto'")


def load_config(source: str | Path | Mapping[str, Any]) -> dict[str, Any]:
    """Read a YAML file (strictly: a duplicate key is an error) or take a mapping, and validate it."""
    if isinstance(source, Mapping):
        return validate(source)
    path = Path(source)
    data = read_yaml(path)
    if not isinstance(data, Mapping):
        raise ConfigError(f"{path}: the top level must be a mapping")
    return validate(data)


def protocol(job_config: Mapping[str, Any], loss: str) -> dict[str, str]:
    """A job's protocol, the keys that act on its result: its configured keys (``job_config``: metrics.json's
    ``config``, ``JobSpec.as_dict()``) as dotted key -> JSON value, less what does not decide its training
    (``jobspec.training_key``: the identity and output-only keys, the monitor of a loss not fed by it), the seed, the
    parameters of other losses than its own (``loss_params.<loss>``, ``jobspec.loss_params_key``) and the partition keys its scheme does not read
    (``jobspec.PARTITION_KEYS``). An optional key left unset counts as its default (``JOB_DEFAULTS``). ``compare``
    (``fedbalance.evidence.reference``) and the tables' published comparisons read it alike."""
    config = deep_merge(JOB_DEFAULTS, {"loss": loss, **job_config})
    flat = flat_keys(json.loads(training_key(config)))
    flat.pop("seed", None)
    own = f"loss_params.{loss_params_key(config)}."  # a dotted-path loss's own key: its variant name, as the engine reads
    scheme = (config.get("partition") or {}).get("scheme")
    read = {f"partition.{k}" for k in PARTITION_KEYS.get(scheme, ()) + OPTIONAL_PARTITION_KEYS.get(scheme, ())}
    read.add("partition.scheme")
    return {k: v for k, v in flat.items() if (not k.startswith("loss_params.") or k.startswith(own))
            and (not k.startswith("partition.") or scheme not in PARTITION_KEYS or k in read)}


def shown_values(values: Collection[str]) -> str:
    """The values a key takes (JSON, one per job of a cell) as printed: "16", "16/30", "unset" for none."""
    return "/".join(sorted(str(v).strip('"') for v in values)) or "unset"


def protocol_differences(a: Mapping[str, Collection[str]], b: Mapping[str, Collection[str]]) -> dict[str, tuple[str, str]]:
    """The keys whose values differ between two cells' protocols (key -> the values its jobs were run with, as
    ``protocol`` gives them) -> (a's, b's) as printed (``shown_values``); empty when the two were run alike."""
    return {k: (shown_values(a.get(k, ())), shown_values(b.get(k, ()))) for k in sorted(set(a) | set(b))
            if set(a.get(k, ())) != set(b.get(k, ()))}


CLI_TYPE_HINT = {
    "boolean": "write {key}=True or {key}=False (Snakemake's --config reads only True and False as booleans)",
    "integer": "write {key}=N with N a whole number (e.g. {key}=2)",
    "number": "write {key}=X with X a number (e.g. {key}=0.5)",
    "array": "give a list in a config file (--configfile), not --config",
    "object": "give a mapping in a config file (--configfile), not --config",
}
"""How to write a value of each JSON-schema type on Snakemake's command line (``command_line_hint``)."""


def command_line_hint(cli_config: Mapping[str, Any], message: str) -> str:
    """For a ConfigError ``message`` ("download: 'false' is not of type 'boolean'") about a key given on Snakemake's
    command line (``cli_config``: ``--config`` as Snakemake parsed it), how to write it there ("; given as
    --config download=false, write download=True or download=False ..."); "" for any other error."""
    key = message.split(":", 1)[0]
    match = re.search(r"is not of type '(\w+)'", message)
    if key not in cli_config or match is None or match.group(1) not in CLI_TYPE_HINT:
        return ""
    return f"; given as --config {key}={cli_config[key]}, {CLI_TYPE_HINT[match.group(1)].format(key=key)}"
