"""Study configuration: load, validate (JSON schema + cross-key checks), expand into jobs.

A job is one (experiment, dataset, setting, loss, seed). Its parameters are merged key by key:
``defaults < datasets[d] < experiments[e].params < experiments[e].dataset_params[d] < setting``.
The Snakefile validates with the same schema (workflow/schemas/config.schema.yaml).
"""

from __future__ import annotations

import copy
import itertools
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import jsonschema
import yaml

SCHEMA_PATH = Path(__file__).with_name("config.schema.yaml")
_SETTING_NAME = re.compile(r"^[A-Za-z0-9._-]+$")
PARTITION_KEYS = {
    "monitor": ("num_clients", "samples_per_class"),
    "imbalance": ("num_clients", "min_classes", "max_classes", "majority_samples", "gamma"),
    "mismatch": ("num_clients", "classes_per_client", "majority_samples", "gamma"),
    "writers": ("num_clients", "writers_per_client", "gamma"),
}


class ConfigError(ValueError):
    """A configuration value is wrong; the message names the key."""


@dataclass(frozen=True, order=True)
class Job:
    """One training job: the unit Snakemake schedules."""

    experiment: str
    dataset: str
    setting: str
    loss: str
    seed: int

    @property
    def path(self) -> str:
        """Relative result folder ``<experiment>/<dataset>/<setting>/<loss>/seed<k>``."""
        return f"{self.experiment}/{self.dataset}/{self.setting}/{self.loss}/seed{self.seed}"


def schema() -> dict:
    """The configuration's JSON schema."""
    return yaml.safe_load(SCHEMA_PATH.read_text())


def deep_merge(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """Merge ``override`` into a copy of ``base``; nested mappings merge key by key."""
    out = copy.deepcopy(dict(base))
    for k, v in override.items():
        if isinstance(v, Mapping) and isinstance(out.get(k), Mapping):
            out[k] = deep_merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def _set_dotted(d: dict[str, Any], key: str, value: Any) -> dict[str, Any]:
    head, _, rest = key.partition(".")
    return {head: _set_dotted({}, rest, value) if rest else value}


def _format_value(v: Any) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


def settings(cfg: Mapping[str, Any], experiment: str) -> dict[str, dict[str, Any]]:
    """Setting name -> job overrides of one experiment (explicit ``settings`` plus the ``grid`` product)."""
    exp = cfg["experiments"][experiment]
    out = {k: dict(v) for k, v in exp.get("settings", {}).items()}
    grid = exp.get("grid", {})
    if grid:
        axes = [[(prefix, ax["key"], v) for v in ax["values"]] for prefix, ax in grid.items()]
        for combo in itertools.product(*axes):
            name = "_".join(f"{p}{_format_value(v)}" for p, _, v in combo)
            over: dict[str, Any] = {}
            for _, key, v in combo:
                over = deep_merge(over, _set_dotted({}, key, v))
            out[name] = over
    if not out:
        raise ConfigError(f"experiments.{experiment}: needs 'settings' or 'grid'")
    return out


def base_losses() -> tuple[str, ...]:
    """The registered loss names (``fedbalance.losses.LOSSES``), as the schema lists them."""
    return tuple(schema()["properties"]["loss_variants"]["additionalProperties"]["properties"]["loss"]["enum"])


def base_loss(spec: Mapping[str, Any]) -> str:
    """The registered loss a job trains with: its ``loss``, or the base of a ``loss_variants`` entry."""
    return str(spec.get("base_loss", spec["loss"]))


def resolve_job(cfg: Mapping[str, Any], job: Job) -> dict[str, Any]:
    """The full parameter set of one job (a plain dict; see the schema's ``job``).

    A loss named under ``loss_variants`` trains its base loss (``base_loss``) with the variant's
    ``params`` merged last, after the setting.
    """
    exp = cfg["experiments"][job.experiment]
    spec = deep_merge(cfg.get("defaults", {}), cfg["datasets"][job.dataset])
    spec = deep_merge(spec, exp.get("params", {}))
    spec = deep_merge(spec, exp.get("dataset_params", {}).get(job.dataset, {}))
    spec = deep_merge(spec, settings(cfg, job.experiment)[job.setting])
    variant = (cfg.get("loss_variants") or {}).get(job.loss)
    if variant is not None:
        spec = deep_merge(spec, variant.get("params", {}))
    spec.update(dataset=job.dataset, experiment=job.experiment, setting=job.setting, loss=job.loss, seed=job.seed)
    spec["base_loss"] = variant["loss"] if variant is not None else job.loss
    return spec


def partition_args(spec: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """(scheme, keyword arguments) of a job's partition, for ``fedbalance.partition.make_partition``."""
    p = spec["partition"]
    scheme = p["scheme"]
    kwargs = {k: p[k] for k in PARTITION_KEYS[scheme] if k in p}
    if scheme != "monitor":
        kwargs["minority_classes"] = tuple(spec.get("minority_classes", ()))
    return scheme, kwargs


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


def _key(path: Any) -> str:
    return ".".join(str(p) for p in path) or "<top level>"


def _check_job(spec: Mapping[str, Any], where: str) -> None:
    for key in ("source", "model"):
        if key not in spec:
            raise ConfigError(f"{where}: '{key}' is not set (put it under datasets.{spec['dataset']})")
    from fedbalance.data import dataset_info

    q = dataset_info(spec["source"], **spec.get("options", {}))["num_classes"]
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


def validate(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """Check ``cfg`` against the schema and across keys; return it with top-level defaults filled.

    Raises ConfigError naming the offending key before any work starts.
    """
    s = schema()
    errors = sorted(jsonschema.Draft202012Validator(s).iter_errors(cfg), key=lambda e: list(e.absolute_path))
    if errors:
        e = errors[0]
        raise ConfigError(f"{_key(e.absolute_path)}: {e.message}")
    out = copy.deepcopy(dict(cfg))
    for k, prop in s["properties"].items():
        if "default" in prop:
            out.setdefault(k, prop["default"])
    job_schema = {"$defs": s["$defs"], **s["$defs"]["job"]}
    registered = base_losses()
    variants = out.get("loss_variants") or {}
    for name in variants:
        if name in registered:
            raise ConfigError(f"loss_variants.{name}: the name of a registered loss; choose another name")
    for name, exp in out["experiments"].items():
        for loss in exp["losses"]:
            if loss not in registered and loss not in variants:
                raise ConfigError(
                    f"experiments.{name}.losses: unknown loss {loss!r}; registered: {list(registered)}, "
                    f"loss_variants: {sorted(variants)}"
                )
    for name, exp in out["experiments"].items():
        for d in exp["datasets"]:
            if d not in out["datasets"]:
                raise ConfigError(f"experiments.{name}.datasets: unknown dataset {d!r} (not under datasets)")
        for setting in settings(out, name):
            if not _SETTING_NAME.match(setting):
                raise ConfigError(f"experiments.{name}: setting name {setting!r} must match {_SETTING_NAME.pattern}")
        for setting, over in settings(out, name).items():
            err = next(iter(jsonschema.Draft202012Validator(job_schema).iter_errors(over)), None)
            if err is not None:
                raise ConfigError(f"experiments.{name}.{setting}.{_key(err.absolute_path)}: {err.message}")
            for d, loss in itertools.product(exp["datasets"], exp["losses"]):
                if loss != exp["losses"][0] and loss not in variants:
                    continue
                spec = resolve_job(out, Job(name, d, setting, loss, 0))
                _check_job(spec, f"experiments.{name}[{d}, {setting}{', ' + loss if loss in variants else ''}]")
    return out


def load_config(source: str | Path | Mapping[str, Any]) -> dict[str, Any]:
    """Read a YAML file (or take a mapping) and validate it."""
    if isinstance(source, Mapping):
        return validate(source)
    path = Path(source)
    if not path.is_file():
        raise ConfigError(f"config file {path} does not exist")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from exc
    if not isinstance(data, Mapping):
        raise ConfigError(f"{path}: the top level must be a mapping")
    return validate(data)
