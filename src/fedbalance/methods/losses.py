"""The paper's Ratio Loss and its competitors: CE, Focal, GHM-C, MSE and MFE; beyond the paper,
logit adjustment, Balanced Softmax, FedLC and FedRS (docs/baselines.md).

Each loss is a ``torch.nn.functional``-style function plus an ``nn.Module`` with torch-style
``reduction`` ('mean' | 'sum' | 'none'). Inputs are logits [N, Q] and integer targets [N] (``check_inputs`` refuses
others, and a class outside [0, Q), with a ValueError saying which), and an
optional per-sample ``mask`` [N] (1 = real sample, 0 = padding; the vectorised path's padded
batches): the reduction runs over the real samples only (a mean over none is 0) and padded samples
enter no batch statistic (GHM-C's bins, MFE's class counts, the Ratio Loss's batch mean).
Everything is computed from ``log_softmax`` (stable for logits of +-1e4) and is vmap-safe:
one-hot encodings are comparisons with ``arange``, lookups are ``gather``, there is no boolean
indexing, no ``.item()`` and no data-dependent shape.
"""

from __future__ import annotations

import copy
import inspect
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from fedbalance.common import plugins

_REDUCTIONS = ("mean", "sum", "none")


def _check_reduction(reduction: str) -> None:
    if reduction not in _REDUCTIONS:
        raise ValueError(f"unknown reduction {reduction!r}; expected one of {_REDUCTIONS}")


def _reduce(per_sample: torch.Tensor, reduction: str) -> torch.Tensor:
    """Torch-style reduction of a per-sample loss [N]."""
    _check_reduction(reduction)
    if reduction == "mean":
        return per_sample.mean()
    if reduction == "sum":
        return per_sample.sum()
    return per_sample


def _masked(per_sample: torch.Tensor, mask: torch.Tensor | None, reduction: str) -> torch.Tensor:
    """``_reduce`` over the real samples (``mask`` 1); a mean over none is 0."""
    if mask is None:
        return _reduce(per_sample, reduction)
    _check_reduction(reduction)
    m = mask.to(per_sample.dtype)
    if reduction == "none":
        return per_sample * m
    total = (per_sample * m).sum()
    return total if reduction == "sum" else total / m.sum().clamp_min(1.0)


def check_inputs(
    logits: torch.Tensor,
    target: torch.Tensor,
    mask: torch.Tensor | None = None,
    per_class: dict[str, torch.Tensor | None] | None = None,
) -> None:
    """ValueError naming what is wrong with a loss's inputs, before anything is computed.

    ``logits`` a floating [N, Q], ``target`` integer class indices [N] in [0, Q) (not one-hot, not probabilities),
    ``mask`` [N], each of ``per_class`` (name -> tensor, e.g. the Ratio Loss's ``weight``) [Q]. Shapes and dtypes are
    checked everywhere, under ``torch.func.vmap`` too (the shapes seen there are one client's); the targets' range on
    the CPU outside vmap, where reading it costs no device sync (elsewhere a class index beyond Q still fails in
    torch's ``gather``, but ``mse_loss`` cannot tell it from a row of zeros).
    """
    if not isinstance(logits, torch.Tensor) or not logits.is_floating_point() or logits.dim() != 2:
        raise ValueError(f"logits must be a floating tensor [N, Q], got {_describe(logits)}")
    n, q = logits.shape
    if not isinstance(target, torch.Tensor) or target.dim() != 1 or target.shape[0] != n:
        raise ValueError(f"target must be class indices [N] with N = {n} (the logits' rows), got {_describe(target)}")
    if target.is_floating_point() or target.is_complex() or target.dtype == torch.bool:
        raise ValueError(f"target must hold integer class indices, got dtype {target.dtype} "
                         "(one-hot or soft targets are not taken: pass the class index of each sample)")
    if mask is not None and (not isinstance(mask, torch.Tensor) or tuple(mask.shape) != (n,)):
        raise ValueError(f"mask must be [N] = [{n}] (1 = real sample), got {_describe(mask)}")
    for name, value in (per_class or {}).items():
        if value is not None and (not isinstance(value, torch.Tensor) or tuple(value.shape) != (q,)):
            raise ValueError(f"{name} must be one value a class, [Q] = [{q}] (the logits' columns), got {_describe(value)}")
    if target.device.type != "cpu" or n == 0:
        return
    try:
        low, high = int(target.min()), int(target.max())
    except RuntimeError:
        return  # under vmap a value cannot be read: shapes only
    if low < 0 or high >= q:
        raise ValueError(f"target holds class {low if low < 0 else high}, outside [0, {q}) for logits of {q} classes")


def _describe(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"a {value.dtype} tensor of shape {list(value.shape)}"
    return type(value).__name__


def _one_hot(index: torch.Tensor, num: int, dtype: torch.dtype) -> torch.Tensor:
    """One-hot [N, num] of ``index`` [N] by comparison with arange (vmap-safe, unlike F.one_hot)."""
    return (index.unsqueeze(-1) == torch.arange(num, device=index.device)).to(dtype)


def _log_p_target(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """log softmax(z)_y per sample, shape [N]."""
    return F.log_softmax(logits, dim=-1).gather(-1, target.long().unsqueeze(-1)).squeeze(-1)


def cross_entropy(
    logits: torch.Tensor,
    target: torch.Tensor,
    reduction: str = "mean",
    mask: torch.Tensor | None = None,
    weight: torch.Tensor | None = None,
) -> torch.Tensor:
    """CrossEntropy Loss, paper Eq. L_CE = -p . log(S): per sample -log softmax(z)_y.

    ``mask`` [N] (1 = real sample) reduces over the real samples only. ``weight`` [Q]: torch's
    class weights (``F.cross_entropy(weight=...)``): sample i weighs w_{y_i} and 'mean' divides by
    the sum of the (real) samples' weights.
    """
    check_inputs(logits, target, mask, {"weight": weight})
    per_sample = -_log_p_target(logits, target)
    if weight is None:
        return _masked(per_sample, mask, reduction)
    w = weight.to(logits.dtype).gather(-1, target.long())
    if reduction != "mean":
        return _masked(w * per_sample, mask, reduction)
    m = torch.ones_like(w) if mask is None else mask.to(w.dtype)
    return (w * per_sample * m).sum() / (w * m).sum().clamp_min(torch.finfo(w.dtype).tiny)


def focal_loss(
    logits: torch.Tensor,
    target: torch.Tensor,
    gamma: float = 2.0,
    alpha: float = 1.0,
    reduction: str = "mean",
    mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """Focal Loss (Lin et al. 2017), multi-class softmax form: -alpha (1 - p_t)^gamma log p_t.

    ``1 - p_t`` is computed as ``-expm1(log p_t)`` and floored at the smallest positive float so
    that gamma in (0, 1) has finite gradients at p_t = 1; gamma = 0 is exactly ``alpha * CE``.
    ``mask`` [N] (1 = real sample) reduces over the real samples only.
    """
    check_inputs(logits, target, mask)
    log_pt = _log_p_target(logits, target)
    one_minus_pt = (-torch.expm1(log_pt)).clamp_min(torch.finfo(log_pt.dtype).tiny)
    return _masked(-alpha * one_minus_pt.pow(gamma) * log_pt, mask, reduction)


GHM_G = ("softmax", "sigmoid")
RATIO_WEIGHTING = ("per_sample", "batch_mean", "normalised")


def ghm_gradient_norm(logits: torch.Tensor, target: torch.Tensor, g: str = "softmax") -> torch.Tensor:
    """GHM-C's gradient norm g per sample [N], detached.

    ``"softmax"``: g = 1 - softmax(z)_y, the norm of the multi-class CE gradient w.r.t. the target
    logit. ``"sigmoid"``: g = 1 - sigmoid(z_y), as the authors' released GHMC computes it
    (``FEMNIST-4-Losses/models/Update.py``: ``|pred.sigmoid() - target|`` on the target class).
    """
    check_inputs(logits, target)
    return _ghm_gradient_norm(logits, target, g)


def _ghm_gradient_norm(logits: torch.Tensor, target: torch.Tensor, g: str) -> torch.Tensor:
    """``ghm_gradient_norm`` on inputs already checked."""
    if g not in GHM_G:
        raise ValueError(f"GHM-C g must be one of {GHM_G}, got {g!r}")
    z = logits.detach()
    if g == "softmax":
        return -torch.expm1(_log_p_target(z, target))
    return 1.0 - torch.sigmoid(z.gather(-1, target.long().unsqueeze(-1)).squeeze(-1))


def ghm_bin_index(g: torch.Tensor, bins: int) -> torch.Tensor:
    """Bin [N] of g among ``bins`` equal bins on [0, 1]: edges_i <= g < edges_{i+1}, edges as mmdetection's.

    The edges are ``arange(bins + 1) / bins`` in float32 with the last raised by 1e-6, so g = 1
    falls in the last bin; counting the inner edges below g is vmap-safe and bins exactly as the
    released loop over ``(g >= edges[i]) & (g < edges[i + 1])``.
    """
    edges = torch.arange(bins + 1, dtype=torch.float32, device=g.device) / bins
    return (g.float().unsqueeze(-1) >= edges[1:bins]).sum(-1)


def ghmc_weights(
    logits: torch.Tensor,
    target: torch.Tensor,
    bins: int = 10,
    g: str = "softmax",
    mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """GHM-C weights (Li et al. 2019, Eq. 4 and 7): w_i = N / (count of i's bin * number of non-empty bins), [N].

    ``g`` is ``ghm_gradient_norm``'s definition. With ``mask`` [N] (1 = real sample) the counts,
    N and the non-empty bins are taken over the real samples only. Detached weights.
    """
    check_inputs(logits, target, mask)
    idx = ghm_bin_index(_ghm_gradient_norm(logits, target, g), bins)
    m = torch.ones(idx.shape[-1], dtype=logits.dtype, device=logits.device) if mask is None else mask.to(logits.dtype)
    counts = (_one_hot(idx, bins, logits.dtype) * m.unsqueeze(-1)).sum(0)
    nonempty = (counts > 0).to(logits.dtype).sum()
    return m.sum() / (counts.gather(0, idx).clamp_min(1.0) * nonempty.clamp_min(1.0))


def ghmc_loss(
    logits: torch.Tensor,
    target: torch.Tensor,
    bins: int = 10,
    reduction: str = "mean",
    g: str = "softmax",
    mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """GHM-C Loss (Li et al. 2019) on multi-class CE: w_i * CE_i with ``ghmc_weights``.

    'mean' is sum_i(w_i CE_i) / N, as in mmdetection's GHMC and the authors' released GHMC
    (``-log_p * weights / tot`` summed), which divide by the number of samples, not the weights' sum.
    The paper's tables use the released form: ``bins=30, g="sigmoid"``.
    """
    w = ghmc_weights(logits, target, bins, g, mask)
    return _masked(w * -_log_p_target(logits, target), mask, reduction)


def ratio_loss(
    logits: torch.Tensor,
    target: torch.Tensor,
    weight: torch.Tensor,
    reduction: str = "mean",
    weighting: str = "per_sample",
    mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """Ratio Loss, paper Eq. L_RL(X^(p)) = -(alpha + beta Ra_p) log f_(p)^(p).

    ``weight`` is the per-class pi = alpha + beta Ra [Q] from the monitor. ``weighting``:

    * ``"per_sample"`` (the paper's equation): sample i weighs pi_{y_i}; 'mean' is
      sum_i(pi_{y_i} CE_i) / N -- NOT divided by sum_i pi_{y_i} as ``F.cross_entropy(weight=...)``
      does, so the weights scale the loss as in the paper.
    * ``"batch_mean"`` (the authors' released code): ``Ratio_Cross_Entropy`` multiplies the weights
      [N] by the log-probabilities [N, 1], which broadcasts to [N, N]; its mean is
      mean_i(pi_{y_i}) * mean_i(CE_i). Every sample gets the batch's mean weight, so classes are not
      weighted against each other; each batch's step is rescaled. 'none' gives mean(pi) * CE_i.
    * ``"normalised"`` (``F.cross_entropy(weight=pi)``, as the CLIMB authors' ``core/ratio_loss_fl.py`` applies it,
      docs/deviations.md): 'mean' is sum_i(pi_{y_i} CE_i) / sum_i pi_{y_i}; 'sum' and 'none' as ``"per_sample"``.

    pi = 1 is exactly CE in every reading. ``mask`` [N] restricts everything to the real samples.
    """
    if weighting not in RATIO_WEIGHTING:
        raise ValueError(f"ratio weighting must be one of {RATIO_WEIGHTING}, got {weighting!r}")
    check_inputs(logits, target, mask, {"weight": weight})
    pi = weight.to(logits.dtype).gather(-1, target.long())
    m = torch.ones_like(pi) if mask is None else mask.to(pi.dtype)
    if weighting == "batch_mean":
        pi = ((pi * m).sum() / m.sum().clamp_min(1.0)).expand_as(pi)
    if weighting == "normalised" and reduction == "mean":
        return (-pi * _log_p_target(logits, target) * m).sum() / (pi * m).sum().clamp_min(torch.finfo(pi.dtype).tiny)
    return _masked(-pi * _log_p_target(logits, target), mask, reduction)


def _squared_errors(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """e_i = sum_k (softmax(z_i)_k - onehot(y_i)_k)^2, shape [N]."""
    prob = F.log_softmax(logits, dim=-1).exp()
    return (prob - _one_hot(target.long(), logits.shape[-1], prob.dtype)).pow(2).sum(-1)


def mse_loss(
    logits: torch.Tensor, target: torch.Tensor, reduction: str = "mean", mask: torch.Tensor | None = None
) -> torch.Tensor:
    """Mean-Square-Error Loss L_MSE on softmax vs one-hot: per sample e_i = sum_k (S_ik - onehot_ik)^2.

    ``mask`` [N] (1 = real sample) reduces over the real samples only.
    """
    check_inputs(logits, target, mask)
    return _masked(_squared_errors(logits, target), mask, reduction)


def mfe_loss(
    logits: torch.Tensor,
    target: torch.Tensor,
    num_classes: int | None = None,
    reduction: str = "sum",
    mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """Mean False Error L_MFE (Wang et al. 2016), multi-class: sum over present classes c of mean_{y_i = c} e_i.

    e_i is ``mse_loss``'s per-sample error (Wang et al.'s constant 1/2 dropped). Every class present
    in the batch -- on a client, its local classes -- counts equally. 'none' gives e_i / n_{y_i}
    (summing to the MFE), 'sum' the MFE, 'mean' the MFE / number of classes present.
    With ``mask`` [N] (1 = real sample) the class counts n_c and the classes present are over the
    real samples only, padded samples give 0, and a 'mean' over no class is 0.
    """
    _check_reduction(reduction)
    check_inputs(logits, target, mask)
    q = logits.shape[-1]
    if num_classes is not None and num_classes != q:
        raise ValueError(f"num_classes={num_classes} but logits have {q} classes")
    onehot = _one_hot(target.long(), q, logits.dtype)
    if mask is None:
        counts = onehot.sum(0)
        per_sample = _squared_errors(logits, target) / counts.gather(0, target.long())
    else:
        m = mask.to(logits.dtype)
        counts = (onehot * m.unsqueeze(-1)).sum(0)
        per_sample = _squared_errors(logits, target) / counts.gather(0, target.long()).clamp_min(1.0) * m
    if reduction == "none":
        return per_sample
    total = per_sample.sum()
    if reduction == "sum":
        return total
    present = (counts > 0).to(logits.dtype).sum()
    return total / (present if mask is None else present.clamp_min(1.0))


FEEDS: dict[str, str] = {"weights": "set_weight", "prior": "set_prior", "client_counts": "set_client_counts"}
"""What the engine can hand a loss -> the method that takes it: the monitor's Ratio-Loss weights pi [Q] and its
composition estimate of the previous round (``prior``) [Q], every round; a training client's own label counts
(``client_counts``) [Q] before that client trains. A loss declares what it takes in ``receives``."""


class Loss(nn.Module):
    """Base: validates and stores ``reduction``; ``receives`` names what the engine hands it (``FEEDS``).

    Every loss here takes an optional sample ``mask`` in ``forward`` (the vectorised path's padding).
    ``vectorisable`` False declares a loss that cannot run under ``torch.func.vmap`` (state kept across calls,
    data-dependent shapes): the vectorised path and packs refuse it, and ``path: auto`` trains it sequentially.
    """

    receives: ClassVar[frozenset[str]] = frozenset()
    vectorisable: ClassVar[bool] = True

    def __init__(self, reduction: str = "mean") -> None:
        super().__init__()
        _check_reduction(reduction)
        self.reduction = reduction

    def extra_repr(self) -> str:
        return f"reduction={self.reduction!r}"


class CrossEntropyLoss(Loss):
    """Module form of ``cross_entropy``."""

    def forward(self, logits: torch.Tensor, target: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        return cross_entropy(logits, target, self.reduction, mask)


class FocalLoss(Loss):
    """Module form of ``focal_loss`` (paper's competitor: gamma = 2, alpha = 1)."""

    def __init__(self, gamma: float = 2.0, alpha: float = 1.0, reduction: str = "mean") -> None:
        super().__init__(reduction)
        self.gamma = gamma
        self.alpha = alpha

    def forward(self, logits: torch.Tensor, target: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        return focal_loss(logits, target, self.gamma, self.alpha, self.reduction, mask)


class GHMCLoss(Loss):
    """Module form of ``ghmc_loss``; ``momentum`` > 0 smooths the bin counts across calls.

    ``bins`` and ``g`` choose the reading: the paper's tables use the authors' ``bins=30,
    g="sigmoid"``; Li et al.'s multi-class form is ``g="softmax"``. With momentum m > 0 the buffer
    ``acc_sum`` [bins] is updated on every call, as in mmdetection's GHMC, for the non-empty bins
    only: acc_sum = m * acc_sum + (1 - m) * count; then w_i = N / (acc_sum[bin_i] * number of
    non-empty bins). The update is in place, so use momentum 0 (the stateless function) under
    ``torch.func.vmap``.
    """

    acc_sum: torch.Tensor

    def __init__(self, bins: int = 10, momentum: float = 0.0, g: str = "softmax", reduction: str = "mean") -> None:
        super().__init__(reduction)
        if bins < 1:
            raise ValueError(f"bins must be >= 1, got {bins}")
        if not 0.0 <= momentum < 1.0:
            raise ValueError(f"momentum must be in [0, 1), got {momentum}")
        if g not in GHM_G:
            raise ValueError(f"GHM-C g must be one of {GHM_G}, got {g!r}")
        self.bins = bins
        self.momentum = momentum
        self.g = g
        self.register_buffer("acc_sum", torch.zeros(bins))

    def extra_repr(self) -> str:
        return f"bins={self.bins}, momentum={self.momentum}, g={self.g!r}, reduction={self.reduction!r}"

    def forward(self, logits: torch.Tensor, target: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        if self.momentum == 0.0:
            return ghmc_loss(logits, target, self.bins, self.reduction, self.g, mask)
        if mask is not None:
            raise ValueError("GHMCLoss with momentum > 0 does not take a mask (use momentum 0)")
        idx = ghm_bin_index(ghm_gradient_norm(logits, target, self.g), self.bins)
        counts = _one_hot(idx, self.bins, logits.dtype).sum(0)
        with torch.no_grad():
            smoothed = self.momentum * self.acc_sum + (1.0 - self.momentum) * counts
            self.acc_sum.copy_(torch.where(counts > 0, smoothed, self.acc_sum))
        nonempty = (counts > 0).to(logits.dtype).sum()
        weights = idx.shape[-1] / (self.acc_sum.to(logits.dtype).gather(0, idx) * nonempty)
        return _reduce(weights * -_log_p_target(logits, target), self.reduction)


class RatioLoss(Loss):
    """Module form of ``ratio_loss``; the per-class weights pi live in the buffer ``weight``.

    ``weighting``: ``"per_sample"`` (the paper's equation), ``"batch_mean"`` (the released code) or ``"normalised"``
    (the CLIMB authors' reading).
    ``weight=None`` means all ones (plain CE: round 0 of the paper); ``set_weight`` installs the
    monitor's pi for the next round.
    """

    receives = frozenset({"weights"})
    weight: torch.Tensor | None

    def __init__(
        self,
        weight: torch.Tensor | None = None,
        num_classes: int | None = None,
        weighting: str = "per_sample",
        reduction: str = "mean",
    ) -> None:
        super().__init__(reduction)
        if weighting not in RATIO_WEIGHTING:
            raise ValueError(f"ratio weighting must be one of {RATIO_WEIGHTING}, got {weighting!r}")
        self.weighting = weighting
        if weight is None and num_classes is not None:
            weight = torch.ones(num_classes)
        self.num_classes = num_classes
        self.register_buffer("weight", None if weight is None else self._validate(weight))

    def _validate(self, weight: torch.Tensor | Any) -> torch.Tensor:
        w = torch.as_tensor(weight, dtype=torch.get_default_dtype()).detach().clone()
        if w.dim() != 1 or (self.num_classes is not None and w.numel() != self.num_classes):
            raise ValueError(f"weight must have shape [{self.num_classes or 'Q'}], got {tuple(w.shape)}")
        return w

    def set_weight(self, pi: torch.Tensor) -> None:
        """Replace the per-class weights pi [Q]."""
        w = self._validate(pi)
        self.weight = w if self.weight is None else w.to(self.weight.device)

    def extra_repr(self) -> str:
        return f"weighting={self.weighting!r}, reduction={self.reduction!r}"

    def forward(self, logits: torch.Tensor, target: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        weight = torch.ones(logits.shape[-1], device=logits.device) if self.weight is None else self.weight
        return ratio_loss(logits, target, weight, self.reduction, self.weighting, mask)


class MSELoss(Loss):
    """Module form of ``mse_loss``."""

    def forward(self, logits: torch.Tensor, target: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        return mse_loss(logits, target, self.reduction, mask)


class MFELoss(Loss):
    """Module form of ``mfe_loss`` (default reduction 'sum' = the MFE)."""

    def __init__(self, num_classes: int | None = None, reduction: str = "sum") -> None:
        super().__init__(reduction)
        self.num_classes = num_classes

    def forward(self, logits: torch.Tensor, target: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        return mfe_loss(logits, target, self.num_classes, self.reduction, mask)


LOSSES: dict[str, type[nn.Module]] = {
    "ce": CrossEntropyLoss,
    "focal": FocalLoss,
    "ghmc": GHMCLoss,
    "ratio": RatioLoss,
    "mse": MSELoss,
    "mfe": MFELoss,
}


def loss_class(name: str) -> type[nn.Module]:
    """The class of loss ``name``: a registered one (``LOSSES``), an entry point of the group ``fedbalance.losses`` or
    a dotted path ``module:Class`` (``fedbalance.common.plugins``); ValueError naming an unknown one."""
    if name in LOSSES:
        return LOSSES[name]
    plugin = plugins.resolve("losses", name, LOSSES, f"loss {name!r}")
    assert plugin is not None
    return check_loss_class(plugin.load(), plugin.origin())


def check_loss_class(obj: Any, origin: str) -> type[Loss]:
    """``obj`` if it follows the loss protocol of ``Loss`` (a subclass whose ``receives`` are ``FEEDS``' names and
    whose ``forward(logits, target, mask=None)`` takes the sample mask); PluginError naming ``origin`` otherwise."""
    if not (isinstance(obj, type) and issubclass(obj, Loss)):
        raise plugins.PluginError(f"{origin}: {obj!r} is not a subclass of fedbalance.methods.losses.Loss")
    unknown = sorted(set(getattr(obj, "receives", ())) - set(FEEDS))
    if unknown:
        raise plugins.PluginError(f"{origin}: receives {unknown}, which the engine does not hand over ({sorted(FEEDS)})")
    params = list(inspect.signature(obj.forward).parameters)
    if params[1:4] != ["logits", "target", "mask"]:
        raise plugins.PluginError(f"{origin}: forward{tuple(params[1:])} must be forward(logits, target, mask=None)")
    if "client_counts" in obj.receives and obj.vectorisable and not callable(getattr(obj, "forward_counts", None)):
        raise plugins.PluginError(f"{origin}: receives client_counts but has no forward_counts(logits, target, counts, "
                                  "mask) for the vectorised path (or declare vectorisable = False)")
    return obj


def check_loss_value(value: Any, where: str) -> torch.Tensor:
    """``value`` if it is a loss the engine can train on: a 0-dim floating tensor, finite, attached to the graph (it has
    a gradient); PluginError saying ``where`` it came from otherwise (the loss contract, docs/extending.md)."""
    if not isinstance(value, torch.Tensor):
        raise plugins.PluginError(f"{where} returned {type(value).__name__}, not a tensor")
    if value.dim() != 0:
        raise plugins.PluginError(f"{where} returned shape {tuple(value.shape)}, not a scalar (reduce over the samples)")
    if not value.is_floating_point() or not bool(torch.isfinite(value)):
        raise plugins.PluginError(f"{where} returned {float(value.detach()) if value.is_floating_point() else value}, "
                                  "not a finite number")
    if not value.requires_grad:
        raise plugins.PluginError(f"{where} returned a value without a gradient (detached from the logits)")
    return value


def loss_parameters(cls: type[nn.Module]) -> list[str]:
    """The constructor parameters of a loss class (``loss_params.<loss>`` may set them)."""
    return [p for p in inspect.signature(cls.__init__).parameters if p not in ("self", "args", "kwargs")]


def get_loss(name: str, num_classes: int, **params: Any) -> nn.Module:
    """Build a loss by name (``loss_class``); ``num_classes`` is passed to the losses that take it.

    Raises ValueError naming an unknown loss or an unknown parameter.
    """
    cls = loss_class(name)
    accepted = loss_parameters(cls)
    unknown = sorted(set(params) - set(accepted))
    if unknown:
        raise ValueError(f"unknown parameter(s) {unknown} for loss {name!r}; accepted: {accepted}")
    if "num_classes" in accepted:
        params["num_classes"] = num_classes
    return cls(**params)


# ---------------------------------------------------------------- beyond the paper (docs/baselines.md)
#
# Newer class-imbalance losses, each reading per-class counts n [Q]:
#
# * from the monitor (server-side, ``receives`` "prior"): the engine feeds the monitor's estimate of the
#   previous round's composition before the clients train (uniform in round 0), exactly as it feeds the
#   Ratio Loss its weights (``feed``);
# * from the client's own labels (``receives`` "client_counts"): the engine feeds
#   with the training client's local label counts before that client trains (sequential path), or
#   hands every copy its own counts (vectorised path, ``vectorised.make_masked_loss``). The counts
#   stay on the client: nothing per class is ever sent to the server.

PRIOR_SOURCES = ("monitor", "local")
FEDRS_SCALING = ("hard", "proportional")


def log_prior(counts: torch.Tensor, min_count: float = 1.0) -> torch.Tensor:
    """log pi_j = log(n_j / sum_k n_k) [Q] with every n_j floored at ``min_count`` (> 0).

    Non-finite or negative counts (a failed estimate) count as ``min_count``; the floor keeps
    log pi finite, so a class the prior has never seen is strongly, not infinitely, adjusted.
    """
    if min_count <= 0:
        raise ValueError(f"min_count must be > 0, got {min_count}")
    n = torch.nan_to_num(counts, nan=0.0, posinf=0.0, neginf=0.0).clamp_min(min_count)
    return n.log() - n.sum(-1, keepdim=True).log()


def logit_adjusted_loss(
    logits: torch.Tensor,
    target: torch.Tensor,
    counts: torch.Tensor,
    tau: float = 1.0,
    min_count: float = 1.0,
    reduction: str = "mean",
    mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """Logit-adjusted softmax cross-entropy (Menon et al., "Long-tail learning via logit adjustment", ICLR 2021).

    l(y, z) = -log( exp(z_y + tau log pi_y) / sum_j exp(z_j + tau log pi_j) ),  pi = n / sum(n)
    (``log_prior`` with the floor ``min_count``); tau = 1 is the paper's default and makes this
    Balanced Softmax. A uniform prior gives exactly CE. ``mask`` [N] keeps the real samples only.
    """
    check_inputs(logits, target, mask, {"counts": counts})
    adjusted = logits + tau * log_prior(counts.to(logits.dtype), min_count)
    return _masked(-_log_p_target(adjusted, target), mask, reduction)


def balanced_softmax_loss(
    logits: torch.Tensor,
    target: torch.Tensor,
    counts: torch.Tensor,
    min_count: float = 1.0,
    reduction: str = "mean",
    mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """Balanced Softmax (Ren et al., "Balanced Meta-Softmax for Long-Tailed Visual Recognition", NeurIPS 2020).

    l(y, z) = -log( n_y exp(z_y) / sum_j n_j exp(z_j) ), the softmax re-weighted by the class
    counts n (floored at ``min_count``), computed as z_y + log n_y - logsumexp_j(z_j + log n_j).
    It equals ``logit_adjusted_loss`` with tau = 1 (tests/test_losses.py checks it).
    """
    check_inputs(logits, target, mask, {"counts": counts})
    log_n = torch.nan_to_num(counts.to(logits.dtype), nan=0.0, posinf=0.0, neginf=0.0).clamp_min(min_count).log()
    shifted = logits + log_n
    log_p = shifted.gather(-1, target.long().unsqueeze(-1)).squeeze(-1) - torch.logsumexp(shifted, dim=-1)
    return _masked(-log_p, mask, reduction)


def fedlc_loss(
    logits: torch.Tensor,
    target: torch.Tensor,
    counts: torch.Tensor,
    tau: float = 1.0,
    min_count: float = 1e-8,
    reduction: str = "mean",
    mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """FedLC's calibrated loss (Zhang et al., "Federated Learning with Label Distribution Skew via Logits Calibration", ICML 2022).

    l(y, z) = -log( exp(z_y - tau n_{c,y}^{-1/4}) / sum_j exp(z_j - tau n_{c,j}^{-1/4}) ), with n_c
    the client's own label counts: the pairwise label margin tau n^{-1/4} pushes the logits of the
    client's rare classes down during local training. A class the client lacks has n = 0, floored at
    ``min_count`` = 1e-8 as the public reference implementations do (FL-bench, fluke), i.e. a margin
    of 100 tau. The denominator runs over all classes, as in those implementations.
    """
    check_inputs(logits, target, mask, {"counts": counts})
    n = torch.nan_to_num(counts.to(logits.dtype), nan=0.0, posinf=0.0, neginf=0.0).clamp_min(min_count)
    return _masked(-_log_p_target(logits - tau * n.pow(-0.25), target), mask, reduction)


def fedrs_scale(counts: torch.Tensor, alpha: float = 0.5, scaling: str = "hard") -> torch.Tensor:
    """FedRS's per-class logit scale s [Q] from a client's label counts n_c.

    ``"hard"`` (the paper): s_k = 1 if n_{c,k} > 0 else alpha. ``"proportional"`` (the authors'
    released code): s_k = alpha + (1 - alpha) n_{c,k} / max_j n_{c,j}, so rare local classes are
    restricted partly and absent ones by alpha.
    """
    if scaling not in FEDRS_SCALING:
        raise ValueError(f"FedRS scaling must be one of {FEDRS_SCALING}, got {scaling!r}")
    n = torch.nan_to_num(counts, nan=0.0, posinf=0.0, neginf=0.0).clamp_min(0.0)
    if scaling == "hard":
        return torch.where(n > 0, torch.ones_like(n), torch.full_like(n, alpha))
    return alpha + (1.0 - alpha) * n / n.max(-1, keepdim=True).values.clamp_min(torch.finfo(n.dtype).tiny)


def fedrs_loss(
    logits: torch.Tensor,
    target: torch.Tensor,
    counts: torch.Tensor,
    alpha: float = 0.5,
    scaling: str = "hard",
    reduction: str = "mean",
    mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """FedRS, restricted softmax (Li & Zhan, "FedRS: Federated Learning with Restricted Softmax for Label Distribution Non-IID Data", KDD 2021).

    l(y, z) = -log( exp(s_y z_y) / sum_j exp(s_j z_j) ), s = ``fedrs_scale(n_c, alpha, scaling)``:
    the logits of the classes missing from the client are scaled by alpha (default 0.5), which
    restricts the update of their last-layer weights. The paper scales the missing classes' weight
    vectors w_k (logit w_k . h); we scale the logit z_k = w_k . h + b_k, i.e. the bias too (our
    classifiers have one); without a bias the two are identical.
    """
    check_inputs(logits, target, mask, {"counts": counts})
    s = fedrs_scale(counts.to(logits.dtype), alpha, scaling)
    return _masked(-_log_p_target(logits * s, target), mask, reduction)


class CountsLoss(Loss):
    """Base of the losses that read per-class counts, kept in the buffer ``counts`` [Q] (default all ones).

    ``receives`` "prior": the engine installs the monitor's estimate with ``set_prior`` every round;
    "client_counts": the engine installs each client's local label counts with ``set_client_counts``
    before it trains (the vectorised path hands each copy its own counts to ``forward_counts`` instead).
    """

    counts: torch.Tensor | None

    def __init__(self, num_classes: int | None = None, counts: torch.Tensor | None = None, reduction: str = "mean") -> None:
        super().__init__(reduction)
        self.num_classes = num_classes
        if counts is None and num_classes is not None:
            counts = torch.ones(num_classes)
        self.register_buffer("counts", None if counts is None else self._validate(counts))

    def _validate(self, counts: torch.Tensor | Any) -> torch.Tensor:
        c = torch.as_tensor(counts, dtype=torch.get_default_dtype()).detach().clone()
        if c.dim() != 1 or (self.num_classes is not None and c.numel() != self.num_classes):
            raise ValueError(f"counts must have shape [{self.num_classes or 'Q'}], got {tuple(c.shape)}")
        return c

    def _set(self, counts: torch.Tensor | Any) -> None:
        c = self._validate(counts)
        self.counts = c if self.counts is None else c.to(self.counts.device)

    def set_prior(self, counts: torch.Tensor | Any) -> None:
        """Install the server's prior: the monitor's estimate of the round's class counts [Q]."""
        if "prior" not in self.receives:
            raise ValueError(f"{type(self).__name__} does not take the monitor's prior (it uses local counts)")
        self._set(counts)

    def set_client_counts(self, counts: torch.Tensor | Any) -> None:
        """Install the training client's own label counts [Q] (stay on the client)."""
        if "client_counts" not in self.receives:
            raise ValueError(f"{type(self).__name__} does not take local counts (it uses the monitor's prior)")
        self._set(counts)

    def _counts(self, logits: torch.Tensor) -> torch.Tensor:
        if self.counts is None:
            return torch.ones(logits.shape[-1], dtype=logits.dtype, device=logits.device)
        return self.counts

    def forward(self, logits: torch.Tensor, target: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        return self.forward_counts(logits, target, self._counts(logits), mask)

    def forward_counts(
        self, logits: torch.Tensor, target: torch.Tensor, counts: torch.Tensor, mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        """The loss with explicit ``counts`` [Q] (the vectorised path passes each copy's own)."""
        raise NotImplementedError


class _ShiftedLogitsLoss(CountsLoss):
    """Base of the losses that shift the logits by tau times a function of class counts floored at ``min_count``."""

    default_min_count = 1.0

    def __init__(
        self,
        tau: float = 1.0,
        min_count: float | None = None,
        num_classes: int | None = None,
        counts: torch.Tensor | None = None,
        reduction: str = "mean",
    ) -> None:
        super().__init__(num_classes, counts, reduction)
        min_count = self.default_min_count if min_count is None else min_count
        if min_count <= 0:
            raise ValueError(f"min_count must be > 0, got {min_count}")
        self.tau = tau
        self.min_count = min_count

    def extra_repr(self) -> str:
        return f"tau={self.tau}, min_count={self.min_count}, reduction={self.reduction!r}"


class LogitAdjustedLoss(_ShiftedLogitsLoss):
    """Module form of ``logit_adjusted_loss`` with the monitor's estimate as the prior pi (``la``).

    The prior is the server's: the monitor's estimate of the previous round's class counts,
    installed by the engine with ``set_prior`` (uniform, i.e. plain CE, in round 0). Counts are
    floored at ``min_count`` (default 1).
    """

    receives = frozenset({"prior"})

    def forward_counts(
        self, logits: torch.Tensor, target: torch.Tensor, counts: torch.Tensor, mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        return logit_adjusted_loss(logits, target, counts, self.tau, self.min_count, self.reduction, mask)


class LogitAdjustedLocalLoss(LogitAdjustedLoss):
    """``la_local``: the logit-adjusted loss with each client's own label counts as pi (the control)."""

    receives = frozenset({"client_counts"})


class BalancedSoftmaxLoss(CountsLoss):
    """Module form of ``balanced_softmax_loss`` with the monitor's estimate as n (``bsm``)."""

    receives = frozenset({"prior"})

    def __init__(
        self,
        min_count: float = 1.0,
        num_classes: int | None = None,
        counts: torch.Tensor | None = None,
        reduction: str = "mean",
    ) -> None:
        super().__init__(num_classes, counts, reduction)
        if min_count <= 0:
            raise ValueError(f"min_count must be > 0, got {min_count}")
        self.min_count = min_count

    def extra_repr(self) -> str:
        return f"min_count={self.min_count}, reduction={self.reduction!r}"

    def forward_counts(
        self, logits: torch.Tensor, target: torch.Tensor, counts: torch.Tensor, mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        return balanced_softmax_loss(logits, target, counts, self.min_count, self.reduction, mask)


class BalancedSoftmaxLocalLoss(BalancedSoftmaxLoss):
    """``bsm_local``: Balanced Softmax with each client's own label counts (the control)."""

    receives = frozenset({"client_counts"})


class FedLCLoss(_ShiftedLogitsLoss):
    """Module form of ``fedlc_loss`` (``fedlc``): local label counts, tau = 1, a missing class counts 1e-8."""

    receives = frozenset({"client_counts"})
    default_min_count = 1e-8

    def forward_counts(
        self, logits: torch.Tensor, target: torch.Tensor, counts: torch.Tensor, mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        return fedlc_loss(logits, target, counts, self.tau, self.min_count, self.reduction, mask)


class FedRSLoss(CountsLoss):
    """Module form of ``fedrs_loss`` (``fedrs``): local label counts, alpha = 0.5, the paper's hard scaling."""

    receives = frozenset({"client_counts"})

    def __init__(
        self,
        alpha: float = 0.5,
        scaling: str = "hard",
        num_classes: int | None = None,
        counts: torch.Tensor | None = None,
        reduction: str = "mean",
    ) -> None:
        super().__init__(num_classes, counts, reduction)
        if not 0.0 <= alpha <= 1.0:
            raise ValueError(f"FedRS alpha must be in [0, 1], got {alpha}")
        if scaling not in FEDRS_SCALING:
            raise ValueError(f"FedRS scaling must be one of {FEDRS_SCALING}, got {scaling!r}")
        self.alpha = alpha
        self.scaling = scaling

    def extra_repr(self) -> str:
        return f"alpha={self.alpha}, scaling={self.scaling!r}, reduction={self.reduction!r}"

    def forward_counts(
        self, logits: torch.Tensor, target: torch.Tensor, counts: torch.Tensor, mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        return fedrs_loss(logits, target, counts, self.alpha, self.scaling, self.reduction, mask)


LOSSES.update(
    {
        "la": LogitAdjustedLoss,
        "la_local": LogitAdjustedLocalLoss,
        "bsm": BalancedSoftmaxLoss,
        "bsm_local": BalancedSoftmaxLocalLoss,
        "fedlc": FedLCLoss,
        "fedrs": FedRSLoss,
    }
)


def receives(loss: nn.Module | type | str) -> frozenset[str]:
    """What a loss (a module, its class or a registered name) takes from the engine: keys of ``FEEDS``."""
    if isinstance(loss, str):
        loss = loss_class(loss)
    return frozenset(getattr(loss, "receives", frozenset()))


def as_sent(loss_fn: nn.Module, num_classes: int) -> nn.Module:
    """A copy of ``loss_fn`` as the server sent it: what it was fed of the monitor (π, prior) kept, a client's own label
    counts (``client_counts``, installed on the module by sequential training) reset to ones: what an estimator may
    read of the round's loss (``estimators.RoundInputs.loss_fn``)."""
    sent = copy.deepcopy(loss_fn)
    if "client_counts" in receives(sent):
        feed(sent, client_counts=torch.ones(num_classes))
    return sent


def feed(loss_fn: nn.Module, **inputs: Any) -> None:
    """Hand ``loss_fn`` what it ``receives`` of ``inputs`` (names of ``FEEDS``); what it does not take is left."""
    unknown = sorted(set(inputs) - set(FEEDS))
    if unknown:
        raise ValueError(f"unknown loss input(s) {unknown}; the engine hands over {sorted(FEEDS)}")
    for name in sorted(receives(loss_fn) & inputs.keys()):
        getattr(loss_fn, FEEDS[name])(inputs[name])

