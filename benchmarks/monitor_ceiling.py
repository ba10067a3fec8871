"""How far a simulation-based estimator can go: the bias solve (4') with residuals from real or simulated clients.

For every round of ``--rounds`` of each saved job (``--trajectory``: G_t, G_{t+1}, totals and true composition; the
job's rounds.csv beside it gives the round's Ratio-Loss weights π and prior), the solve ``monitor.recovered_counts``
with the residual matrix r of ``fedbalance.monitor.drift`` measured along:

* ``clients``: the round's real clients, each its own local run replayed exactly (its batches, its loss with the
  round's π): the solve's own error (weight decay's approximation only);
* ``clients_ce``: the same clients retrained with plain CE (jobs whose loss is not CE): the error of ignoring the loss;
* ``per_client_true``: one simulated client per real client at that client's TRUE counts, aux data, the round's loss;
* ``one_client_true``: one simulated client of the mean client size at the round's TRUE total composition;
* ``one_client_weighted_true``: the same client run by importance weights (``drift.weighted_run_residuals``, the
  simulation ``drift`` uses);
* ``layout_true_k<k>``: ``drift``'s simulated clients (``drift.simulated_clients``, K clients of k classes each) at
  the round's TRUE total composition: the ceiling of the ``drift`` estimator's simulation;
* ``drift``: the ``drift`` estimator itself, no truth read, started from the job's recorded ``released`` estimate
  (as its registry entry starts);

and, read from rounds.csv, ``released``, ``pooled`` and the uniform guess. Per round and variant: TV, the minority
classes' estimated / true share, the worst class factor, whether the goal (TV <= 0.05, every class within x1.5) is
met, and seconds. Uses the truth for every ``*_true`` variant: ceilings, not estimators. One JSON per trajectory
(``--out DIR``); ``--markdown FILE...`` tabulates saved JSONs.

    python benchmarks/monitor_ceiling.py --trajectory RESULTS/losses/mnist/g10/ce/seed0/trajectory.pt --rounds 1 10 \\
        --data-dir DATA --out CEILING
    python benchmarks/monitor_ceiling.py --markdown CEILING/*.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

import torch

from fedbalance.atomic import write_json
from fedbalance.monitor.drift import (
    ITERATIONS, clients_residuals, estimate_drift, residual_matrix, simulated_clients, simulated_residuals,
    weighted_run_residuals,
)
from fedbalance.engine.fl import TAG_CLIENT, TAG_MONITOR, select_clients, torch_generator
from fedbalance.jobs.jobfolder import round_records
from fedbalance.methods.losses import feed, get_loss
from fedbalance.monitor.monitor import bias_target, recovered_counts
from fedbalance.common.records import est_column, share_ratios, total_variation, worst_share_factor
from fedbalance.jobs.replay import load_trajectory, replay_setup

GOAL_TV, GOAL_FACTOR = 0.05, 1.5
LAYOUT_K = (3, 5)


def round_loss(spec: Any, rows: list[dict[str, Any]], t: int, q: int) -> torch.nn.Module:
    """The loss the round's clients trained with: the job's, fed round t-1's weights π and lead estimate (round 0:
    ones, as ``fl.hand_over``)."""
    loss = get_loss(spec.base_loss, q, **spec.loss_kwargs())
    ones = torch.ones(q, dtype=torch.float64)
    if t == 0:
        feed(loss, weights=ones, prior=ones)
        return loss
    prev = rows[t - 1]
    pi = prev.get("weights")
    lead = prev.get(est_column(spec.monitor.estimators[0]))
    feed(loss, weights=ones if pi is None else torch.tensor(pi, dtype=torch.float64),
         prior=ones if lead is None else torch.tensor(lead, dtype=torch.float64))
    return loss


def measures(est: list[float], truth: list[float], minority: list[int], seconds: float) -> dict[str, Any]:
    ratios = share_ratios(est, truth)
    tv, worst = total_variation(est, truth), worst_share_factor(est, truth)
    return {"estimate": est, "tv": tv, "minority_share": [ratios[c] for c in minority], "worst_factor": worst,
            "at_goal": tv <= GOAL_TV and worst <= GOAL_FACTOR, "seconds": seconds}


def round_ceiling(setup: tuple, traj: dict[str, Any], rows: list[dict[str, Any]], t: int, iterations: int) -> dict[str, Any]:
    """Every variant of the module docstring for round ``t``."""
    spec, ds, parts, model, monitor = setup
    q, cfg = ds.num_classes, monitor.cfg
    rounds = traj["rounds"]
    model.load_state_dict(rounds[t]["model"])
    state_t1 = rounds[t + 1]["model"] if t + 1 < len(rounds) else traj["final"]
    totals = [int(n) for n in rounds[t]["totals"]]
    truth = [float(v) for v in traj["true_composition"][t]]
    total, minority = float(sum(totals)), list(spec.minority_classes)
    target = bias_target(model, state_t1, totals, cfg, monitor.aggregation)
    loss = round_loss(spec, rows, t, q)
    chosen = select_clients(spec.required("selection"), parts["main"].num_clients, spec.required("clients_per_round"), spec.seed, t)
    data = [(ds.x_train[torch.tensor(parts["main"].clients[j], dtype=torch.long)],
             ds.y_train[torch.tensor(parts["main"].clients[j], dtype=torch.long)]) for j in chosen]
    out: dict[str, Any] = {"round": t, "truth": truth}

    def solve(name: str, runs: Any, start: float) -> None:
        est = recovered_counts(residual_matrix(runs, cfg), target, total).tolist()
        out[name] = measures(est, truth, minority, time.perf_counter() - start)

    gens = lambda: [torch_generator(spec.seed, TAG_CLIENT, t, int(j)) for j in chosen]  # noqa: E731
    s = time.perf_counter()
    solve("clients", clients_residuals(model, data, loss, cfg, gens(), q), s)
    if spec.base_loss != "ce":
        s = time.perf_counter()
        solve("clients_ce", clients_residuals(model, data, torch.nn.CrossEntropyLoss(), cfg, gens(), q), s)
    sim_gen = torch.Generator().manual_seed(spec.seed * 100_003 + t)
    s = time.perf_counter()
    own = [torch.bincount(y, minlength=q)[:q].tolist() for _, y in data]
    solve("per_client_true", simulated_residuals(model, monitor.aux_x, monitor.aux_y, loss, cfg, own, sim_gen), s)
    s = time.perf_counter()
    mean_size = total / len(totals)
    one = simulated_clients([v / sum(truth) * mean_size for v in truth], 1, q)
    solve("one_client_true", simulated_residuals(model, monitor.aux_x, monitor.aux_y, loss, cfg, one, sim_gen), s)
    s = time.perf_counter()
    p_true = torch.tensor(truth, dtype=torch.float64) / sum(truth)
    solve("one_client_weighted_true", weighted_run_residuals(model, monitor.aux_x, monitor.aux_y, loss, cfg, p_true, mean_size,
                                                             torch.Generator().manual_seed(spec.seed * 100_003 + t)), s)
    for k in LAYOUT_K:
        s = time.perf_counter()
        layout = simulated_clients([v / sum(truth) * total for v in truth], len(totals), k)
        solve(f"layout_true_k{k}", simulated_residuals(model, monitor.aux_x, monitor.aux_y, loss, cfg, layout, sim_gen), s)
    if iterations > 0:
        s = time.perf_counter()
        start = rows[t].get(est_column("released"))
        est = estimate_drift(model, state_t1, monitor.aux_x, monitor.aux_y, q, cfg, totals,
                             torch_generator(spec.seed, TAG_MONITOR, t), loss_fn=loss, initial=start, iterations=iterations)
        out["drift"] = measures(est.counts.tolist(), truth, minority, time.perf_counter() - s)
    for name in ("released", "pooled"):
        rec = rows[t].get(est_column(name))
        if rec is not None:
            out[name] = measures([float(v) for v in rec], truth, minority, 0.0)
    out["uniform"] = measures([total / q] * q, truth, minority, 0.0)
    return out


def tabulate(files: list[Path]) -> str:
    """One markdown row per (job group, variant): TV mean (max), minority share ratio median, worst factor median
    (max), rounds at goal, seconds a round; rounds pooled over the files of the group."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for f in files:
        doc = json.loads(Path(f).read_text())
        groups.setdefault(doc["group"], []).extend(doc["rounds"])
    lines = ["| group | residuals from | TV mean (max) | minority share ÷ true (median) | worst class factor median (max) "
             "| rounds at goal | seconds a round |", "|---|---|---|---|---|---|---|"]
    for group, rows in sorted(groups.items()):
        names = [k for k in rows[0] if isinstance(rows[0][k], dict)]
        for name in names:
            got = [r[name] for r in rows if name in r]
            tv = [g["tv"] for g in got]
            worst = [g["worst_factor"] for g in got]
            mino = [m for g in got for m in g["minority_share"]]
            lines.append(f"| {group} | {name} | {statistics.fmean(tv):.3f} ({max(tv):.3f}) | ×{statistics.median(mino):.2f} "
                         f"| {statistics.median(worst):.2f} ({max(worst):.2f}) | {sum(g['at_goal'] for g in got)} of {len(got)} "
                         f"| {statistics.fmean(g['seconds'] for g in got):.0f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trajectory", nargs="*", default=[])
    ap.add_argument("--rounds", type=int, nargs="+", default=[1, 10])
    ap.add_argument("--data-dir", default="data")
    ap.add_argument("--iterations", type=int, default=ITERATIONS, help="the drift estimator's iterations (0: skip it)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", type=Path, default=None, help="write one JSON per trajectory here")
    ap.add_argument("--markdown", nargs="*", type=Path, default=None, help="tabulate these saved JSONs instead")
    args = ap.parse_args(argv)
    if args.markdown is not None:
        print(tabulate(args.markdown))
        return
    torch.set_num_threads(args.threads)
    for path in args.trajectory:
        traj = load_trajectory(path)
        setup = replay_setup(traj, data_dir=args.data_dir)
        spec = setup[0]
        rows = round_records(Path(path).parent)
        bad = [t for t in args.rounds if not 0 <= t < len(traj["rounds"])]
        if bad:
            raise SystemExit(f"{path}: rounds {bad} not in the trajectory (0..{len(traj['rounds']) - 1})")
        folder = Path(path).parent  # <experiment>/<dataset>/<setting>/<loss>/seed<k>
        setting, loss = folder.parent.parent.name, folder.parent.name
        doc = {"trajectory": str(path), "group": f"{setting}/{loss}", "seed": spec.seed,
               "rounds": [round_ceiling(setup, traj, rows, t, args.iterations) for t in args.rounds]}
        if args.out is not None:
            args.out.mkdir(parents=True, exist_ok=True)
            write_json(doc, args.out / f"{setting}_{loss}_seed{spec.seed}.json")
        print(json.dumps({k: v for k, v in doc.items() if k != "rounds"} | {"tv": {
            r["round"]: {n: round(v["tv"], 4) for n, v in r.items() if isinstance(v, dict)} for r in doc["rounds"]}}))


if __name__ == "__main__":
    main()
