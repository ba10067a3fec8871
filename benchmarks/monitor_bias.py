"""Where the monitor's bias on the minority classes comes from, measured on one saved job (``save_trajectory``).

For every round of ``--trajectory`` (its G_t, G_{t+1}, selected clients and true composition V), one JSON row:

* ``released``: the released reading's per-weight numbers N_hat (``monitor.estimate_composition``'s
  ``released`` branch): per class the share of its owned weights kept, dropped as <= 0, dropped at the
  1.5 N/Q ceiling, and whether it fell back to N/Q; its estimate beside the mean and median of the same
  owned numbers without the cuts (``uncut_mean``, ``uncut_median``);
* ``copy_saturation``: per class q, |dW[q]'s row q| / |the first-order update -lr (sum_s w_s) g_q(G_t)|
  of the auxiliary copy (1 = no saturation over its E epochs; < 1 = the copy fit its 32 samples);
* ``drift``: per class c, the diagonal residual 1 - p_bar_cc averaged (momentum-weighted) along the simulated
  client's run from uniform proportions (``simulated``), at the true proportions (``simulated_true_p``) and
  along the real selected clients' own local runs from G_t retrained with plain CE (``clients``: what the bias
  update really averages over E epochs), each divided by its value at G_t (``static``): 1 = no drift, < 1 =
  the local runs fit class c and its residual shrank;
* ``tv``: TV(p_hat, p) of ``recovered_counts`` (the ``rlu`` solve on the output bias) with each of these
  residual matrices, and with the simulated client at the TRUE proportions (``simulated_true_p``, a
  diagnostic that uses the truth); ``clients`` recovers V up to weight decay and the clients' own loss
  (on a CE job its TV is the solve's own error; on a Ratio-Loss job the excess is the loss's).

Also the minority classes' estimated / true share of each (``minority_share``). Seconds to minutes per round
on a CPU (it retrains the round's clients); ``--rounds`` picks rounds.
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
from pathlib import Path
from typing import Any

import torch
from torch import nn

from fedbalance.engine.fl import select_clients
from fedbalance.methods.models import to_float
from fedbalance.monitor.monitor import (
    RELEASED_UPPER, _numbers_all, _owner_mask, _per_sample, _released_keep, class_gradients, client_steps,
    bias_target, estimate_composition, momentum_weights, recovered_counts, simulated_updates,
)
from fedbalance.common.records import share_ratios, total_variation
from fedbalance.jobs.replay import load_trajectory, replay_setup
from fedbalance.training.sgd import SGDConfig, make_optimizer


def released_cuts(dW: torch.Tensor, dG: torch.Tensor, n_aux: torch.Tensor, totals: list[int]) -> dict[str, Any]:
    """Per class: shares of the owned weights kept / cut at <= 0 / cut at the ceiling, fallback, and uncut readings."""
    q, total = dW.shape[0], float(sum(totals))
    u = _per_sample(dW, n_aux)
    numbers = _numbers_all(u, dG.double(), float(len(totals)), total)
    owner, keep = _released_keep(u)
    mask = _owner_mask(owner, keep, q) & torch.isfinite(numbers)
    out: dict[str, list[float]] = {k: [] for k in ("kept", "negative", "ceiling", "uncut_mean", "uncut_median")}
    for c in range(q):
        vals = numbers[c][mask[c]]
        n = max(1, vals.numel())
        out["kept"].append(float(((vals > 0) & (vals < RELEASED_UPPER * total / q)).sum()) / n)
        out["negative"].append(float((vals <= 0).sum()) / n)
        out["ceiling"].append(float((vals >= RELEASED_UPPER * total / q).sum()) / n)
        out["uncut_mean"].append(float(vals.mean()) if vals.numel() else float("nan"))
        out["uncut_median"].append(float(vals.median()) if vals.numel() else float("nan"))
    est = estimate_composition(dW, dG, n_aux=n_aux, client_totals=totals, method="released")
    return {**out, "fallback": est.fallback, "estimate": est.counts.tolist()}


def copy_saturation(model: nn.Module, dW: torch.Tensor, aux_x: torch.Tensor, aux_y: torch.Tensor, cfg: SGDConfig) -> list[float]:
    """|dW[q, q]| / |lr (sum_s w_s) g_q(G_t)[q]| per class: the aux copy's own-row update against its first-order value."""
    q = dW.shape[0]
    g = class_gradients(model, aux_x, aux_y, q)[:, :, :-1]
    n_a = torch.bincount(aux_y, minlength=q)[:q].tolist()
    out = []
    for c in range(q):
        w = float(momentum_weights(client_steps([n_a[c]], cfg)[0], cfg.momentum).sum())
        out.append(float(dW[c, c].double().norm() / (cfg.lr * w * g[c, c].norm()).clamp_min(1e-30)))
    return out


def client_residuals(model: nn.Module, datasets: list[tuple[torch.Tensor, torch.Tensor]], cfg: SGDConfig,
                     q: int, seed: int) -> torch.Tensor:
    """r_c [Q, Q]: the real clients' bias residual of class c over their local runs from G_t (plain CE), scaled as
    ``update_target``: sum_c N_c r_c = -(B K / (lr E)) mean_j db_j without weight decay."""
    acc = torch.zeros(q, q, dtype=torch.float64)
    counts = torch.zeros(q, dtype=torch.float64)
    gen = torch.Generator().manual_seed(seed)
    for x, y in datasets:
        sim = copy.deepcopy(model)
        sim.train()
        opt = make_optimizer(sim, cfg)
        steps = client_steps([len(y)], cfg)[0]
        w = momentum_weights(steps, cfg.momentum)
        counts += torch.bincount(y, minlength=q)[:q].double()
        s = 0
        for _ in range(cfg.epochs):
            for idx in torch.randperm(len(y), generator=gen).split(cfg.batch_size):
                z = sim(to_float(x[idx]))
                with torch.no_grad():
                    r = torch.softmax(z.double(), -1) - nn.functional.one_hot(y[idx], q).double()
                    acc.index_add_(0, y[idx], w[s] * r / len(idx))
                loss = nn.functional.cross_entropy(z, y[idx])
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                s += 1
    return acc * cfg.batch_size / cfg.epochs / counts.clamp_min(1).unsqueeze(1)


def round_row(setup: tuple, traj: dict[str, Any], t: int, minority: list[int]) -> dict[str, Any]:
    """The diagnosis of round ``t`` (module docstring)."""
    spec, ds, parts, model, monitor = setup
    rounds = traj["rounds"]
    state_t1 = rounds[t + 1]["model"] if t + 1 < len(rounds) else traj["final"]
    model.load_state_dict(rounds[t]["model"])
    totals, truth = rounds[t]["totals"], [float(v) for v in traj["true_composition"][t]]
    q, cfg, total = ds.num_classes, monitor.cfg, float(sum(rounds[t]["totals"]))
    gen = torch.Generator().manual_seed(1000 + t)
    dW = monitor.updates(model, gen)
    dG = state_t1[monitor.weight_key].double() - model.state_dict()[monitor.weight_key].double()
    target = bias_target(model, state_t1, totals, cfg, monitor.aggregation)
    steps = max(1, round(sum(client_steps(totals, cfg)) / len(totals)))
    chosen = select_clients(spec.required("selection"), parts["main"].num_clients, spec.required("clients_per_round"),
                            spec.seed, t)
    indices = [torch.tensor(parts["main"].clients[j], dtype=torch.long) for j in chosen]
    data = [(ds.x_train[i], ds.y_train[i]) for i in indices]
    p_true = torch.tensor(truth, dtype=torch.float64) / sum(truth)
    residuals = {
        "static": float(momentum_weights(steps, cfg.momentum).mean()) * class_gradients(model, monitor.aux_x, monitor.aux_y, q)[:, :, -1],
        "simulated": simulated_updates(model, monitor.aux_x, monitor.aux_y, q, cfg, steps, torch.full((q,), 1.0 / q), gen)[:, :, -1],
        "simulated_true_p": simulated_updates(model, monitor.aux_x, monitor.aux_y, q, cfg, steps, p_true, gen)[:, :, -1],
        "clients": client_residuals(model, data, cfg, q, spec.seed * 1000 + t),
    }
    est = {k: recovered_counts(r, target, total).tolist() for k, r in residuals.items()}
    cut = released_cuts(dW, dG, monitor.n_aux, totals)
    est["released"] = cut["estimate"]
    return {
        "round": t, "truth": truth,
        "tv": {k: total_variation(v, truth) for k, v in est.items()},
        "minority_share": {k: [share_ratios(v, truth)[c] for c in minority] for k, v in est.items()},
        "released": {k: v for k, v in cut.items() if k != "estimate"},
        "copy_saturation": copy_saturation(model, dW, monitor.aux_x, monitor.aux_y, cfg),
        "drift": {k: [float(r[c, c] / residuals["static"][c, c]) for c in range(q)] for k, r in residuals.items() if k != "static"},
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trajectory", required=True)
    ap.add_argument("--data-dir", default="data")
    ap.add_argument("--rounds", type=int, nargs="*", default=None, help="rounds to diagnose (default: all)")
    args = ap.parse_args(argv)
    traj = load_trajectory(args.trajectory)
    setup = replay_setup(traj, data_dir=args.data_dir)
    minority = list(setup[0].minority_classes)
    rounds = args.rounds if args.rounds is not None else list(range(len(traj["rounds"])))
    rows = [round_row(setup, traj, t, minority) for t in rounds]
    later = [r for r in rows if r["round"] >= 1] or rows
    summary = {k: {"tv_mean": statistics.fmean(r["tv"][k] for r in later),
                   "minority_share_median": statistics.median(x for r in later for x in r["minority_share"][k])}
               for k in rows[0]["tv"]}
    print(json.dumps({"trajectory": str(Path(args.trajectory)), "minority": minority, "summary": summary, "rounds": rows},
                     indent=1, default=float))


if __name__ == "__main__":
    main()
