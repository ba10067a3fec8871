"""metrics: accuracy/AUC against hand-computed values, empirical Y statistics against numpy loops."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch
from torch import nn

from fedbalance.methods.metrics import empirical_y_stats, evaluate


class FixedLogits(nn.Module):
    """Returns preset logits row by row (x holds the row index); features = |logits|."""

    def __init__(self, logits: torch.Tensor) -> None:
        super().__init__()
        self.register_buffer("logits", logits)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        return self.logits[x.reshape(len(x), -1)[:, 0].long()].abs()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.logits[x.reshape(len(x), -1)[:, 0].long()]


def _ids(n: int) -> torch.Tensor:
    return torch.arange(n, dtype=torch.float32).reshape(n, 1, 1, 1)


def test_evaluate_hand_values():
    # 3 classes, 6 samples; predictions: 0->0, 0->1, 1->1, 1->1, 2->0, 2->2
    logits = torch.tensor(
        [[3.0, 0, 0], [0, 2.0, 0], [0, 4.0, 0], [0, 1.0, 0.5], [2.0, 0, 1.0], [0, 0, 5.0]]
    )
    y = torch.tensor([0, 0, 1, 1, 2, 2])
    m = evaluate(FixedLogits(logits), _ids(6), y, 3, minority_classes=[2], batch_size=4)
    assert m["per_class_acc"] == pytest.approx([0.5, 1.0, 0.5])
    assert m["acc"] == pytest.approx(4 / 6)
    assert m["acc_minority"] == pytest.approx(0.5)
    assert m["acc_majority"] == pytest.approx(0.75)
    # micro AUC by hand: all 18 (sample, class) scores, positives are the 6 true-class scores
    p = torch.softmax(logits.double(), 1).numpy()
    onehot = np.eye(3)[y.numpy()]
    pos, neg = p[onehot == 1], p[onehot == 0]
    auc = np.mean([(a > b) + 0.5 * (a == b) for a in pos for b in neg])
    assert m["auc_micro"] == pytest.approx(auc)
    per = []
    for q in range(3):
        pq, nq = p[onehot[:, q] == 1, q], p[onehot[:, q] == 0, q]
        per.append(np.mean([(a > b) + 0.5 * (a == b) for a in pq for b in nq]))
    assert m["auc_macro"] == pytest.approx(np.mean(per))
    assert all(0 <= m[k] <= 1 for k in ("acc", "acc_minority", "acc_majority", "auc_micro", "auc_macro"))
    # the released code's "AUC Score New": micro AUC of the one-hot predictions, by pair counting
    hard = np.eye(3)[np.array([0, 1, 1, 1, 0, 2])]
    hpos, hneg = hard[onehot == 1], hard[onehot == 0]
    assert m["auc_hard"] == pytest.approx(np.mean([(a > b) + 0.5 * (a == b) for a in hpos for b in hneg]))
    # ... which is (1 + acc - (1 - acc) / (Q - 1)) / 2
    assert m["auc_hard"] == pytest.approx((1 + 4 / 6 - (2 / 6) / 2) / 2)


def test_evaluate_no_minority_and_mode_restored():
    logits = torch.eye(3)[[0, 1, 2, 0]] * 2
    model = FixedLogits(logits).train()
    m = evaluate(model, _ids(4), torch.tensor([0, 1, 2, 1]), 3, minority_classes=[])
    assert m["acc_minority"] is None
    assert m["acc_majority"] == pytest.approx((1 + 0.5 + 1) / 3)
    assert model.training


def _reference_stats(feats: np.ndarray, y: np.ndarray, bs: int) -> tuple[float, float]:
    coss, cvs = [], []
    for s in range(0, len(y), bs):
        f, yb = feats[s : s + bs], y[s : s + bs]
        for c in np.unique(yb):
            rows = f[yb == c]
            if len(rows) < 2:
                continue
            pairs = list(itertools.combinations(range(len(rows)), 2))
            cos = [rows[i] @ rows[j] / (np.linalg.norm(rows[i]) * np.linalg.norm(rows[j])) for i, j in pairs]
            prods = np.array([rows[i] @ rows[j] for i, j in pairs])
            coss.append(np.mean(cos))
            cvs.append(prods.std() / prods.mean())
    return float(np.mean(coss)), float(np.mean(cvs))


def test_empirical_y_stats_matches_numpy():
    g = torch.Generator().manual_seed(0)
    feats = torch.rand(23, 5, generator=g) + 0.05
    y = torch.randint(0, 3, (23,), generator=g)
    y[0] = 2
    model = FixedLogits(feats)
    out = empirical_y_stats(model, _ids(23), y, batch_size=8)
    cos, cv = _reference_stats(feats.double().numpy(), y.numpy(), 8)
    assert out["emp_cos"] == pytest.approx(cos, rel=1e-9)
    assert out["emp_cv"] == pytest.approx(cv, rel=1e-9)


def test_empirical_identical_vectors():
    feats = torch.tensor([[1.0, 2.0]] * 4 + [[3.0, 0.0]] * 2)
    y = torch.tensor([0, 0, 0, 0, 1, 1])
    out = empirical_y_stats(FixedLogits(feats), _ids(6), y, batch_size=6)
    assert out["emp_cos"] == pytest.approx(1.0)
    assert out["emp_cv"] == pytest.approx(0.0, abs=1e-12)
    none = empirical_y_stats(FixedLogits(feats), _ids(6), torch.arange(6), batch_size=6)
    assert none["emp_cos"] is None and none["emp_cv"] is None
    assert not math.isnan(out["emp_cos"])


def test_diverged_model_gets_nan_auc_not_an_error() -> None:
    class NaNModel(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(4, 3)
            nn.init.constant_(self.fc.weight, float("nan"))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.fc(x.flatten(1))

    x = torch.zeros(6, 1, 2, 2, dtype=torch.uint8)
    y = torch.tensor([0, 1, 2, 0, 1, 2])
    with pytest.warns(RuntimeWarning, match="diverged"):
        out = evaluate(NaNModel(), x, y, 3, [2])
    assert math.isnan(out["auc_micro"]) and math.isnan(out["auc_macro"])
    assert out["acc"] == pytest.approx(2 / 6)
