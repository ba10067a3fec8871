"""The paper's monitoring scheme and the Ratio-Loss weights (section "Monitoring Scheme", "Ratio Loss").

Everything here works on the last linear layer W (Q x s) only, and only on what the server may
see: the global models G_t and G_{t+1}, its own auxiliary data and the selected clients' total
sample counts. Notation (shapes):

* ``dW`` [Q, Q, s]: ``dW[q]`` = W(copy of G_t trained on the auxiliary samples of class q) - W(G_t);
  ``dW[q, p, i]`` is the paper's Delta W^{(q)}_{(p, i)}.
* ``dG`` [Q, s]: W(G_{t+1}) - W(G_t).
* ``o[p, i]``: mean over j != p of ``dW[j, p, i]`` (the "other classes'" update of node p).

Three estimators of the round's class counts solve n_a * scale * dG ~ sum_q N_q dW[q]:
``paper`` (per-unit ratio filter + Eq. number calculation), ``released`` (the authors' code),
``nnls`` (ours: non-negative least squares over all last-layer weights). See docs/deviations.md.
A fourth, ``simulated`` (ours, docs/monitor.md), replaces the per-class copies by the per-class
gradients along a simulated client's whole local trajectory, so it holds when the clients' many
local steps saturate their updates. A fifth, ``rlu`` (``estimate_label_recovery``), solves the output
bias's change alone with the sum of the counts fixed, as the label-recovery literature does (RLU,
Chen & Vikalo, ICML 2024), on the same simulated trajectory.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor, nn

from fedbalance.methods.models import LAST_LAYER, to_float
from fedbalance.common.records import RLU, imbalance_ratio
from fedbalance.training.sgd import SGDConfig, make_optimizer
from fedbalance.training.train import train_copies

PAPER_SIGNED = "paper_signed"  # the paper's Eq. ratio taken literally (signed); a diagnostic, not recorded
UPDATE_METHODS = ("paper", "released", "nnls", PAPER_SIGNED)
"""The estimators ``estimate_composition`` computes from dW and dG (``fedbalance.monitor.estimators`` registers each)."""
RELEASED_NEIGHBOUR = 0.8
RELEASED_UPPER = 1.5
RELEASED_NAN_RATIO = 10.0
RATIO_CLIP = 5000.0
KEPT_UNIT_READINGS = ("paper", "median", "sums")
"""Ra_p from the units above T_Ra: their mean (the paper), median, or ratio of sums (docs/ratio-stability.md)."""
VARIANTS = (*KEPT_UNIT_READINGS, "released")
READING_VARIANTS = ("redgrape", "climb", "fedloge", "flower")
"""The Ratio Loss as other code reads it: variants whose weights read the whole round, not dW alone
(``fedbalance.monitor.readings``, one registry entry each; docs/deviations.md)."""


def _weight_key() -> str:
    return f"{LAST_LAYER}.weight"


def aux_updates(
    model: nn.Module,
    aux_x: Tensor,
    aux_y: Tensor,
    num_classes: int,
    cfg: SGDConfig,
    generator: torch.Generator,
    *,
    path: str = "sequential",
) -> Tensor:
    """Monitor step 1: dW [Q, Q, s], one copy of G_t per class trained on that class's aux samples alone.

    Same optimiser, batch size and epochs as a client (``cfg``), CE loss; ``model`` is unchanged.
    One child generator per class is drawn from ``generator``.
    """
    labels = torch.arange(num_classes, device=aux_y.device)
    counts = torch.bincount(aux_y, minlength=num_classes)
    if bool((counts[:num_classes] == 0).any()):
        missing = labels[counts[:num_classes] == 0].tolist()
        raise ValueError(f"auxiliary data has no sample of class(es) {missing}")
    datasets = [(aux_x[aux_y == p], aux_y[aux_y == p]) for p in labels.tolist()]
    seeds = torch.randint(0, 2**62, (num_classes,), generator=generator).tolist()
    gens = [torch.Generator().manual_seed(int(s)) for s in seeds]
    stacked, _ = train_copies(model, datasets, nn.CrossEntropyLoss(), cfg, gens, path=path)
    w0 = model.state_dict()[_weight_key()].detach()
    return stacked[_weight_key()].to(w0.device) - w0.unsqueeze(0)


def _diag(dW: Tensor) -> Tensor:
    """dW[p, p, :] for every p, shape [Q, s]."""
    q = torch.arange(dW.shape[0], device=dW.device)
    return dW[q, q]


def _others_mean(dW: Tensor) -> Tensor:
    """o_all[q, p, i] = mean over j != q of dW[j, p, i], shape [Q, Q, s]."""
    q = dW.shape[0]
    if q < 2:
        raise ValueError("the monitor needs at least 2 classes")
    return (dW.sum(0, keepdim=True) - dW) / (q - 1)


def unit_ratios(dW: Tensor, *, signed: bool = False) -> Tensor:
    """Eq. (ratio): Ra_{p,i} = (Q-1) dW^p_{p,i} / (sum_j dW^j_{p,i} - dW^p_{p,i}), shape [Q, s].

    Read as a ratio of magnitudes, |dW[p,p,i]| / |o[p,i]| (default): training on class p raises
    node p's weights (Y >= 0) while training on any other class lowers them, so the signed ratio
    is negative almost everywhere and the filter Ra > T_Ra would keep ~no unit. ``signed=True``
    gives the literal signed ratio.
    """
    own = _diag(dW)
    other = _diag(_others_mean(dW))
    return own / other if signed else own.abs() / other.abs()


def _numbers_all(u: Tensor, dG: Tensor, scale: float, total: float) -> Tensor:
    """Eq. (number calculation) for every (class q, weight (p, i)): [Q, Q, s], ``u`` per-sample updates."""
    o = _others_mean(u)
    return (scale * dG.unsqueeze(0) - total * o) / (u - o)


def _per_sample(dW: Tensor, n_aux: int | Sequence[int] | Tensor) -> Tensor:
    """dW[q] / n_a^q in float64 (the update one auxiliary sample of class q contributes)."""
    n = torch.as_tensor(n_aux, dtype=torch.float64, device=dW.device).reshape(-1)
    n = n.expand(dW.shape[0]) if n.numel() == 1 else n
    if n.numel() != dW.shape[0] or bool((n <= 0).any()):
        raise ValueError(f"n_aux must be one positive count or one per class ({dW.shape[0]}), got {n.tolist()}")
    return dW.double() / n.reshape(-1, 1, 1)


def number_estimates(dW: Tensor, dG: Tensor, n_aux: int | Sequence[int] | Tensor, scale: float, total: float) -> Tensor:
    """Eq. (number calculation) solved per unit: N_hat_{p,i} = (n_a^p scale dG_{p,i} - N o_{p,i}) / (dW^p_{p,i} - o_{p,i}).

    ``scale`` is K for unweighted FedAvg, N for sample-weighted FedAvg; ``total`` is N. The paper's
    ``dW^p / Ra_{p,i}`` is ``o_{p,i}``. With per-class n_a the updates are first divided by n_a^q
    (identical to the paper's formula when all n_a are equal). Shape [Q, s], float64.
    """
    return _diag(_numbers_all(_per_sample(dW, n_aux), dG.double(), scale, total))


@dataclass(frozen=True)
class Estimate:
    """One estimate v_pt of the round's class counts.

    ``counts`` [Q] estimated N_hat per class; ``kept`` [Q] units/weights used per class; ``dropped``
    values removed as non-finite, negative or (released) out of range; ``fallback`` classes that
    got the uniform share N/Q because nothing was kept.
    """

    counts: Tensor
    kept: Tensor
    method: str
    dropped: int
    fallback: int = 0


def uniform_guess(client_totals: Sequence[int], num_classes: int) -> Tensor:
    """The no-information baseline: N/Q for every class."""
    return torch.full((num_classes,), float(sum(client_totals)) / num_classes, dtype=torch.float64)


def cosine_similarity(a: Tensor | Sequence[float], b: Tensor | Sequence[float]) -> float:
    """CS(a, b) = a.b / (|a| |b|) (the paper's score of v_pt against V)."""
    x = torch.as_tensor(a, dtype=torch.float64).reshape(-1)
    y = torch.as_tensor(b, dtype=torch.float64).reshape(-1)
    return float(x @ y / (x.norm() * y.norm()))


POOLED_BASE = "released"
POOLED_RIDGE = 1.0


def pooled_counts(
    raw: Tensor | Sequence[Sequence[float]],
    selected: Sequence[Sequence[int]],
    client_totals: Tensor | Sequence[float],
    ridge: float = POOLED_RIDGE,
) -> Tensor:
    """The last round's class counts, pooled over every round so far through its clients (ours, docs/monitor.md).

    A client's data do not change between rounds, so round t's composition is the sum of its selected
    clients' fixed compositions, V_t = sum_{j in S_t} c_j. Given the per-round estimates ``raw`` [T, Q]
    (``released``'s, round 1 .. T), the clients selected in each round and every client's total n_j
    (``client_totals`` [K]; only those of selected clients are read), solve

        min_C  sum_t || sum_{j in S_t} c_j - raw_t ||^2 + ridge * sum_j || c_j - (n_j / Q) 1 ||^2

    (one K x K system shared by the Q classes) and return sum_{j in S_T} c_j, clipped at 0 and rescaled
    to the round's total. With the same clients every round and ``ridge`` -> 0 this is the mean of the
    rounds' estimates; the ridge pulls a client seen in few rounds towards the uniform guess.
    """
    v = torch.as_tensor(raw, dtype=torch.float64)
    if v.dim() != 2 or len(selected) != v.shape[0] or v.shape[0] == 0:
        raise ValueError(f"raw must be [T, Q] with one selected set per round; got {tuple(v.shape)} and {len(selected)} sets")
    n = torch.as_tensor(client_totals, dtype=torch.float64)
    t, q = v.shape
    a = torch.zeros(t, n.numel(), dtype=torch.float64)
    for i, chosen in enumerate(selected):
        a[i, torch.as_tensor(list(chosen), dtype=torch.long)] = 1.0
    prior = n[:, None].expand(-1, q) / q
    system = a.T @ a + ridge * torch.eye(n.numel(), dtype=torch.float64)
    c = torch.linalg.solve(system, a.T @ v + ridge * prior)
    counts = (a[-1] @ c).clamp_min(0.0)
    total = float(n[a[-1].bool()].sum())
    return counts * (total / float(counts.sum())) if float(counts.sum()) > 0 else prior[a[-1].bool()].sum(0)


def _masked_mean(values: Tensor, mask: Tensor, total: float) -> tuple[Tensor, Tensor, int]:
    """Per-class mean over the last dims where ``mask``; classes with none get N/Q. Returns (means, kept, fallback)."""
    dims = tuple(range(1, values.dim()))
    kept = mask.sum(dims)
    sums = torch.where(mask, values, torch.zeros_like(values)).sum(dims)
    q = values.shape[0]
    means = torch.where(kept > 0, sums / kept.clamp_min(1), torch.full_like(sums, total / q))
    return means, kept, int((kept == 0).sum())


def _released_keep(dW: Tensor) -> tuple[Tensor, Tensor]:
    """The released filter: per weight, argmax class and whether no other class reaches 80 % of it.

    A weight is kept when fewer than 2 classes have |dW| > 0.8 |max| (the max itself always
    counts); when the max is 0, when fewer than 2 classes equal it. Returns (owner [Q, s], keep [Q, s]).
    """
    top, owner = dW.max(0)
    near = torch.where(top == 0, (dW == 0).sum(0), (dW.abs() > RELEASED_NEIGHBOUR * top.abs()).sum(0))
    return owner, near < 2


def _owner_mask(owner: Tensor, keep: Tensor, num_classes: int) -> Tensor:
    """M[q, p, i] = weight (p, i) is kept and owned by class q, shape [Q, Q, s]."""
    classes = torch.arange(num_classes, device=owner.device).reshape(-1, 1, 1)
    return (owner.unsqueeze(0) == classes) & keep.unsqueeze(0)


def _nnls(u: Tensor, dG: Tensor, scale: float) -> tuple[Tensor, int]:
    """min ||sum_q N_q u[q] - scale dG|| over N >= 0 on every finite last-layer weight; (N, weights dropped).

    Weights with a non-finite update (a diverged model) are dropped; with none left, N is NaN.
    """
    from scipy.optimize import nnls as _scipy_nnls

    a = u.reshape(u.shape[0], -1).T.cpu().numpy()
    b = (scale * dG).reshape(-1).cpu().numpy()
    finite = np.isfinite(a).all(1) & np.isfinite(b)
    if not finite.any():
        return torch.full((u.shape[0],), float("nan"), dtype=torch.float64), int(len(b))
    x, _ = _scipy_nnls(a[finite], b[finite])
    return torch.from_numpy(np.asarray(x, dtype=np.float64)), int((~finite).sum())


def estimate_composition(
    dW: Tensor,
    dG: Tensor,
    *,
    n_aux: int | Sequence[int] | Tensor,
    client_totals: Sequence[int],
    method: str = "paper",
    t_ra: float = 1.25,
    aggregation: str = "mean",
    rescale: bool = True,
) -> Estimate:
    """Estimate the round's class counts v_pt from dW [Q, Q, s], dG [Q, s] and the clients' totals only.

    ``aggregation`` "mean" (the paper's unweighted FedAvg) uses scale K = len(client_totals);
    "weighted" (FedAvg weighted by N^j / N) uses scale N. ``rescale`` scales the result to sum to
    N. Methods: "paper", "paper_signed" (literal signed Eq. ratio), "released", "nnls".
    """
    if method not in UPDATE_METHODS:
        extra = " ('simulated' needs the models: estimate_simulated)" if method == "simulated" else ""
        raise ValueError(f"monitor method must be one of {UPDATE_METHODS}, got {method!r}{extra}")
    if aggregation not in ("mean", "weighted"):
        raise ValueError(f"aggregation must be 'mean' or 'weighted', got {aggregation!r}")
    q = dW.shape[0]
    if dW.dim() != 3 or dW.shape[1] != q or tuple(dG.shape) != tuple(dW.shape[1:]):
        raise ValueError(f"dW must be [Q, Q, s] and dG [Q, s]; got {tuple(dW.shape)} and {tuple(dG.shape)}")
    total = float(sum(client_totals))
    scale = float(len(client_totals)) if aggregation == "mean" else total
    u = _per_sample(dW, n_aux)
    g = dG.double().to(u.device)
    if method == "nnls":
        counts, dropped = _nnls(u, g, scale)
        kept = torch.full((q,), u[0].numel() - dropped, dtype=torch.long)
        fallback = 0
    elif method == "released":
        numbers = _numbers_all(u, g, scale, total)
        owner, keep = _released_keep(u)
        mask = _owner_mask(owner, keep, q)
        valid = mask & torch.isfinite(numbers) & (numbers > 0) & (numbers < RELEASED_UPPER * total / q)
        counts, kept, fallback = _masked_mean(numbers, valid, total)
        dropped = int((mask & ~valid).sum())
    else:
        ratios = unit_ratios(u, signed=method == "paper_signed")
        numbers = _diag(_numbers_all(u, g, scale, total))
        mask = ratios > t_ra
        valid = mask & torch.isfinite(numbers) & (numbers >= 0)
        counts, kept, fallback = _masked_mean(numbers, valid, total)
        dropped = int((mask & ~valid).sum())
    counts = counts.cpu()
    if rescale and float(counts.sum()) > 0:
        counts = counts * (total / counts.sum())
    return Estimate(counts=counts, kept=kept.cpu(), method=method, dropped=dropped, fallback=fallback)


def _last_layer(model: nn.Module) -> nn.Linear:
    layer = getattr(model, LAST_LAYER)
    if not isinstance(layer, nn.Linear):
        raise TypeError(f"the model's {LAST_LAYER!r} must be nn.Linear, got {type(layer).__name__}")
    return layer


def class_gradients(model: nn.Module, aux_x: Tensor, aux_y: Tensor, num_classes: int) -> Tensor:
    """g_q = mean over the aux samples of class q of (softmax(z) - onehot(q)) [Y, 1]^T: [Q, Q, s + 1], float64.

    The gradient of one sample's CE w.r.t. the last layer's weights (and bias, the last column),
    averaged per class, at the model's current weights (no update).
    """
    was_training = model.training
    model.eval()
    with torch.no_grad():
        h = model.features(to_float(aux_x)).double()
        layer = _last_layer(model)
        z = h @ layer.weight.double().T + (layer.bias.double() if layer.bias is not None else 0.0)
        r = torch.softmax(z, -1) - (aux_y.unsqueeze(-1) == torch.arange(num_classes, device=aux_y.device)).double()
        h1 = torch.cat([h, torch.ones_like(h[:, :1])], 1)
        per = r.unsqueeze(-1) * h1.unsqueeze(1)
        sums = torch.zeros(num_classes, *per.shape[1:], dtype=torch.float64, device=per.device).index_add_(0, aux_y, per)
        counts = torch.bincount(aux_y, minlength=num_classes)[:num_classes].clamp_min(1).double()
    model.train(was_training)
    return sums / counts.reshape(-1, 1, 1)


def momentum_weights(steps: int, momentum: float) -> Tensor:
    """w_s = (1 - mu^(S - s)) / (1 - mu): how much of step s's gradient SGD with momentum mu has applied after S steps."""
    remaining = torch.arange(steps, 0, -1, dtype=torch.float64)
    return torch.ones_like(remaining) if momentum == 0 else (1 - momentum**remaining) / (1 - momentum)


def simulated_updates(
    model: nn.Module,
    aux_x: Tensor,
    aux_y: Tensor,
    num_classes: int,
    cfg: SGDConfig,
    steps: int,
    proportions: Tensor,
    generator: torch.Generator,
    *,
    probes: int = 30,
) -> Tensor:
    """a_q = (1/S) sum_s w_s g_q(theta_s) along a simulated client's trajectory: [Q, Q, s + 1], float64.

    A copy of ``model`` takes ``steps`` SGD steps (the client's optimiser and batch size) on
    auxiliary batches whose classes are drawn with ``proportions`` [Q]; at ``probes`` evenly spaced
    steps the per-class gradients ``class_gradients`` are read on all auxiliary samples and
    weighted by ``momentum_weights``. A client of n_q samples of class q, E epochs and batch B then
    moves its last layer by about -(lr E / B) sum_q n_q a_q (docs/monitor.md). ``model`` is unchanged.
    """
    sim = copy.deepcopy(model)
    sim.train()
    opt = make_optimizer(sim, cfg)
    w = momentum_weights(steps, cfg.momentum)
    probe_at = torch.linspace(0, steps - 1, min(probes, steps)).round().long().unique().tolist()
    stride = steps / len(probe_at)
    by_class = [torch.nonzero(aux_y == q).flatten().cpu() for q in range(num_classes)]
    p = torch.as_tensor(proportions, dtype=torch.float64).clamp_min(0).cpu()
    p = p / p.sum()
    acc = torch.zeros(num_classes, num_classes, _last_layer(model).in_features + 1, dtype=torch.float64, device=aux_x.device)
    schedule = []  # every step's batch drawn on the host first, then moved to the device in one copy
    for _ in range(steps):
        classes = torch.multinomial(p, cfg.batch_size, replacement=True, generator=generator)
        picks = torch.randint(0, 2**62, (cfg.batch_size,), generator=generator)
        schedule.append(torch.stack([by_class[int(c)][int(k) % len(by_class[int(c)])] for c, k in zip(classes, picks)]))
    for step, idx in enumerate(torch.stack(schedule).to(aux_x.device)):
        if probe_at and step == probe_at[0]:
            acc += stride * w[step] * class_gradients(sim, aux_x, aux_y, num_classes)
            probe_at.pop(0)
        loss = nn.functional.cross_entropy(sim(to_float(aux_x[idx])), aux_y[idx])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return acc / steps


def client_steps(client_totals: Sequence[int], cfg: SGDConfig) -> list[int]:
    """S_j = E * ceil(N^j / B): the SGD steps each selected client takes (known to the server)."""
    return [cfg.epochs * -(-int(n) // cfg.batch_size) for n in client_totals]


def update_target(
    dG: Tensor, *, w_mid: Tensor, client_totals: Sequence[int], cfg: SGDConfig, aggregation: str = "mean"
) -> Tensor:
    """The left side of (2) in docs/monitor.md: -scale B dG' / (lr E), dG' = dG less the weight decay's share.

    ``dG`` [Q, s + 1] is the last layer's change (weights and bias) over the round, ``w_mid`` [Q, s + 1] its value
    mid-round; the weight decay moved it by -lr wd w_mid times the clients' mean momentum-weighted step count.
    ``scale`` is K ("mean") or N ("weighted"). Equals sum_q N_q a_q when every client's update is (2).
    """
    total = float(sum(client_totals))
    decay_steps = [float(momentum_weights(n, cfg.momentum).sum()) for n in client_steps(client_totals, cfg)]
    if aggregation == "weighted":
        decay = sum(n * d for n, d in zip(client_totals, decay_steps, strict=True)) / total
        scale = total
    else:
        decay = sum(decay_steps) / len(decay_steps)
        scale = float(len(client_totals))
    g = dG.double() + cfg.lr * cfg.weight_decay * decay * w_mid.double()
    return -scale * cfg.batch_size * g / (cfg.lr * cfg.epochs)


def bias_target(model_t: nn.Module, state_t1: dict[str, Tensor], client_totals: Sequence[int], cfg: SGDConfig,
                aggregation: str = "mean") -> Tensor:
    """The round's output-bias change G_t -> G_{t+1} on ``update_target``'s scale: the target of (4) and (4')."""
    w_t = last_layer_with_bias(model_t.state_dict())
    w_t1 = last_layer_with_bias(state_t1).to(w_t.device)
    return update_target(w_t1 - w_t, w_mid=(w_t + w_t1) / 2, client_totals=client_totals, cfg=cfg,
                         aggregation=aggregation)[:, -1]


def recovered_counts(residuals: Tensor, target: Tensor, total: float) -> Tensor:
    """Label recovery from an update (RLU, Chen & Vikalo, ICML 2024, its linear system; iLRG's sum row):
    min_n || sum_c n_c r_c - t ||^2 subject to sum_c n_c = N and n >= 0.

    ``residuals`` [Q, D]: r_c, the update direction one sample of class c contributes, for the output bias
    r_c = mean softmax of class c's samples - e_c (its entries sum to 0, so the bias alone fixes n only up to
    the null vector of [r_c]; the sum row fixes the rest); ``target`` [D] the update read on the same scale
    (``update_target``). Solved by nnls with the sum row weighted to hold to about 1e-9 of N; then rescaled to N.
    """
    r = residuals.double().reshape(residuals.shape[0], -1)
    t = target.double().reshape(-1).to(r.device)
    weight = 1e6 * float(r.abs().max().clamp_min(1e-12))
    ones = torch.full((r.shape[0], 1), weight, dtype=torch.float64, device=r.device)
    counts, _ = _nnls(torch.cat([r, ones], 1), torch.cat([t, t.new_tensor([weight * total])]), 1.0)
    return counts * (total / float(counts.sum())) if float(counts.sum()) > 0 else torch.full_like(counts, total / r.shape[0])


def estimate_label_recovery(
    model_t: nn.Module,
    state_t1: dict[str, Tensor],
    aux_x: Tensor,
    aux_y: Tensor,
    num_classes: int,
    cfg: SGDConfig,
    client_totals: Sequence[int],
    generator: torch.Generator,
    *,
    aggregation: str = "mean",
    initial: Tensor | None = None,
    iterations: int = 3,
    mix: float = 0.0,
) -> Estimate:
    """The ``rlu`` estimator: the output bias's change over the round solved for the counts (``recovered_counts``).

    The residuals r_c are the bias column of ``simulated_updates``: the auxiliary data's mean softmax per class
    ("erroneous confidence") read along a simulated client's local run from G_t, momentum-weighted, which is
    RLU's correction for the drift of the intermediate local epochs. The first simulated client draws its classes
    with the proportions of ``initial`` (counts; uniform when None); each further iteration draws them with the
    previous estimate's proportions mixed with ``mix`` of the uniform. The estimate follows the proportions the
    simulation assumes, so the start matters (docs/monitor.md). Sees G_t, G_{t+1}, the aux data, the protocol and
    the clients' totals.
    """
    target = bias_target(model_t, state_t1, client_totals, cfg, aggregation)
    total = float(sum(client_totals))
    steps = max(1, round(sum(client_steps(client_totals, cfg)) / len(client_totals)))
    start = torch.ones(num_classes, dtype=torch.float64)
    if initial is not None and float(torch.as_tensor(initial).clamp_min(0).sum()) > 0:
        start = torch.as_tensor(initial, dtype=torch.float64).cpu().clamp_min(0)
    props = start / start.sum()
    counts = props * total
    for _ in range(max(1, iterations)):
        a = simulated_updates(model_t, aux_x, aux_y, num_classes, cfg, steps, props, generator)
        counts = recovered_counts(a[:, :, -1], target, total).cpu()
        props = (1 - mix) * counts / total + mix / num_classes
    return Estimate(counts=counts, kept=torch.ones(num_classes, dtype=torch.long), method=RLU, dropped=0)


def simulated_estimate(
    a: Tensor,
    dG: Tensor,
    *,
    w_mid: Tensor,
    client_totals: Sequence[int],
    cfg: SGDConfig,
    aggregation: str = "mean",
) -> Estimate:
    """Solve -scale B dG' / (lr E) = sum_q N_q a_q (``update_target``) for N >= 0 (nnls), rescaled to N
    (docs/monitor.md)."""
    total = float(sum(client_totals))
    target = update_target(dG, w_mid=w_mid, client_totals=client_totals, cfg=cfg, aggregation=aggregation)
    counts, dropped = _nnls(a, target.to(a.device), 1.0)
    counts = counts.cpu()
    if float(counts.sum()) > 0:
        counts = counts * (total / counts.sum())
    q = a.shape[0]
    return Estimate(counts=counts, kept=torch.full((q,), a[0].numel() - dropped, dtype=torch.long), method="simulated", dropped=dropped)


def last_layer_with_bias(state: dict[str, Tensor]) -> Tensor:
    """[W | b] of a state dict's last layer, shape [Q, s + 1] (b = 0 without a bias)."""
    w = state[_weight_key()].detach()
    b = state.get(f"{LAST_LAYER}.bias")
    b = torch.zeros(w.shape[0], dtype=w.dtype, device=w.device) if b is None else b.detach().to(w.device)
    return torch.cat([w, b.unsqueeze(1)], 1)


def estimate_simulated(
    model_t: nn.Module,
    state_t1: dict[str, Tensor],
    aux_x: Tensor,
    aux_y: Tensor,
    num_classes: int,
    cfg: SGDConfig,
    client_totals: Sequence[int],
    generator: torch.Generator,
    *,
    aggregation: str = "mean",
    iterations: int = 2,
    mix: float = 0.1,
) -> Estimate:
    """The ``simulated`` estimator: simulate the average client, estimate, re-simulate with the estimate.

    The first simulated client draws its classes uniformly; each further iteration draws them
    with the previous estimate's proportions mixed with ``mix`` of the uniform, so every class
    is probed along a trajectory like the round's. Sees G_t, G_{t+1}, the aux data, the protocol
    and the clients' totals only.
    """
    w_t = last_layer_with_bias(model_t.state_dict())
    w_t1 = last_layer_with_bias(state_t1).to(w_t.device)
    steps = max(1, round(sum(client_steps(client_totals, cfg)) / len(client_totals)))
    props = torch.full((num_classes,), 1.0 / num_classes, dtype=torch.float64)
    est = None
    for _ in range(max(1, iterations)):
        a = simulated_updates(model_t, aux_x, aux_y, num_classes, cfg, steps, props, generator)
        est = simulated_estimate(a, w_t1 - w_t, w_mid=(w_t + w_t1) / 2, client_totals=client_totals, cfg=cfg, aggregation=aggregation)
        share = est.counts / est.counts.sum() if float(est.counts.sum()) > 0 else props
        props = (1 - mix) * share + mix / num_classes
    assert est is not None
    return est


def class_ratios(dW: Tensor, *, t_ra: float = 1.25, variant: str = "paper", clip: float | None = RATIO_CLIP) -> Tensor:
    """Ratio Loss's R = [Ra_1 .. Ra_Q] (section "Ratio Loss based Mitigation"), shape [Q], float64.

    "paper": Ra_p = |mean of Ra_{p,i} over the units with Ra_{p,i} > T_Ra| (magnitude reading of
    Eq. ratio; all units when none passes); "median" and "sums": the same units' median ratio
    (``kept_median``) or ratio of sums (``kept_sum_ratio``), the stabilised readings. "released": the authors' ratio of sums over the
    weights the released filter gives class p, |sum dW^p| / |sum o|, 10 when the denominator is 0.
    Both are clipped at ``clip`` (the released code's 5000).
    """
    d = dW.double()
    q = d.shape[0]
    if variant in KEPT_UNIT_READINGS:
        ra = unit_ratios(d)
        mask = ra > t_ra
        none = ~mask.any(1, keepdim=True)
        mask = mask | none
        finite = torch.isfinite(ra)
        mask = mask & finite
        if variant == "paper":
            sums = torch.where(mask, ra, torch.zeros_like(ra)).sum(1)
            out = (sums / mask.sum(1).clamp_min(1)).abs()
        elif variant == "median":
            out = kept_median(ra, mask)
        else:
            out = kept_sum_ratio(_diag(d).abs(), _diag(_others_mean(d)).abs(), mask)
    elif variant == "released":
        owner, keep = _released_keep(d)
        mask = _owner_mask(owner, keep, q).to(d.dtype)
        num = (mask * d).sum((1, 2)).abs()
        den = (mask * _others_mean(d)).sum((1, 2)).abs()
        out = torch.where(den != 0, num / torch.where(den != 0, den, torch.ones_like(den)), torch.full_like(num, RELEASED_NAN_RATIO))
    else:
        raise ValueError(f"monitor variant must be one of {VARIANTS}, got {variant!r}")
    return out.clamp(max=clip) if clip is not None else out


def kept_median(ra: Tensor, mask: Tensor) -> Tensor:
    """Ra_p = the median of the kept units' ratios Ra_{p,i} (``monitor.variant: median``; docs/ratio-stability.md).

    A robust stand-in for the paper's mean (Eq. ratio averaged over the units above T_Ra): one unit
    whose other-class update is near zero has a ratio of 10^3–10^5 and carries most of the mean.
    The lower median of an even count (torch's). Classes with no kept unit: NaN -> 0.
    """
    vals = torch.where(mask, ra, torch.full_like(ra, float("nan")))
    return torch.nan_to_num(vals.nanmedian(1).values, nan=0.0)


def kept_sum_ratio(own: Tensor, other: Tensor, mask: Tensor) -> Tensor:
    """Ra_p = sum_i |dW^p_{p,i}| / sum_i |o_{p,i}| over the kept units (``monitor.variant: sums``; docs/ratio-stability.md).

    The units' ratios weighted by their denominators: a unit with |o| near zero adds its |dW^p| to the
    numerator only, instead of a huge ratio to a mean. 0 for a class with no kept unit.
    """
    num = torch.where(mask, own, torch.zeros_like(own)).sum(1)
    den = torch.where(mask, other, torch.zeros_like(other)).sum(1)
    return torch.where(den > 0, num / torch.where(den > 0, den, torch.ones_like(den)), torch.zeros_like(num))


def ratio_weights(ratios: Tensor, *, alpha: float = 1.0, beta: float = 0.1) -> Tensor:
    """Eq. (L_RL): per-class weights pi_p = alpha + beta Ra_p of the Ratio Loss."""
    return alpha + beta * torch.as_tensor(ratios, dtype=torch.float64)


class Acknowledger:
    """Acknowledges global imbalance once v_pt's max/min exceeds ``threshold`` for ``rounds`` consecutive rounds.

    The acknowledgment latches (the paper then switches to the Ratio Loss for the rest of training);
    a round below the threshold resets the streak only while not yet acknowledged.
    """

    def __init__(self, threshold: float = 3.0, rounds: int = 3) -> None:
        if threshold < 1 or rounds < 1:
            raise ValueError(f"acknowledgment needs threshold >= 1 and rounds >= 1, got {threshold}, {rounds}")
        self.threshold = float(threshold)
        self.rounds = int(rounds)
        self.streak = 0
        self.acknowledged = False

    @staticmethod
    def imbalance(counts: Tensor | Sequence[float]) -> float:
        """max/min of the estimate (inf when the smallest is <= 0; ``records.imbalance_ratio``)."""
        return imbalance_ratio(torch.as_tensor(counts, dtype=torch.float64).tolist())

    def update(self, counts: Tensor | Sequence[float]) -> bool:
        """Feed one round's estimate; return whether imbalance is (now or already) acknowledged."""
        self.streak = self.streak + 1 if self.imbalance(counts) > self.threshold else 0
        self.acknowledged = self.acknowledged or self.streak >= self.rounds
        return self.acknowledged

    def state_dict(self) -> dict[str, float | int | bool]:
        """Everything needed to resume."""
        return {"threshold": self.threshold, "rounds": self.rounds, "streak": self.streak, "acknowledged": self.acknowledged}

    def load_state_dict(self, state: dict[str, float | int | bool]) -> None:
        """Restore from ``state_dict``."""
        self.threshold = float(state["threshold"])
        self.rounds = int(state["rounds"])
        self.streak = int(state["streak"])
        self.acknowledged = bool(state["acknowledged"])


class Monitor:
    """The server-side monitor: auxiliary data + settings; one ``dW`` per round feeds the estimators
    (``fedbalance.monitor.estimators.Observer``) and the Ratio-Loss weights."""

    def __init__(
        self,
        aux_x: Tensor,
        aux_y: Tensor,
        num_classes: int,
        cfg: SGDConfig,
        *,
        t_ra: float = 1.25,
        variant: str = "paper",
        alpha: float = 1.0,
        beta: float = 0.1,
        clip: float | None = RATIO_CLIP,
        aggregation: str = "mean",
        path: str = "sequential",
    ) -> None:
        if variant not in (*VARIANTS, *READING_VARIANTS):
            raise ValueError(f"monitor variant must be one of {(*VARIANTS, *READING_VARIANTS)}, got {variant!r}")
        self.aux_x, self.aux_y = aux_x, aux_y
        self.num_classes = num_classes
        self.cfg = cfg
        self.t_ra, self.variant = t_ra, variant
        self.alpha, self.beta, self.clip = alpha, beta, clip
        self.aggregation, self.path = aggregation, path
        self.n_aux = torch.bincount(aux_y.cpu(), minlength=num_classes)[:num_classes]

    @property
    def weight_key(self) -> str:
        """The state-dict key of the last layer's weight W."""
        return _weight_key()

    def updates(self, model_t: nn.Module, generator: torch.Generator) -> Tensor:
        """dW [Q, Q, s] on the global model G_t."""
        return aux_updates(model_t, self.aux_x, self.aux_y, self.num_classes, self.cfg, generator, path=self.path)

    def weights(self, dW: Tensor) -> tuple[Tensor, Tensor]:
        """(R, pi): class ratios and Ratio-Loss weights from dW."""
        if self.variant in READING_VARIANTS:
            raise ValueError(f"monitor variant {self.variant!r} reads the whole round, not dW alone: "
                             "fedbalance.monitor.readings.round_weights computes its weights")
        ratios = class_ratios(dW, t_ra=self.t_ra, variant=self.variant, clip=self.clip)
        return ratios, ratio_weights(ratios, alpha=self.alpha, beta=self.beta)
