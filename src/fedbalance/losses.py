"""The paper's Ratio Loss and its competitors: CE, Focal, GHM-C, MSE and MFE.

Each loss is a ``torch.nn.functional``-style function plus an ``nn.Module`` with torch-style
``reduction`` ('mean' | 'sum' | 'none'). Inputs are logits [N, Q] and integer targets [N].
Everything is computed from ``log_softmax`` (stable for logits of +-1e4) and is vmap-safe:
one-hot encodings are comparisons with ``arange``, lookups are ``gather``, there is no boolean
indexing, no ``.item()`` and no data-dependent shape.
"""

from __future__ import annotations

import inspect
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

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


def _one_hot(index: torch.Tensor, num: int, dtype: torch.dtype) -> torch.Tensor:
    """One-hot [N, num] of ``index`` [N] by comparison with arange (vmap-safe, unlike F.one_hot)."""
    return (index.unsqueeze(-1) == torch.arange(num, device=index.device)).to(dtype)


def _log_p_target(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """log softmax(z)_y per sample, shape [N]."""
    return F.log_softmax(logits, dim=-1).gather(-1, target.long().unsqueeze(-1)).squeeze(-1)


def cross_entropy(logits: torch.Tensor, target: torch.Tensor, reduction: str = "mean") -> torch.Tensor:
    """CrossEntropy Loss, paper Eq. L_CE = -p . log(S): per sample -log softmax(z)_y."""
    return _reduce(-_log_p_target(logits, target), reduction)


def focal_loss(
    logits: torch.Tensor,
    target: torch.Tensor,
    gamma: float = 2.0,
    alpha: float = 1.0,
    reduction: str = "mean",
) -> torch.Tensor:
    """Focal Loss (Lin et al. 2017), multi-class softmax form: -alpha (1 - p_t)^gamma log p_t.

    ``1 - p_t`` is computed as ``-expm1(log p_t)`` and floored at the smallest positive float so
    that gamma in (0, 1) has finite gradients at p_t = 1; gamma = 0 is exactly ``alpha * CE``.
    """
    log_pt = _log_p_target(logits, target)
    one_minus_pt = (-torch.expm1(log_pt)).clamp_min(torch.finfo(log_pt.dtype).tiny)
    return _reduce(-alpha * one_minus_pt.pow(gamma) * log_pt, reduction)


GHM_G = ("softmax", "sigmoid")
RATIO_WEIGHTING = ("per_sample", "batch_mean")


def ghm_gradient_norm(logits: torch.Tensor, target: torch.Tensor, g: str = "softmax") -> torch.Tensor:
    """GHM-C's gradient norm g per sample [N], detached.

    ``"softmax"``: g = 1 - softmax(z)_y, the norm of the multi-class CE gradient w.r.t. the target
    logit. ``"sigmoid"``: g = 1 - sigmoid(z_y), as the authors' released GHMC computes it
    (``FEMNIST-4-Losses/models/Update.py``: ``|pred.sigmoid() - target|`` on the target class).
    """
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
    idx = ghm_bin_index(ghm_gradient_norm(logits, target, g), bins)
    m = torch.ones(idx.shape[-1], dtype=logits.dtype, device=logits.device) if mask is None else mask.to(logits.dtype)
    counts = (_one_hot(idx, bins, logits.dtype) * m.unsqueeze(-1)).sum(0)
    nonempty = (counts > 0).to(logits.dtype).sum()
    return m.sum() / (counts.gather(0, idx).clamp_min(1.0) * nonempty.clamp_min(1.0))


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

    pi = 1 is exactly CE in both readings. ``mask`` [N] restricts everything to the real samples.
    """
    if weighting not in RATIO_WEIGHTING:
        raise ValueError(f"ratio weighting must be one of {RATIO_WEIGHTING}, got {weighting!r}")
    pi = weight.to(logits.dtype).gather(-1, target.long())
    if weighting == "batch_mean":
        m = torch.ones_like(pi) if mask is None else mask.to(pi.dtype)
        pi = ((pi * m).sum() / m.sum().clamp_min(1.0)).expand_as(pi)
    return _masked(-pi * _log_p_target(logits, target), mask, reduction)


def _squared_errors(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """e_i = sum_k (softmax(z_i)_k - onehot(y_i)_k)^2, shape [N]."""
    prob = F.log_softmax(logits, dim=-1).exp()
    return (prob - _one_hot(target.long(), logits.shape[-1], prob.dtype)).pow(2).sum(-1)


def mse_loss(logits: torch.Tensor, target: torch.Tensor, reduction: str = "mean") -> torch.Tensor:
    """Mean-Square-Error Loss L_MSE on softmax vs one-hot: per sample e_i = sum_k (S_ik - onehot_ik)^2."""
    return _reduce(_squared_errors(logits, target), reduction)


def mfe_loss(
    logits: torch.Tensor,
    target: torch.Tensor,
    num_classes: int | None = None,
    reduction: str = "sum",
) -> torch.Tensor:
    """Mean False Error L_MFE (Wang et al. 2016), multi-class: sum over present classes c of mean_{y_i = c} e_i.

    e_i is ``mse_loss``'s per-sample error (Wang et al.'s constant 1/2 dropped). Every class present
    in the batch -- on a client, its local classes -- counts equally. 'none' gives e_i / n_{y_i}
    (summing to the MFE), 'sum' the MFE, 'mean' the MFE / number of classes present.
    """
    _check_reduction(reduction)
    q = logits.shape[-1]
    if num_classes is not None and num_classes != q:
        raise ValueError(f"num_classes={num_classes} but logits have {q} classes")
    onehot = _one_hot(target.long(), q, logits.dtype)
    counts = onehot.sum(0)
    per_sample = _squared_errors(logits, target) / counts.gather(0, target.long())
    if reduction == "none":
        return per_sample
    total = per_sample.sum()
    if reduction == "sum":
        return total
    return total / (counts > 0).to(logits.dtype).sum()


class _Loss(nn.Module):
    """Base: validates and stores ``reduction``."""

    def __init__(self, reduction: str = "mean") -> None:
        super().__init__()
        _check_reduction(reduction)
        self.reduction = reduction

    def extra_repr(self) -> str:
        return f"reduction={self.reduction!r}"


class CrossEntropyLoss(_Loss):
    """Module form of ``cross_entropy``."""

    def forward(self, logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return cross_entropy(logits, target, self.reduction)


class FocalLoss(_Loss):
    """Module form of ``focal_loss`` (paper's competitor: gamma = 2, alpha = 1)."""

    def __init__(self, gamma: float = 2.0, alpha: float = 1.0, reduction: str = "mean") -> None:
        super().__init__(reduction)
        self.gamma = gamma
        self.alpha = alpha

    def forward(self, logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return focal_loss(logits, target, self.gamma, self.alpha, self.reduction)


class GHMCLoss(_Loss):
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


class RatioLoss(_Loss):
    """Module form of ``ratio_loss``; the per-class weights pi live in the buffer ``weight``.

    ``weighting``: ``"per_sample"`` (the paper's equation) or ``"batch_mean"`` (the released code).
    ``weight=None`` means all ones (plain CE: round 0 of the paper); ``set_weight`` installs the
    monitor's pi for the next round.
    """

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


class MSELoss(_Loss):
    """Module form of ``mse_loss``."""

    def forward(self, logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return mse_loss(logits, target, self.reduction)


class MFELoss(_Loss):
    """Module form of ``mfe_loss`` (default reduction 'sum' = the MFE)."""

    def __init__(self, num_classes: int | None = None, reduction: str = "sum") -> None:
        super().__init__(reduction)
        self.num_classes = num_classes

    def forward(self, logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return mfe_loss(logits, target, self.num_classes, self.reduction)


LOSSES: dict[str, type[nn.Module]] = {
    "ce": CrossEntropyLoss,
    "focal": FocalLoss,
    "ghmc": GHMCLoss,
    "ratio": RatioLoss,
    "mse": MSELoss,
    "mfe": MFELoss,
}


def get_loss(name: str, num_classes: int, **params: Any) -> nn.Module:
    """Build a loss by name; ``num_classes`` is passed to the losses that take it.

    Raises ValueError naming an unknown loss or an unknown parameter.
    """
    if name not in LOSSES:
        raise ValueError(f"unknown loss {name!r}; available: {sorted(LOSSES)}")
    cls = LOSSES[name]
    accepted = [p for p in inspect.signature(cls.__init__).parameters if p != "self"]
    unknown = sorted(set(params) - set(accepted))
    if unknown:
        raise ValueError(f"unknown parameter(s) {unknown} for loss {name!r}; accepted: {accepted}")
    if "num_classes" in accepted:
        params["num_classes"] = num_classes
    return cls(**params)
