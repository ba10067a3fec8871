"""The reference result set: finished jobs kept in the repository, rendered and compared without training.

A reference set is a folder laid out like a results folder (``<experiment>/<dataset>/<setting>/<loss>/
seed<k>/`` holding ``metrics.json``, ``rounds.csv`` and ``provenance.json``). With the config's
``reference_dir`` the workflow copies the jobs found there into ``results_dir`` (rule
``from_reference``, checking that each was run with the spec the config gives it now) and renders
every table, figure and summary from them; jobs the set does not hold are left out (their cells
print '–'). ``compare`` sets two result folders side by side, cell by cell. Torch-free.
"""

from __future__ import annotations

import json
import math
import textwrap
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from fedbalance.jobs.aggregate import collect
from fedbalance.jobs.config import ConfigError, jobs, resolve_job, twins
from fedbalance.jobs.config import protocol as config_protocol
from fedbalance.jobs.config import protocol_differences as config_differences
from fedbalance.common.jobspec import covers, flat_keys, training_key
from fedbalance.common.records import METRIC_SCALES, Job, plus_minus
from fedbalance.jobs.jobfolder import check, job_folders, read_metrics
from fedbalance.jobs.jobfolder import finished as folder_finished
from fedbalance.jobs.reuse import twin_config
from fedbalance.jobs.seal import SealError, verify_if_sealed
from fedbalance.evidence.seedstats import MIN_SEEDS, paired_differences, paired_interval, seed_mark, seed_span, welch_interval

METRICS = METRIC_SCALES


def finished(root: str | Path, job: Job) -> bool:
    """``job``'s folder under ``root`` holds both files a finished job writes."""
    return folder_finished(Path(root) / job.path)


def reference_jobs(cfg: Mapping[str, Any], root: str | Path) -> tuple[list[Job], dict[Job, Job]]:
    """(jobs of the study that ``root`` holds, jobs it does not hold that one of them covers -> that job).

    Every job the set holds is taken as it is, except a twin (``config.twins``) whose trained job the set holds too
    (it is copied from that job, as a run would). A job the set does not hold is copied from a held job that covers
    it (``jobspec.covers``: the same training, no more recorded), its trained job when the set holds that: whichever
    of two such jobs the config's order trains, the set renders both.
    """
    tw = twins(cfg)
    done = [j for j in jobs(cfg) if finished(root, j)]
    done_set = set(done)
    held = [j for j in done if j not in tw or tw[j] not in done_set]
    specs = {j: resolve_job(cfg, j) for j in held}
    by_key: dict[str, list[Job]] = {}
    for j in held:
        by_key.setdefault(training_key(specs[j]), []).append(j)
    copied: dict[Job, Job] = {}
    for j in jobs(cfg):
        if j in specs:
            continue
        if tw.get(j) in specs:
            copied[j] = tw[j]
            continue
        spec = resolve_job(cfg, j)
        other = next((h for h in by_key.get(training_key(spec), []) if covers(specs[h], spec)), None)
        if other is not None:
            copied[j] = other
    return held, copied


def study_jobs(cfg: Mapping[str, Any]) -> list[Job]:
    """Every job of the study once, in the config's order, a twin replaced by the job trained in its place (at the
    twin's place when that comes first): what ``missing_jobs`` lists for a set that holds nothing."""
    tw = twins(cfg)
    return list(dict.fromkeys(tw.get(j, j) for j in jobs(cfg)))


def missing_jobs(cfg: Mapping[str, Any], root: str | Path) -> list[Job]:
    """The jobs to train so that ``root`` renders every job of the study, in the config's order: each job the set
    neither holds nor copies (``reference_jobs``), a twin replaced by the job trained in its place (at the twin's
    place when that comes first), each once."""
    held, copied = reference_jobs(cfg, root)
    have = set(held) | set(copied)
    tw = twins(cfg)
    out: dict[Job, None] = {}
    for j in jobs(cfg):
        if j not in have:
            out.setdefault(tw.get(j, j), None)
    return [j for j in out if j not in have]


def _sets_below(cfg: Mapping[str, Any], root: Path) -> list[str]:
    """The folders right below ``root`` that hold jobs of ``cfg`` (a reference set's parent named by mistake)."""
    below = sorted(p for p in root.iterdir() if p.is_dir()) if root.is_dir() else []
    return [f"{p} ({len(reference_jobs(cfg, p)[0])} jobs)" for p in below if reference_jobs(cfg, p)[0]]


class ReferenceSetError(ValueError):
    """A reference set that cannot be rendered; the message names the folder and what to do."""


def render_jobs(cfg: Mapping[str, Any], root: str | Path, *,
                notice: Callable[[str], None] | None = None) -> tuple[list[Job], dict[Job, Job]]:
    """``reference_jobs`` of a set about to be rendered, checked before any job starts.

    ReferenceSetError unless ``root`` is a folder holding at least one finished job of ``cfg``, its set's files are
    those its manifest records and, inside a git work tree, those of the commit (``seal.verify_if_sealed``; the config's
    ``accept_uncommitted`` reads uncommitted ones, ``notice`` told so) and each held job was trained with the spec
    ``cfg`` gives it now (a render copies jobs, it cannot retrain one); JobFolderError naming the file when a held job's
    folder is not whole (``jobfolder.check``).
    """
    path = Path(root)
    if not path.is_dir():
        what = "is a file" if path.exists() else "does not exist"
        raise ReferenceSetError(f"reference_dir {root}: {what}; name the folder of a reference set (e.g. reference/mnist)")
    try:
        verify_if_sealed(path, "reference_dir", accept_uncommitted=bool(cfg.get("accept_uncommitted")), notice=notice)
    except SealError as exc:
        raise ReferenceSetError(str(exc)) from None
    held, copied = reference_jobs(cfg, path)
    if not held:
        below = _sets_below(cfg, path)
        raise ReferenceSetError(
            f"reference_dir {root} holds no finished job of this config (nothing to render)"
            + (f"; the folders below it that do: {', '.join(below)}" if below else
               "; name a reference set of this config's experiments (e.g. reference/mnist with config/mnist.yaml)")
        )
    for job in held:
        folder = path / job.path
        metrics = check(folder)
        try:
            twin_config(metrics, resolve_job(cfg, job), str(folder))
        except ConfigError:
            raise ReferenceSetError(
                f"{folder} was trained with other parameters than this config gives {job.path}; a render copies the "
                "set's jobs and cannot train one: render with the config it was trained with (its provenance.json "
                "names it), or take the job out of the set"
            ) from None
    return held, copied


def _cells(final: pd.DataFrame, metrics: list[str]) -> pd.DataFrame:
    keys = ["experiment", "dataset", "setting", "loss"]
    rows = []
    for key, grp in final.groupby(keys, sort=True):
        for m in metrics:
            vals = grp[m].dropna() * METRICS[m]
            rows.append({**dict(zip(keys, key)), "metric": m, "n": len(vals), "mean": vals.mean() if len(vals) else math.nan,
                         "std": vals.std(ddof=1) if len(vals) > 1 else math.nan,
                         "seeds": ",".join(str(s) for s in sorted(grp.seed)),
                         "values": dict(zip(grp.loc[vals.index, "seed"].astype(int), vals.astype(float)))})
    return pd.DataFrame(rows, columns=[*keys, "metric", "n", "mean", "std", "seeds", "values"])


DIFFERENT_PROTOCOLS = "protocols differ"
"""The verdict of a row whose cell the two sides ran with different protocols (``compare``), unless asked for one."""


RULE = (
    f"Rule: ours − reference at 95 %. On {MIN_SEEDS} common seeds or more the two sides are paired seed by seed (one "
    "seed gives both the same partition, client selection, initial model and auxiliary data; 'identical' when every "
    "seed's difference is zero; ours and the reference then shown on those seeds), with fewer by Welch's t on every "
    "seed of each side (2 a side at least; the row says 'unlike seeds' and names them). 'differs' when the interval "
    "excludes zero, 'not distinguishable' when it holds it."
)
"""The rule under ``compare_markdown``'s table, in words (``verdict``)."""
NO_REFERENCE = "no reference cell"
"""The verdict of a plug-in's cell (its loss or its dataset a plug-in) that the reference does not hold: listed, one line
a cell (``compare_markdown``), since a reference set of the paper's losses never holds one."""
IDENTICAL = "identical"
SAME = "not distinguishable"
DIFFERS = "differs"
FEW_SEEDS = "too few seeds"
MISSING = "missing"
VERDICTS = (IDENTICAL, SAME, DIFFERS, DIFFERENT_PROTOCOLS, FEW_SEEDS, NO_REFERENCE, MISSING)
"""The verdicts of a comparison row (``verdict``), in the order the summary counts them."""
PAIRED, WELCH = "paired", "Welch"


@dataclass(frozen=True)
class Verdict:
    """One row's verdict: the test it rests on (``PAIRED`` on the common seeds, ``WELCH`` on every seed of both
    sides, "" when none), the seeds it read (paired: common; Welch: ours + reference) and the 95 % interval of ours −
    reference (NaN without a test)."""

    verdict: str
    test: str = ""
    seeds: int = 0
    low: float = math.nan
    high: float = math.nan


def verdict(ours: Mapping[int, float], ref: Mapping[int, float]) -> Verdict:
    """Whether ours and the reference differ, from their values by seed, at 95 % (``fedbalance.evidence.seedstats``).

    One seed gives both sides' jobs the same partition, client selection, initial model and auxiliary data, so on
    ``MIN_SEEDS`` common seeds or more the comparison is paired (ours − reference seed by seed; ``IDENTICAL`` when
    every difference is zero); with fewer it is Welch's, on every seed of each side (two a side at least). ``DIFFERS``
    when the interval excludes zero, ``SAME`` ("not distinguishable") when it holds it.
    """
    if not ours or not ref:
        return Verdict(MISSING)
    common, d = paired_differences(ours, ref)
    if len(common) >= MIN_SEEDS:
        if all(x == 0.0 for x in d):
            return Verdict(IDENTICAL, PAIRED, len(common), 0.0, 0.0)
        ci, test, n = paired_interval(d), PAIRED, len(common)
    elif len(ours) >= 2 and len(ref) >= 2:
        ci, test, n = welch_interval(list(ours.values()), list(ref.values())), WELCH, len(ours) + len(ref)
    else:
        return Verdict(FEW_SEEDS)
    return Verdict(SAME if ci.holds_zero else DIFFERS, test, n, ci.low, ci.high)


def compare(ours: str | Path, reference: str | Path, metrics: list[str] | None = None, *,
            across_protocols: bool = False, accept_uncommitted: bool = False,
            notice: Callable[[str], None] | None = None) -> pd.DataFrame:
    """Cell by cell (a cell: experiment, dataset, setting, loss, its seeds pooled), one row per metric: ours and the
    reference, mean ± std over seeds.

    Each side is every finished job folder under it (a reference set's seal checked first: ``seal.verify_if_sealed``,
    SealError naming the files that differ from its manifest or, inside a git work tree, from the commit, unless
    ``accept_uncommitted``, ``notice`` told so); cells held by one side only are rows with ``missing``.
    ``diff`` is ours − reference: on the common seeds where the verdict pairs them (``mean_*``, ``std_*`` and
    ``n_*`` stay every seed's; ``mean_*_common``, ``std_*_common`` are on ``seeds_common``), else on every seed of each
    side (``seeds_ours``, ``seeds_ref``: the seeds each side holds); ``protocol`` names the keys whose values differ between the sides' jobs of the
    cell (``protocol_differences``), empty when they were run alike. ``verdict``, ``test``, ``seeds_compared``,
    ``low`` and ``high`` are ``verdict``'s (the 95 % interval of ours − reference). Where the protocols differ the
    verdict is ``DIFFERENT_PROTOCOLS`` (the seeds say nothing across protocols), unless ``across_protocols``.
    ``plugin`` names the plug-ins of ours' cell (``plugin_cells``); such a cell the reference lacks is ``NO_REFERENCE``.
    """
    metrics = list(metrics or ["acc_minority", "acc_majority", "auc_hard"])
    for side, what in ((ours, "--ours"), (reference, "--reference")):
        verify_if_sealed(side, what, accept_uncommitted=accept_uncommitted, notice=notice)
    a = _cells(collect(ours)[0], metrics)
    b = _cells(collect(reference)[0], metrics)
    keys = ["experiment", "dataset", "setting", "loss", "metric"]
    out = a.merge(b, on=keys, how="outer", suffixes=("_ours", "_ref"))
    out[["n_ours", "n_ref"]] = out[["n_ours", "n_ref"]].fillna(0).astype(int)
    common = [sorted(set(_values(a)) & set(_values(b))) for a, b in zip(out.values_ours, out.values_ref)]
    out["seeds_common"] = [",".join(map(str, c)) for c in common]
    for side in ("ours", "ref"):
        on = [[_values(v)[s] for s in c] for v, c in zip(out[f"values_{side}"], common)]
        out[f"mean_{side}_common"] = [sum(x) / len(x) if x else math.nan for x in on]
        out[f"std_{side}_common"] = [float(pd.Series(x).std()) if len(x) > 1 else math.nan for x in on]
    differences = protocol_differences(ours, reference)
    out["protocol"] = [", ".join(differences.get(tuple(getattr(r, k) for k in CELL), {})) for r in out.itertuples()]
    verdicts = [Verdict(DIFFERENT_PROTOCOLS) if r.protocol and not across_protocols
                else verdict(_values(r.values_ours), _values(r.values_ref)) for r in out.itertuples()]
    out["verdict"] = [v.verdict for v in verdicts]
    mine = plugin_cells(ours)
    out["plugin"] = [mine.get(tuple(getattr(r, k) for k in CELL), "") for r in out.itertuples()]
    out.loc[(out.plugin != "") & (out.n_ref == 0), "verdict"] = NO_REFERENCE
    out["test"] = [v.test for v in verdicts]
    out["seeds_compared"] = [v.seeds for v in verdicts]
    out["low"] = [v.low for v in verdicts]
    out["high"] = [v.high for v in verdicts]
    paired = out.test == PAIRED
    out["diff"] = (out.mean_ours_common - out.mean_ref_common).where(paired, out.mean_ours - out.mean_ref)
    return out.drop(columns=["values_ours", "values_ref"]).sort_values(keys, ignore_index=True)


def coverage_text(ours: str | Path) -> str:
    """Lines for ``compare``: the empirical coverage of the monitor's 95 % intervals (the shipped calibration's,
    ``evidence.coverage.shipped_coverage``) on ``ours``' jobs that record the composition, a line per recorded
    estimator with its Clopper–Pearson interval and median width (each under ``compare``'s 200 characters); empty
    when none does."""
    from fedbalance.evidence.coverage import shipped_coverage

    table = shipped_coverage(ours)
    if table.empty:
        return ""
    parts = [f"- {r.estimator}: {100 * r.coverage:.1f} % [{100 * r.ci_low:.1f}, {100 * r.ci_high:.1f}] of {r.n} "
             f"class-rounds, median width {r.median_width:.3f}\n" for r in table.itertuples()]
    return (f"Monitor's 95 % intervals on ours, coverage ({int(table.jobs.max())} jobs recording the composition; "
            "calibration fitted on the reference set's seeds 0–2, docs/monitor.md):\n" + "".join(parts))


def _values(cell: Any) -> dict[int, float]:
    """A side's values by seed (none where the side lacks the cell: NaN after the outer merge)."""
    return cell if isinstance(cell, dict) else {}


CELL = ("experiment", "dataset", "setting", "loss")
"""The keys of one comparison cell (its seeds pooled)."""


def protocol(metrics: Mapping[str, Any]) -> dict[str, str]:
    """A finished job's protocol (``config.protocol`` of its metrics.json's ``config`` and loss: the keys that act on
    its result)."""
    return config_protocol(metrics["config"], metrics["job"]["loss"])


def plugin_cells(root: str | Path) -> dict[tuple[str, ...], str]:
    """Cell -> the plug-ins its jobs under ``root`` train with, in words ("loss cb (fedbalance-cb 0.1.0)"): the cells of
    a plug-in loss or dataset (their spec's ``plugins``); an estimator adds no cell."""
    cells: dict[tuple[str, ...], str] = {}
    for folder in job_folders(root):
        metrics = read_metrics(folder)
        used = (metrics.get("config") or {}).get("plugins") or {}
        words = [f"{what} {metrics['job']['loss'] if what == 'loss' else metrics['config'].get('source')} ("
                 + (f"{rec.get('package')} {rec.get('version')}" if rec.get("package") else str(rec.get("version")))
                 + ")" for what, rec in used.items() if what in ("loss", "dataset")]
        if words:
            cells[tuple(str(metrics["job"][k]) for k in CELL)] = ", ".join(words)
    return cells


def _protocols(root: str | Path) -> dict[tuple[str, ...], dict[str, set[str]]]:
    """Cell -> dotted key -> the values its jobs under ``root`` were run with (one per seed that differs)."""
    cells: dict[tuple[str, ...], dict[str, set[str]]] = {}
    for folder in job_folders(root):
        metrics = read_metrics(folder)
        cell = tuple(str(metrics["job"][k]) for k in CELL)
        for key, value in protocol(metrics).items():
            cells.setdefault(cell, {}).setdefault(key, set()).add(value)
    return cells


def protocol_differences(ours: str | Path, reference: str | Path) -> dict[tuple[str, ...], dict[str, tuple[str, str]]]:
    """For each cell both sides hold: the keys whose values differ (``protocol``) -> (ours, reference) as printed."""
    a, b = _protocols(ours), _protocols(reference)
    out: dict[tuple[str, ...], dict[str, tuple[str, str]]] = {}
    for cell in sorted(set(a) & set(b)):
        differ = config_differences(a[cell], b[cell])
        if differ:
            out[cell] = differ
    return out


def protocol_header(differences: Mapping[tuple[str, ...], Mapping[str, tuple[str, str]]], shared: int) -> str:
    """Which keys differ between the sides' protocols, over how many of the ``shared`` cells: a line, then one line
    per key ("- rounds: 16/4 vs 30/50", ours vs reference)."""
    cells = f"{shared} cell{'' if shared == 1 else 's'}"
    if not differences:
        return f"protocols: the same in all {cells} both sides hold"
    keys: dict[str, tuple[set[str], set[str]]] = {}
    for differ in differences.values():
        for key, (ours, ref) in differ.items():
            keys.setdefault(key, (set(), set()))
            keys[key][0].add(ours)
            keys[key][1].add(ref)
    lines = [f"protocols differ in {len(differences)} of {cells} both sides hold, in the keys that act on the "
             "cell's loss (ours vs reference):"]
    lines += [f"- {k}: {'/'.join(sorted(o))} vs {'/'.join(sorted(r))}" for k, (o, r) in sorted(keys.items())]
    return "\n".join(lines)


def _pm(mean: float, std: float, n: int, digits: int) -> str:
    return "–" if n == 0 else f"{plus_minus(mean, std, digits)} ({n})"


def _side(r: Any, side: str, digits: int) -> str:
    """One side of a row as the table prints it: on the common seeds where the verdict pairs them ("70.00 ± 1.00 (3
    of 5)" when the side holds more), else on every seed it holds."""
    n = getattr(r, f"n_{side}")
    if r.test != PAIRED:
        return _pm(getattr(r, f"mean_{side}"), getattr(r, f"std_{side}"), n, digits)
    k = r.seeds_compared
    return f"{plus_minus(getattr(r, f'mean_{side}_common'), getattr(r, f'std_{side}_common'), digits)} " + (
        f"({k})" if k == n else f"({k} of {n})")


def _test(r: Any) -> str:
    """The test a row's verdict rests on, the seeds it read, and their mark (``seedstats.seed_mark``): paired on the
    common seeds, or Welch's on unlike ones (named)."""
    if not r.test:
        return "–"
    cell = "/".join(str(getattr(r, k)) for k in CELL)
    ids = {side: [int(x) for x in str(getattr(r, f"seeds_{side}")).split(",") if x not in ("", "nan")]
           for side in ("ours", "ref", "common")}
    if r.test == PAIRED:
        return f"{r.test} ({r.seeds_compared}; seeds {seed_span(ids['common'])}){seed_mark(cell, ids['common'], ids['common'])}"
    return f"{r.test} ({r.seeds_compared}){seed_mark(cell, ids['ours'], ids['ref'])}"
def _digits(metric: str) -> int:
    """Decimals a metric prints with: 2 for a percentage, 4 for an AUC."""
    return 2 if METRICS[metric] == 100.0 else 4


def _count(n: int, what: str) -> str:
    return f"{n} {what}{'' if n == 1 else 's'}"


def compare_markdown(frame: pd.DataFrame, header: str | None = None, *, unmatched: bool = False) -> str:
    """The comparison as a Markdown table (pandas ``to_markdown``): one row per cell and metric, ours and the reference
    as mean ± std (seeds), the difference, its 95 % interval, the test and the verdict (``RULE`` under it); ``header`` (``protocol_header``) above it. The cells one
    side alone holds are counted in one line, and listed only with ``unmatched``; a plug-in's cell that only ours holds
    (``NO_REFERENCE``) is listed anyway, one line a cell with ours' values."""
    cells = frame.groupby(list(CELL), sort=False).agg(n_ours=("n_ours", "max"), n_ref=("n_ref", "max"))
    both = cells[(cells.n_ours > 0) & (cells.n_ref > 0)]
    only_ours, only_ref = cells[cells.n_ref == 0], cells[cells.n_ours == 0]
    metrics = list(dict.fromkeys(frame.metric))
    lines = [f"{_count(len(both), 'cell')} (experiment, dataset, setting, loss) both sides hold, "
             f"{_count(len(metrics), 'metric')} each ({', '.join(metrics)});",
             f"{_count(len(only_ours), 'cell')} only ours holds, {len(only_ref)} only the reference holds "
             f"({'listed' if unmatched else 'not listed: --unmatched lists them'})."]
    if header:
        lines += [header]
    if (frame.verdict == DIFFERENT_PROTOCOLS).any():
        lines += [f"No verdict where the protocols differ ('{DIFFERENT_PROTOCOLS}'; --across-protocols gives one): "
                  "only the differences."]
    plugin = frame.plugin if "plugin" in frame.columns else pd.Series("", index=frame.index)
    alone = frame[(frame.verdict == NO_REFERENCE) & (plugin != "")]
    if len(alone) and not unmatched:
        lines += [f"{_count(alone.groupby(list(CELL)).ngroups, 'cell')} of a plug-in only ours holds, one line each:"]
        for cell, grp in alone.groupby(list(CELL), sort=False):
            values = ", ".join(f"{r.metric} {_pm(r.mean_ours, r.std_ours, r.n_ours, _digits(r.metric))}"
                               for r in grp.itertuples())
            lines += [f"- {'/'.join(cell)} ({grp.plugin.iloc[0]}): {NO_REFERENCE}; ours: {values}"]
    shown = frame if unmatched else frame[(frame.n_ours > 0) & (frame.n_ref > 0)]
    rows = []
    for r in shown.itertuples():
        digits = _digits(r.metric)
        rows.append({"experiment": r.experiment, "dataset": r.dataset, "setting": r.setting, "loss": r.loss,
                     "metric": r.metric, "ours": _side(r, "ours", digits), "reference": _side(r, "ref", digits),
                     "ours − ref [95 %]": "–" if math.isnan(r.diff) else f"{r.diff:+.{digits}f}" + (
                         "" if math.isnan(r.low) else f" [{r.low:+.{digits}f}, {r.high:+.{digits}f}]"),
                     "test (seeds)": _test(r), "verdict (95 %)": r.verdict})
    table = pd.DataFrame(rows, columns=["experiment", "dataset", "setting", "loss", "metric", "ours", "reference",
                                        "ours − ref [95 %]", "test (seeds)", "verdict (95 %)"])
    counts = shown.verdict.value_counts()
    summary = ", ".join(f"{counts[v]} {v}" for v in VERDICTS if v in counts)
    return ("\n".join(lines) + "\n\n" + (table.to_markdown(index=False, disable_numparse=True) if rows else "(no row)")
            + f"\n\n{_count(len(shown), 'row')}: {summary or 'none'}.\n\n{textwrap.fill(RULE, 116)}\n")
