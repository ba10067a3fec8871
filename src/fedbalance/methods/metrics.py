"""Test metrics of the paper (Ac.M, Ac., AUC, per-class accuracy) and its empirical study of Y.

* Ac.M: mean over the minority classes of the per-class test accuracy; Ac.: the same over the
  other (majority) classes; ``auc_micro``: micro-averaged one-vs-rest ROC AUC of the softmax scores
  over the whole test set (``auc_macro``: the unweighted mean of the per-class one-vs-rest AUCs);
  ``auc_hard``: the same micro AUC of the one-hot *predictions* over the whole test set (the released
  code's "AUC Score New" computes it per batch with Q = 26; which AUC the paper's tables print is not
  established, docs/fidelity.md). For Q classes it equals (1 + acc - (1 - acc) / (Q - 1)) / 2.
* Empirical study (Supplementary "Empirical Study"): within every batch, the pairwise cosine
  similarity and the pairwise products ``Y_i . Y_j`` of the hidden-layer outputs Y of samples of the
  same class.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence

import numpy as np
import torch
from torch import nn

from fedbalance.methods.models import to_float


def _model_device(model: nn.Module) -> torch.device:
    return next(iter(model.state_dict().values())).device


@torch.no_grad()
def predict_proba(model: nn.Module, x: torch.Tensor, batch_size: int = 1024) -> torch.Tensor:
    """Softmax scores [N, Q] (float64, CPU) of ``model`` in eval mode; the model's mode is restored."""
    was_training = model.training
    model.eval()
    device = _model_device(model)
    try:
        out = [torch.softmax(model(to_float(xb.to(device))).double(), dim=1) for xb in x.split(batch_size)]
    finally:
        model.train(was_training)
    return torch.cat(out).cpu()


def _mean_or_none(values: Sequence[float]) -> float | None:
    vals = [v for v in values if not math.isnan(v)]
    return float(np.mean(vals)) if vals else None


def evaluate(
    model: nn.Module,
    x_test: torch.Tensor,
    y_test: torch.Tensor,
    num_classes: int,
    minority_classes: Sequence[int],
    batch_size: int = 1024,
) -> dict[str, object]:
    """Accuracy and AUC of ``model`` on the test set; all values are fractions in [0, 1].

    Returns ``per_class_acc`` (list, NaN for a class absent from the test set), ``acc`` (over all
    samples), ``acc_minority`` (Ac.M), ``acc_majority`` (Ac.), ``auc_micro``, ``auc_macro``, ``auc_hard``.
    ``acc_minority`` is None when there is no minority class. A diverged model (non-finite outputs)
    gets NaN AUCs and a warning; its accuracies are those of its (NaN-first) argmax.
    """
    from sklearn.metrics import roc_auc_score
    from sklearn.preprocessing import label_binarize

    probs = predict_proba(model, x_test, batch_size).numpy()
    finite = bool(np.isfinite(probs).all())
    if not finite:
        warnings.warn("the model's outputs are not finite (training diverged): AUC is NaN", RuntimeWarning, stacklevel=2)
    y = y_test.cpu().numpy().astype(np.int64)
    pred = probs.argmax(1)
    correct = np.bincount(y, weights=(pred == y).astype(np.float64), minlength=num_classes)
    count = np.bincount(y, minlength=num_classes)
    per_class = [float(c / n) if n else math.nan for c, n in zip(correct, count)]
    minority = set(int(c) for c in minority_classes)
    onehot = label_binarize(y, classes=list(range(num_classes))) if num_classes > 2 else np.eye(num_classes)[y]
    present = [q for q in range(num_classes) if 0 < count[q] < len(y)]
    return {
        "per_class_acc": per_class,
        "acc": float((pred == y).mean()),
        "acc_minority": _mean_or_none([per_class[q] for q in sorted(minority)]),
        "acc_majority": _mean_or_none([per_class[q] for q in range(num_classes) if q not in minority]),
        "auc_micro": float(roc_auc_score(onehot, probs, average="micro")) if finite else math.nan,
        "auc_hard": float(roc_auc_score(onehot, np.eye(num_classes)[pred], average="micro")),
        "auc_macro": (float(np.mean([roc_auc_score(onehot[:, q], probs[:, q]) for q in present])) if finite else math.nan)
        if present else None,
    }


@torch.no_grad()
def empirical_y_stats(model: nn.Module, x: torch.Tensor, y: torch.Tensor, batch_size: int = 32) -> dict[str, float | None]:
    """Supplementary "Empirical Study": similarity of the hidden-layer outputs Y within a class.

    ``x`` is cut into consecutive batches of ``batch_size`` (the caller orders it); Y comes from
    ``model.features`` in eval mode. For every (batch, class) with at least two samples:
    ``cos`` = mean pairwise cosine similarity of their Y (0 for a zero vector) and ``cv`` =
    std / mean (population std) of the pairwise products ``Y_i . Y_j`` (i < j; skipped when the
    mean is 0). ``emp_cos`` and ``emp_cv`` are the means over all such (batch, class) groups
    (None when there is none). The batches' statistics stay on the device until the end: two host
    synchronisations in all (the number of classes, the results), not 3-5 per batch.
    """
    if len(y) == 0:
        return {"emp_cos": None, "emp_cv": None}
    was_training = model.training
    model.eval()
    device = _model_device(model)
    q = int(y.max()) + 1
    cos_all, cv_all, has_all, ok_all = [], [], [], []
    try:
        for xb, yb in zip(x.split(batch_size), y.split(batch_size)):
            feats = model.features(to_float(xb.to(device))).double()
            yb = yb.to(device)
            n = len(yb)
            pair = (yb.unsqueeze(0) == yb.unsqueeze(1)) & torch.ones(n, n, dtype=torch.bool, device=device).triu(1)
            prod = feats @ feats.T
            norms = feats.norm(dim=1)
            denom = norms.unsqueeze(0) * norms.unsqueeze(1)
            cos = torch.where(denom > 0, prod / torch.where(denom > 0, denom, torch.ones_like(denom)), torch.zeros_like(prod))
            # every (i, j) in row-major order, the non-pairs adding exact zeros: the sums of a boolean selection, without its sync
            cls = yb.unsqueeze(1).expand(n, n).reshape(-1)
            sel = pair.reshape(-1)
            zero = torch.zeros((), dtype=torch.float64, device=device)
            npairs = torch.zeros(q, dtype=torch.float64, device=device).index_add_(0, cls, sel.double())
            s_cos = torch.zeros_like(npairs).index_add_(0, cls, torch.where(sel, cos.reshape(-1), zero))
            s_m = torch.zeros_like(npairs).index_add_(0, cls, torch.where(sel, prod.reshape(-1), zero))
            mean_all = s_m / npairs.clamp_min(1)
            dev = torch.where(sel, (prod.reshape(-1) - mean_all[cls]) ** 2, zero)
            s_dev = torch.zeros_like(npairs).index_add_(0, cls, dev)
            has = npairs > 0
            cos_all.append(s_cos / npairs)
            cv_all.append((s_dev / npairs).sqrt() / mean_all.abs())
            has_all.append(has)
            ok_all.append(has & (mean_all != 0))
    finally:
        model.train(was_training)
    cos, cv, has, ok = torch.stack([torch.cat(v).double() for v in (cos_all, cv_all, has_all, ok_all)]).cpu()
    cos_cat, cv_cat = cos[has.bool()], cv[ok.bool()]
    return {
        "emp_cos": float(cos_cat.mean()) if len(cos_cat) else None,
        "emp_cv": float(cv_cat.mean()) if len(cv_cat) else None,
    }
