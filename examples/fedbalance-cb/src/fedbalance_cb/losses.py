"""Class-balanced loss (Cui, Jia, Lin, Song, Belongie, "Class-Balanced Loss Based on Effective Number of Samples",
CVPR 2019), softmax cross-entropy form, as a fedbalance plug-in loss.

The effective number of n samples of a class is E_n = (1 - beta^n) / (1 - beta) (the paper's Eq. 3); the class weight
is alpha_y proportional to 1 / E_{n_y}, normalised so that the Q weights sum to Q (its Eq. 4 and the text after it);
the loss of a sample of class y is -alpha_y log softmax(z)_y (its Eq. 5 with the softmax cross-entropy). beta = 0 gives
every class weight 1 (plain cross-entropy); beta -> 1 gives weights inversely proportional to the class counts.

Which counts n: ``ClassBalancedLoss`` (``cb``) takes the server's estimate of the round's class counts, the monitor's
(``receives = {"prior"}``, as the logit-adjusted loss ``la``); ``ClassBalancedLocalLoss`` (``cb_local``) each
client's own label counts (``receives = {"client_counts"}``).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from fedbalance.methods.losses import CountsLoss


def effective_number(counts: torch.Tensor, beta: float) -> torch.Tensor:
    """E_n = (1 - beta^n) / (1 - beta) per class (Cui et al., Eq. 3), beta in [0, 1); 1 for every class at beta = 0."""
    if beta == 0.0:
        return torch.ones_like(counts)
    return -torch.expm1(counts * math.log(beta)) / (1.0 - beta)


def class_balanced_weights(counts: torch.Tensor, beta: float = 0.999, min_count: float = 1.0) -> torch.Tensor:
    """alpha [Q]: 1 / E_n per class, normalised to sum to Q; counts floored at ``min_count`` (a class never seen
    counts as that many samples)."""
    n = torch.nan_to_num(counts, nan=0.0, posinf=0.0, neginf=0.0).clamp_min(min_count)
    inverse = 1.0 / effective_number(n, beta)
    return inverse * n.shape[-1] / inverse.sum(-1, keepdim=True)


def class_balanced_loss(
    logits: torch.Tensor,
    target: torch.Tensor,
    counts: torch.Tensor,
    beta: float = 0.999,
    min_count: float = 1.0,
    reduction: str = "mean",
    mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """-alpha_y log softmax(z)_y per sample; 'mean' divides the sum by the number of (real) samples, as Cui et al.'s
    code does, not by the weights' sum. ``mask`` [N]: 1 for a real sample, 0 for padding (the vectorised path)."""
    alpha = class_balanced_weights(counts.to(logits.dtype), beta, min_count)
    log_p = F.log_softmax(logits, dim=-1).gather(-1, target.long().unsqueeze(-1)).squeeze(-1)
    per_sample = -alpha.gather(-1, target.long()) * log_p
    real = torch.ones_like(per_sample) if mask is None else mask.to(per_sample.dtype)
    per_sample = per_sample * real
    if reduction == "none":
        return per_sample
    if reduction == "sum":
        return per_sample.sum()
    return per_sample.sum() / real.sum().clamp_min(1.0)


class ClassBalancedLoss(CountsLoss):
    """``cb``: the class-balanced loss with the monitor's estimate of the round's class counts (uniform in round 0)."""

    receives = frozenset({"prior"})

    def __init__(self, beta: float = 0.999, min_count: float = 1.0, num_classes: int | None = None,
                 counts: torch.Tensor | None = None, reduction: str = "mean") -> None:
        super().__init__(num_classes, counts, reduction)
        if not 0.0 <= beta < 1.0:
            raise ValueError(f"beta must be in [0, 1), got {beta}")
        if min_count <= 0:
            raise ValueError(f"min_count must be > 0, got {min_count}")
        self.beta = beta
        self.min_count = min_count

    def extra_repr(self) -> str:
        return f"beta={self.beta}, min_count={self.min_count}, reduction={self.reduction!r}"

    def forward_counts(self, logits: torch.Tensor, target: torch.Tensor, counts: torch.Tensor,
                       mask: torch.Tensor | None = None) -> torch.Tensor:
        return class_balanced_loss(logits, target, counts, self.beta, self.min_count, self.reduction, mask)


class ClassBalancedLocalLoss(ClassBalancedLoss):
    """``cb_local``: the class-balanced loss with each client's own label counts."""

    receives = frozenset({"client_counts"})
