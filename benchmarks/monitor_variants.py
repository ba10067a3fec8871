"""Cheap variants of the update-based estimators, replayed on saved trajectories (docs/monitor.md).

For every round of each ``trajectory.pt`` (``save_trajectory: true``) the monitor's per-class
copies are retrained exactly as in the job (same seeds), and these read-outs of the same dW and dG
are scored by CS against the true composition:

* ``released``, ``nnls``, ``paper``: fedbalance.monitor.monitor's estimators;
* ``owner_median`` / ``owner_median_ceil``: the released per-weight equation, median instead of
  mean, without / with the released 1.5 N/Q ceiling;
* ``nnls_owned``: nnls on the weights the released filter keeps;
* ``nnls_rownorm``: nnls with every output row scaled to unit norm;
* ``row_ls``: per row p, least squares of K dG_p - N o_p = N_p (u_p - o_p) (the paper's equation
  over all units of the row at once);
* with ``--oracle``, ``simulated_oracle``: the ``simulated`` estimator's linear model with its
  client simulated at the TRUE composition -- a diagnostic upper bound (it uses the truth), not an
  estimator.

Prints one JSON document: per trajectory and variant the CS per round, its minimum and mean.
"""

from __future__ import annotations

import argparse
import json

import numpy as np
import torch
from scipy.optimize import nnls

from fedbalance.monitor import monitor as M
from fedbalance.data.datasets import load_dataset
from fedbalance.engine.fl import TAG_MONITOR, build_monitor, sgd_config, torch_generator
from fedbalance.jobs.run import auxiliary_data, build_partitions
from fedbalance.common.jobspec import as_spec
from fedbalance.methods.models import build_model
from fedbalance.jobs.replay import load_trajectory


def cs(a, b) -> float:
    a, b = np.asarray(a, float), np.asarray(b, float)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def variants(dW: torch.Tensor, dG: torch.Tensor, totals: list[int]) -> dict[str, list[float]]:
    """Estimated counts of every variant from one round's dW [Q, Q, s] and dG [Q, s]."""
    q, n, k = dW.shape[0], float(sum(totals)), float(len(totals))
    out = {m: M.estimate_composition(dW, dG, n_aux=int(32), client_totals=totals, method=m).counts.tolist()
           for m in ("released", "nnls", "paper")}
    u, g = M._per_sample(dW, 32), dG.double()
    numbers = M._numbers_all(u, g, k, n)
    owner, keep = M._released_keep(u)
    valid = M._owner_mask(owner, keep, q) & torch.isfinite(numbers) & (numbers > 0)
    for name, ok in (("owner_median", valid), ("owner_median_ceil", valid & (numbers < 1.5 * n / q))):
        out[name] = [float(numbers[p][ok[p]].median()) if ok[p].any() else n / q for p in range(q)]
    a, b = u.reshape(q, -1).T.numpy(), (k * g).reshape(-1).numpy()
    kept = keep.reshape(-1).numpy()
    out["nnls_owned"] = nnls(a[kept], b[kept])[0].tolist()
    rows = [(u[:, p, :].T.numpy(), (k * g[p]).numpy()) for p in range(q)]
    scale = [np.linalg.norm(bp) + 1e-12 for _, bp in rows]
    out["nnls_rownorm"] = nnls(np.vstack([ap / s for (ap, _), s in zip(rows, scale)]),
                               np.concatenate([bp / s for (_, bp), s in zip(rows, scale)]))[0].tolist()
    row_ls = []
    for p in range(q):
        o = ((u[:, p].sum(0) - u[p, p]) / (q - 1)).numpy()
        d, y = u[p, p].numpy() - o, (k * g[p]).numpy() - n * o
        row_ls.append(max(float(d @ y / (d @ d)), 0.0))
    out["row_ls"] = row_ls
    return out


def oracle(model, state_t1, ax, ay, mon, totals: list[int], truth: list[float]) -> list[float]:
    """The simulated estimator's nnls with its client drawn at the true composition (diagnostic)."""
    w_t, w_t1 = M.last_layer_with_bias(model.state_dict()), M.last_layer_with_bias(state_t1)
    steps = max(1, round(sum(M.client_steps(totals, mon.cfg)) / len(totals)))
    props = torch.as_tensor(truth, dtype=torch.float64)
    a = M.simulated_updates(model, ax, ay, len(truth), mon.cfg, steps, props / props.sum(), torch.Generator().manual_seed(0))
    return M.simulated_estimate(a, w_t1 - w_t, w_mid=(w_t + w_t1) / 2, client_totals=totals, cfg=mon.cfg).counts.tolist()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trajectory", nargs="+")
    ap.add_argument("--data-dir", default="data")
    ap.add_argument("--oracle", action="store_true", help="also the simulated model at the true composition")
    args = ap.parse_args()
    torch.set_num_threads(1)
    report = {}
    for path in args.trajectory:
        traj = load_trajectory(path)
        spec = as_spec(traj["spec"])
        ds = load_dataset(spec.source, args.data_dir, **dict(spec.options))
        ax, ay = auxiliary_data(spec, ds, build_partitions(spec, ds))
        model = build_model(spec.model, ds.in_channels, ds.num_classes, ds.image_size)
        mon = build_monitor(spec, ax, ay, ds.num_classes, sgd_config(spec))
        nxt = [r["model"] for r in traj["rounds"][1:]] + [traj["final"]]
        per: dict[str, list[float]] = {}
        for r, s1, truth in zip(traj["rounds"], nxt, traj["true_composition"], strict=True):
            model.load_state_dict(r["model"])
            dW = mon.updates(model, torch_generator(spec.seed, TAG_MONITOR, int(r["round"])))
            dG = s1[f"{M.LAST_LAYER}.weight"] - r["model"][f"{M.LAST_LAYER}.weight"]
            for name, counts in variants(dW, dG, r["totals"]).items():
                per.setdefault(name, []).append(cs(counts, truth))
            per.setdefault("uniform", []).append(cs(np.ones(len(truth)), truth))
            if args.oracle:
                per.setdefault("simulated_oracle", []).append(cs(oracle(model, s1, ax, ay, mon, r["totals"], truth), truth))
        name = spec.name
        report[name] = {v: {"min": round(min(c), 4), "mean": round(float(np.mean(c)), 4),
                            "per_round": [round(x, 4) for x in c]} for v, c in per.items()}
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
