"""Run reference jobs (config/mnist.yaml's protocol) in the background from a pinned checkout.

Each job is ``python -m fedbalance train`` run from ``--checkout`` (a ``git worktree`` pinned at one
commit, so that edits in the working tree never change the code under a running job), with that
checkout's ``src`` first on ``PYTHONPATH``, one torch thread, on the CPU unless ``--device`` says
otherwise. A finished job's folder gets ``provenance.json`` (commit, command, device, torch, threads,
wall time, host); a job whose ``metrics.json`` exists is skipped, an interrupted one resumes from its
checkpoint. ``--collect`` copies finished jobs into the repository's reference set
(``reference/<study>/<experiment>/<dataset>/<setting>/<loss>/seed<k>/``: metrics.json, rounds.csv,
provenance.json; nothing else).

    python scripts/reference_jobs.py run --checkout /work/ref-wt --out /work/refruns \\
        --jobs losses:g10,g50:ce,ratio,ratio_rel:0,1,2 --workers 2
    python scripts/reference_jobs.py collect --out /work/refruns --reference reference/mnist
    python scripts/reference_jobs.py status --reference reference/mnist     # what the set holds (Markdown)
    python scripts/reference_jobs.py docs --rendered results_reference      # the render into docs/ (--check: compare)
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from fedbalance.jobfolder import FILES, METRICS, read_metrics  # FILES are copied as they are; provenance.json beside them
from fedbalance.presentation.prose import blocks as prose_blocks


def parse_jobs(specs: list[str], dataset: str) -> list[tuple[str, str, str, str, int]]:
    """``experiment:settings:losses:seeds`` (comma lists) → jobs, seeds outermost, in the order given."""
    out: list[tuple[str, str, str, str, int]] = []
    for spec in specs:
        parts = spec.split(":")
        try:
            exp, settings, losses, seeds = parts
            seed_list = [int(s) for s in seeds.split(",")]
        except ValueError:
            raise SystemExit(f"error: --jobs {spec!r} is not experiment:settings:losses:seeds "
                             "(comma lists; seeds are integers), e.g. losses:g10,g50:ce,ratio:0,1,2") from None
        setting_list, loss_list = settings.split(","), losses.split(",")
        if not exp or "" in setting_list + loss_list or min(seed_list) < 0:
            raise SystemExit(f"error: --jobs {spec!r} has an empty name or a negative seed")
        for seed, setting, loss in itertools.product(seed_list, setting_list, loss_list):
            job = (exp, dataset, setting, loss, seed)
            if job not in out:
                out.append(job)
    return out


def unknown_jobs(config: Path, jobs: list[tuple[str, str, str, str, int]]) -> list[str]:
    """The jobs whose (experiment, dataset, setting, loss) the config does not define (any seed is allowed)."""
    from fedbalance.config import ConfigError, load_config, jobs as config_jobs

    if not config.is_file():
        raise SystemExit(f"error: --config {config} is not a file")
    try:
        cfg = load_config(config)
    except ConfigError as exc:
        raise SystemExit(f"error: --config {config}: {exc}") from None
    defined = {(j.experiment, j.dataset, j.setting, j.loss) for j in config_jobs(cfg)}
    return ["/".join(map(str, j[:4])) for j in jobs if j[:4] not in defined]


def job_dir(root: Path, job: tuple[str, str, str, str, int]) -> Path:
    exp, ds, setting, loss, seed = job
    return root / exp / ds / setting / loss / f"seed{seed}"


def runtime_of(metrics: dict) -> dict:
    """What decides the numbers besides the spec: device, torch threads, kernels, versions (from metrics.json)."""
    out = {k: metrics.get(k) for k in ("device", "threads", "deterministic", "versions", "path")}
    out["path"] = out["path"] or metrics["config"].get("path")  # older metrics.json: the resolved path in config
    return out


def checkout_commit(args: argparse.Namespace) -> tuple[str, bool]:
    """The commit of ``--checkout`` and whether its tracked files differ from it (``--commit``: a copy without git)."""
    if args.commit:
        return args.commit, False
    checkout = args.checkout.resolve()
    commit = subprocess.run(
        ["git", "-C", str(checkout), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()
    dirty = subprocess.run(
        ["git", "-C", str(checkout), "status", "--porcelain", "--untracked-files=no"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    return commit, bool(dirty)


class Window:
    """``--deadline-s``: no job starts unless the median finished job would end before the deadline; at the
    deadline running jobs are stopped (their checkpoints stay, a later run resumes them)."""

    def __init__(self, seconds: float | None) -> None:
        self.end = None if seconds is None else time.time() + seconds
        self.walls: list[float] = []

    def admits(self) -> bool:
        if self.end is None:
            return True
        expected = sorted(self.walls)[len(self.walls) // 2] if self.walls else 0.0
        return time.time() + expected < self.end

    def left(self) -> float | None:
        return None if self.end is None else max(0.0, self.end - time.time())


def run_one(args: argparse.Namespace, job: tuple[str, str, str, str, int], window: Window | None = None) -> str:
    window = window or Window(None)
    out = job_dir(args.out, job)
    if (out / METRICS).exists():
        return f"skip {out}"
    if not window.admits():
        return f"not started (deadline) {out}"
    out.mkdir(parents=True, exist_ok=True)
    checkout = args.checkout.resolve()
    commit, dirty = checkout_commit(args)
    exp, ds, setting, loss, seed = job
    cmd = [
        sys.executable, "-m", "fedbalance", "train", "--config", args.config, "--experiment", exp,
        "--dataset", ds, "--setting", setting, "--loss", loss, "--seed", str(seed),
        "--out", str(out.resolve()), "--device", args.device, "--threads", "1",
    ]
    paths = [str(checkout / "src"), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}
    start = time.time()
    with open(out / "train.log", "a") as log:
        proc = subprocess.Popen(cmd, cwd=checkout, env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            rc = proc.wait(timeout=window.left())
        except subprocess.TimeoutExpired:
            proc.terminate()
            proc.wait()
            return f"stopped at the deadline after {(time.time() - start) / 60:.1f} min (checkpoint kept) {out}"
    wall = time.time() - start
    if rc != 0:
        return f"FAILED rc={rc} {out}"
    window.walls.append(wall)
    metrics = read_metrics(out)
    prov = {
        "job": out.relative_to(args.out).as_posix(),
        "commit": commit,
        "checkout_dirty": dirty,
        "command": "python -m fedbalance train " + " ".join(cmd[4:]).replace(str(out.resolve()), "OUT"),
        "config": args.config,
        "runtime": runtime_of(metrics),
        "wall_s_this_process": round(wall, 1),
        "wall_s_job": metrics.get("wall_time_s"),
        "host": {"machine": platform.machine(), "cpus": os.cpu_count(), "python": platform.python_version()},
        "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    if args.device != "cpu":
        prov["concurrent_jobs"] = args.workers
    (out / "provenance.json").write_text(json.dumps(prov, indent=2) + "\n")
    return f"done {out} {wall / 60:.1f} min"


def cmd_run(args: argparse.Namespace) -> int:
    jobs = parse_jobs(args.jobs, args.dataset)
    unknown = unknown_jobs(args.checkout / args.config, jobs)
    if unknown:
        raise SystemExit(f"error: {args.checkout / args.config} defines no such job: {', '.join(unknown)} "
                         "(experiment/dataset/setting/loss); nothing was started")
    window = Window(args.deadline_s)
    print(f"{len(jobs)} jobs, {args.workers} workers", flush=True)
    with ThreadPoolExecutor(args.workers) as pool:
        for msg in pool.map(lambda j: run_one(args, j, window), jobs):
            print(time.strftime("%H:%M:%S"), msg, flush=True)
    return 0


def cmd_collect(args: argparse.Namespace) -> int:
    n = 0
    for prov in sorted(args.out.glob("**/provenance.json")):
        src = prov.parent
        dst = args.reference / src.relative_to(args.out)
        dst.mkdir(parents=True, exist_ok=True)
        for name in FILES:
            if not (dst / name).exists() or (dst / name).read_bytes() != (src / name).read_bytes():
                shutil.copyfile(src / name, dst / name)
        record = json.loads(prov.read_text())
        if not record.get("runtime"):  # written by an earlier version of this script
            record["runtime"] = runtime_of(read_metrics(src))
        record.setdefault("job", src.relative_to(args.out).as_posix())
        (dst / "provenance.json").write_text(json.dumps(record, indent=2) + "\n")
        n += 1
    print(f"{n} finished jobs in {args.reference}")
    return 0


def spliced(text: str, name: str, body: str, *, source: str) -> str:
    """``text`` with ``body`` between its marks ``<!-- name: source -->`` and ``<!-- /name -->``."""
    begin, end = f"<!-- {name}: {source} -->", f"<!-- /{name} -->"
    if text.count(begin) != 1 or text.count(end) != 1 or text.index(begin) > text.index(end):
        raise SystemExit(f"error: expected one '{begin}' followed by one '{end}'")
    head, rest = text.split(begin, 1)
    return f"{head}{begin}\n{body.rstrip()}\n{end}{rest.split(end, 1)[1]}"


def provenances(reference: Path) -> Iterator[tuple[tuple[str, ...], dict, str]]:
    """Each job of the set: its folder's parts below ``reference``, its provenance.json and its device (from the
    provenance, else from an older job's metrics.json)."""
    for prov_path in sorted(reference.glob("**/provenance.json")):
        prov = json.loads(prov_path.read_text())
        device = (prov.get("runtime") or {}).get("device") or read_metrics(prov_path.parent)["device"]
        yield prov_path.parent.relative_to(reference).parts, prov, device


def status_text(reference: Path) -> str:
    """Markdown: per (experiment, setting, loss) the seeds the set holds; then its commits, devices and minutes a job
    per device (one pass over the provenance files)."""
    held: dict[tuple[str, str, str, str], list[int]] = {}
    commits: dict[str, int] = {}
    minutes: dict[str, list[float]] = {}
    for (exp, ds, setting, loss, seed), prov, device in provenances(reference):
        held.setdefault((exp, ds, setting, loss), []).append(int(seed[4:]))
        commits[prov["commit"][:7]] = commits.get(prov["commit"][:7], 0) + 1
        minutes.setdefault(device, [])
        if prov.get("wall_s_job"):
            minutes[device].append(prov["wall_s_job"] / 60)
    lines = ["| experiment | dataset | setting | loss | seeds |", "|---|---|---|---|---|"]
    for (exp, ds, setting, loss), seeds in sorted(held.items(), key=lambda kv: (kv[0][0], kv[0][1], _gamma(kv[0][2]), kv[0][3])):
        lines.append(f"| {exp} | {ds} | {setting} | {loss} | {', '.join(map(str, sorted(seeds)))} |")
    devices = {d: len(m) for d, m in minutes.items()}
    per_device = "; ".join(
        f"{d} {min(m):.1f}–{max(m):.1f} (median {sorted(m)[len(m) // 2]:.1f})" for d, m in sorted(minutes.items()) if m
    )
    n = sum(len(v) for v in held.values())
    lines += ["", f"{n} jobs; commits {commits}; devices {devices}" + (f"; minutes per job: {per_device}" if per_device else "")]
    return "\n".join(lines) + "\n"


def cmd_status(args: argparse.Namespace) -> int:
    """Print the set's status (``status_text``); ``--readme`` writes it between the status marks of that README."""
    if args.readme is not None:
        text = spliced(args.readme.read_text(), "status", status_text(args.reference),
                       source="scripts/reference_jobs.py status --readme")
        args.readme.write_text(text)
        return 0
    print(status_text(args.reference), end="")
    return 0


DOCS_SOURCE = "scripts/reference_jobs.py docs"


def provenance_counts(reference: Path, experiment: str | None = None) -> tuple[dict[str, int], dict[str, int]]:
    """Jobs per commit (7 hex digits) and per device among the set's jobs (of ``experiment``, or all)."""
    commits: dict[str, int] = {}
    devices: dict[str, int] = {}
    for parts, prov, device in provenances(reference):
        if experiment is not None and parts[0] != experiment:
            continue
        commits[prov["commit"][:7]] = commits.get(prov["commit"][:7], 0) + 1
        devices[device] = devices.get(device, 0) + 1
    return commits, devices


def held_summary(reference: Path, experiment: str | None = None) -> str:
    """One line: how many jobs (of ``experiment``, or all) the set holds, from which commits and devices."""
    commits, devices = provenance_counts(reference, experiment)
    what = f"`{experiment}` jobs" if experiment else "jobs"
    return (f"{sum(commits.values())} {what} of {reference.as_posix()} "
            f"(commits {', '.join(f'{c}: {n}' for c, n in sorted(commits.items()))}; "
            f"devices {', '.join(f'{d}: {n}' for d, n in sorted(devices.items()))})")


def docs_texts(rendered: Path, reference: Path, docs: Path) -> dict[Path, str]:
    """docs/fidelity.md and docs/claims-mnist.md with the render of ``reference`` (in ``rendered``) spliced in, and every
    generated prose block (``fedbalance.presentation.prose``, computed from ``reference``'s job folders) in its page."""
    fidelity = (rendered / "tables" / "Fidelity.md").read_text()
    claims = (rendered / "claims.md").read_text().split("\n", 1)[1].lstrip("\n")
    blocks = [
        (docs / "fidelity.md", "fidelity", f"`tables/Fidelity.md` of the render of the {held_summary(reference, 'losses')}:"
                                           f"\n\n{fidelity}"),
        (docs / "claims-mnist.md", "claims", f"`claims.md` of the render of the {held_summary(reference)}:\n\n{claims}"),
        *((docs / page, name, body) for name, (page, body) in prose_blocks(reference).items()),
    ]
    texts: dict[Path, str] = {}
    for path, name, body in blocks:
        texts[path] = spliced(texts.get(path, path.read_text()), name, body, source=DOCS_SOURCE)
    return texts


def cmd_docs(args: argparse.Namespace) -> int:
    """Splice the render of the reference set (Fidelity.md, claims.md) into the docs; ``--check``: only compare."""
    for name in ("tables/Fidelity.md", "claims.md"):
        if not (args.rendered / name).is_file():
            raise SystemExit(f"error: {args.rendered / name} is missing: render the reference set first (reference/README.md)")
    stale = []
    for path, text in docs_texts(args.rendered, args.reference, args.docs).items():
        if path.read_text() != text:
            stale.append(path)
            if not args.check:
                path.write_text(text)
    verb = "differ from" if args.check else "updated from"
    print(f"{len(stale)} doc(s) {verb} the render: {', '.join(map(str, stale)) or '-'}")
    if args.check and stale:
        print("the reference set changed since they were written; render it and splice the render in "
              "(reference/README.md, 'Render and compare'): snakemake --cores all --configfile config/mnist.yaml "
              "--config reference_dir=reference/mnist results_dir=results_reference && "
              "python scripts/reference_jobs.py docs --rendered results_reference")
    return 1 if args.check and stale else 0


def _gamma(setting: str) -> float:
    try:
        return float(setting.lstrip("g"))
    except ValueError:
        return float("inf")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run")
    run.add_argument("--checkout", type=Path, required=True)
    run.add_argument("--out", type=Path, required=True)
    run.add_argument("--config", default="config/mnist.yaml")
    run.add_argument("--dataset", default="mnist")
    run.add_argument("--jobs", action="extend", nargs="+", required=True,
                     help="experiment:settings:losses:seeds (comma lists), one or more, e.g. losses:g10:ce,ratio:0,1 monitor:default:ce:0")
    run.add_argument("--workers", type=int, default=2)
    run.add_argument("--device", default="cpu")
    run.add_argument("--deadline-s", type=float, default=None, help="start no job that would not end within this many "
                     "seconds (the median finished job's time); stop running ones then, keeping their checkpoints")
    run.add_argument("--commit", default=None, help="the commit of --checkout when it is a copy without git")
    run.set_defaults(func=cmd_run)
    col = sub.add_parser("collect")
    col.add_argument("--out", type=Path, required=True)
    col.add_argument("--reference", type=Path, required=True)
    col.set_defaults(func=cmd_collect)
    st = sub.add_parser("status")
    st.add_argument("--reference", type=Path, required=True)
    st.add_argument("--readme", type=Path, default=None, help="write the table into this README's status block")
    st.set_defaults(func=cmd_status)
    dc = sub.add_parser("docs", help="splice the rendered Fidelity.md and claims.md into docs/ (between their marks)")
    dc.add_argument("--rendered", type=Path, default=Path("results_reference"), help="results_dir of the render")
    dc.add_argument("--reference", type=Path, default=Path("reference/mnist"))
    dc.add_argument("--docs", type=Path, default=Path("docs"))
    dc.add_argument("--check", action="store_true", help="change nothing; exit 1 when a doc differs from the render")
    dc.set_defaults(func=cmd_docs)
    args = p.parse_args()
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
