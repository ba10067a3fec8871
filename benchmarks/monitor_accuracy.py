"""How well do the monitor's estimators recover a round's class composition? (real MNIST, LeNet5, CPU).

Per round: the cosine similarity CS(v_pt, V) of each estimator ("paper", "paper_signed",
"released", "nnls") and of the uniform guess N/Q to the true composition V of the round's
selected clients, in two settings:

* ``protocol``: the paper's monitor experiment (100 clients, each a random 1..Q classes x
  ``--per-class`` samples, 20 selected at random each round);
* ``gamma10`` / ``gamma100``: imbalanced rounds (minority classes 2, 4, 7 at Gamma:1; the same 20
  clients each round, each with 3..6 classes, ``--majority`` samples per majority class and
  majority/Gamma per minority class).

Also the Ratio-Loss class ratios (Theorem 2: minority > majority) in the imbalanced settings.
Prints one JSON document (summary + per-round lists).
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import torch

from fedbalance.data.datasets import load_dataset
from fedbalance.methods.models import build_model
from fedbalance.monitor.monitor import UPDATE_METHODS as METHODS, aux_updates, class_ratios, cosine_similarity, estimate_composition, uniform_guess
from fedbalance.training.train import SGDConfig, average_stacked, train_copies

MINORITY = (2, 4, 7)


def load_mnist(data_dir: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(train_x, train_y, test_x, test_y): uint8 [N, 1, 28, 28] and int64 labels."""
    ds = load_dataset("mnist", data_dir)
    return ds.x_train, ds.y_train, ds.x_test, ds.y_test


def class_pools(y: torch.Tensor, q: int, rng: np.random.Generator) -> list[list[int]]:
    """Shuffled index list per class (drawn from without replacement)."""
    return [list(rng.permutation(np.flatnonzero(y.numpy() == c))) for c in range(q)]


def take(pools: list[list[int]], c: int, n: int) -> list[int]:
    out, pools[c] = pools[c][:n], pools[c][n:]
    if len(out) < n:
        raise ValueError(f"class {c} ran out of samples")
    return out


def protocol_clients(y: torch.Tensor, q: int, n_clients: int, per_class: int, rng: np.random.Generator) -> list[np.ndarray]:
    """Paper monitor protocol: each client a random 1..Q classes with ``per_class`` samples each.

    Same design as ``fedbalance.data.partition.monitor_partition`` (written alongside), drawn inline.
    """
    pools = class_pools(y, q, rng)
    clients = []
    for _ in range(n_clients):
        classes = rng.choice(q, size=int(rng.integers(1, q + 1)), replace=False)
        clients.append(np.array([i for c in classes for i in take(pools, int(c), per_class)]))
    return clients


def imbalanced_clients(
    y: torch.Tensor, q: int, n_clients: int, majority: int, gamma: float, rng: np.random.Generator
) -> list[np.ndarray]:
    """Gamma:1 rounds: each client 3..6 random classes, ``majority`` per majority class, majority/Gamma per minority."""
    pools = class_pools(y, q, rng)
    minority = max(1, round(majority / gamma))
    clients = []
    for _ in range(n_clients):
        classes = rng.choice(q, size=int(rng.integers(3, 7)), replace=False)
        clients.append(
            np.array([i for c in classes for i in take(pools, int(c), minority if int(c) in MINORITY else majority)])
        )
    return clients


def run_setting(
    name: str,
    clients: list[np.ndarray],
    select: int,
    fixed: bool,
    x: torch.Tensor,
    y: torch.Tensor,
    aux: tuple[torch.Tensor, torch.Tensor],
    cfg: SGDConfig,
    rounds: int,
    seed: int,
) -> dict[str, object]:
    """A minimal FedAvg loop with the monitor run post hoc each round."""
    q = 10
    torch.manual_seed(seed)
    model = build_model("lenet5", 1, q, (28, 28))
    rng = np.random.default_rng(seed + 1)
    gen = torch.Generator().manual_seed(seed + 2)
    per_round: dict[str, list[float]] = {m: [] for m in (*METHODS, "uniform")}
    ratios_min, ratios_maj = [], []
    chosen = rng.choice(len(clients), size=select, replace=False)
    n_aux = torch.bincount(aux[1], minlength=q)
    for _ in range(rounds):
        if not fixed:
            chosen = rng.choice(len(clients), size=select, replace=False)
        data = [(x[torch.from_numpy(clients[j])], y[torch.from_numpy(clients[j])]) for j in chosen]
        totals = [len(d[1]) for d in data]
        truth = torch.bincount(torch.cat([d[1] for d in data]), minlength=q).double()
        dW = aux_updates(model, aux[0], aux[1], q, cfg, gen)
        w_t = model.classifier.weight.detach().clone()
        gens = [torch.Generator().manual_seed(int(s)) for s in torch.randint(0, 2**62, (len(data),), generator=gen)]
        stacked, _ = train_copies(model, data, torch.nn.CrossEntropyLoss(), cfg, gens)
        model.load_state_dict(average_stacked(stacked))
        dG = model.classifier.weight.detach() - w_t
        for m in METHODS:
            est = estimate_composition(dW, dG, n_aux=n_aux, client_totals=totals, method=m)
            per_round[m].append(cosine_similarity(est.counts, truth))
        per_round["uniform"].append(cosine_similarity(uniform_guess(totals, q), truth))
        ra = class_ratios(dW)
        is_min = torch.zeros(q, dtype=torch.bool)
        is_min[list(MINORITY)] = True
        ratios_min.append(float(ra[is_min].mean()))
        ratios_maj.append(float(ra[~is_min].mean()))
    out: dict[str, object] = {
        "mean_cs": {m: float(np.mean(v)) for m, v in per_round.items()},
        "min_cs": {m: float(np.min(v)) for m, v in per_round.items()},
        "per_round": {m: [round(c, 4) for c in v] for m, v in per_round.items()},
    }
    if name != "protocol":
        out["ratio_minority_mean"] = [round(r, 3) for r in ratios_min]
        out["ratio_majority_mean"] = [round(r, 3) for r in ratios_maj]
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data-dir", required=True)
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--per-class", type=int, default=50, help="protocol: samples per class of a client")
    p.add_argument("--majority", type=int, default=250, help="imbalanced: samples per majority class of a client")
    p.add_argument("--gammas", type=float, nargs="*", default=[10.0, 100.0])
    p.add_argument("--aux", type=int, default=32, help="auxiliary samples per class (from the test split)")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads (1: fastest on a shared machine)")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    start = time.time()
    x, y, tx, ty = load_mnist(a.data_dir)
    rng = np.random.default_rng(a.seed)
    aux_idx = np.concatenate([rng.choice(np.flatnonzero(ty.numpy() == c), a.aux, replace=False) for c in range(10)])
    aux = (tx[torch.from_numpy(aux_idx)], ty[torch.from_numpy(aux_idx)])
    cfg = SGDConfig(lr=a.lr, epochs=a.epochs)
    results: dict[str, object] = {}
    clients = protocol_clients(y, 10, 100, a.per_class, rng)
    results["protocol"] = run_setting("protocol", clients, 20, False, x, y, aux, cfg, a.rounds, a.seed)
    for g in a.gammas:
        clients = imbalanced_clients(y, 10, 20, a.majority, g, rng)
        results[f"gamma{g:g}"] = run_setting(f"gamma{g:g}", clients, 20, True, x, y, aux, cfg, a.rounds, a.seed)
    summary = {
        k: {"mean_cs": v["mean_cs"], "min_cs": v["min_cs"]} for k, v in results.items()  # type: ignore[index]
    }
    print(
        json.dumps(
            {
                "config": {**vars(a), "model": "lenet5", "momentum": cfg.momentum, "weight_decay": cfg.weight_decay, "batch": cfg.batch_size},
                "summary": summary,
                "settings": results,
                "seconds": round(time.time() - start, 1),
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
