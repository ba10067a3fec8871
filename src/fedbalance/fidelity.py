"""Regenerated loss-comparison cells beside the published ones: final round, mean of the last rounds, best.

The paper's tables report one number per cell; the released code evaluates the global model once,
after the last round (``main_nn.py``: ``test_img`` after the training loop), so the comparable
number is the final round's. Because single runs move by several points between late rounds,
``fidelity_frame`` also gives the mean of the last ``last`` rounds and the best round.
"""

from __future__ import annotations

from collections.abc import Mapping

import pandas as pd

from fedbalance.presentation.names import GAMMAS, gamma_setting
from fedbalance.presentation.tables import published

TABLE_OF = {"mnist": "Res_3_datasets", "cifar10": "Res_3_datasets", "fer2013": "Res_3_datasets", "femnist": "FL_FEMNIST"}
COLUMNS = [
    "dataset", "setting", "loss", "seeds", "acm_final", "acm_last", "acm_best", "best_round", "paper_acm",
    "auc_final", "auc_last", "paper_auc", "auc_micro_final", "wall_time_min",
]


def fidelity_frame(
    final: pd.DataFrame,
    rounds: pd.DataFrame,
    *,
    experiment: str = "losses",
    last: int = 5,
    base: Mapping[str, str] | None = None,
    pub: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """One row per (dataset, setting, loss) of ``experiment``: Ac.M (%) and AUC (hard, the paper's) beside the paper's.

    ``final``/``rounds`` are ``fedbalance.aggregate`` frames; values are means over seeds. ``base``
    maps a loss variant (e.g. ``ratio_rel``) to the loss whose published number it is compared
    with. ``best_round`` is the round (0-based) of the best mean Ac.M.
    """
    base = dict(base or {})
    pub = published() if pub is None else pub
    column = {gamma_setting(g): label for label, g in GAMMAS}
    f = final[final.experiment == experiment]
    r = rounds[rounds.experiment == experiment]
    out = []
    for (d, s, loss), grp in f.groupby(["dataset", "setting", "loss"], sort=True):
        rr = r[(r.dataset == d) & (r.setting == s) & (r.loss == loss)]
        per_round = rr.groupby("round")[["acc_minority", "auc_hard"]].mean().sort_index()
        tail = per_round.tail(last)
        key = (TABLE_OF.get(d), d, column.get(s), base.get(loss, loss))
        paper = {m: pub[(pub.table == key[0]) & (pub.metric == m) & (pub.dataset == d) & (pub.column == key[2])
                        & (pub.row == key[3])].value for m in ("acm", "auc")}
        out.append({
            "dataset": d, "setting": s, "loss": loss, "seeds": len(grp),
            "acm_final": 100 * grp.acc_minority.mean(), "acm_last": 100 * tail.acc_minority.mean(),
            "acm_best": 100 * per_round.acc_minority.max(), "best_round": int(per_round.acc_minority.idxmax()),
            "paper_acm": float(paper["acm"].iloc[0]) if len(paper["acm"]) else float("nan"),
            "auc_final": grp.auc_hard.mean(), "auc_last": tail.auc_hard.mean(),
            "paper_auc": float(paper["auc"].iloc[0]) if len(paper["auc"]) else float("nan"),
            "auc_micro_final": grp.auc_micro.mean(), "wall_time_min": grp.wall_time_s.mean() / 60,
        })
    return pd.DataFrame(out, columns=COLUMNS)


def fidelity_markdown(frame: pd.DataFrame) -> str:
    """The frame as a Markdown table (Ac.M in %, two decimals; AUC four)."""
    head = ("| dataset | Γ | loss | seeds | Ac.M final | Ac.M last 5 | Ac.M best (round) | paper Ac.M | "
            "AUC final | AUC last 5 | paper AUC | score AUC | min/job |")
    lines = [head, "|" + "---|" * 13]
    for row in frame.itertuples(index=False):
        lines.append(
            f"| {row.dataset} | {row.setting} | {row.loss} | {row.seeds} | {row.acm_final:.2f} | {row.acm_last:.2f} | "
            f"{row.acm_best:.2f} ({row.best_round}) | {row.paper_acm:.2f} | {row.auc_final:.4f} | {row.auc_last:.4f} | "
            f"{row.paper_auc:.4f} | {row.auc_micro_final:.4f} | {row.wall_time_min:.1f} |"
        )
    return "\n".join(lines) + "\n"
