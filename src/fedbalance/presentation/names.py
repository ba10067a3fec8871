"""Display names shared by the tables, the figures, the claims and the docs: datasets, Γ levels, loss lists, the one
name of each loss and estimator."""

from __future__ import annotations

from dataclasses import dataclass

from fedbalance.common.records import ESTIMATORS as RECORDED
from fedbalance.common.records import UNIFORM, setting_name

DATASETS: tuple[str, ...] = ("mnist", "cifar10", "fer2013", "femnist")
"""The paper's datasets, in the order its tables and figures show them."""

DATASET_NAME = {"mnist": "MNIST", "cifar10": "CIFAR10", "fer2013": "Fer2013", "femnist": "FEMNIST"}

GAMMAS: tuple[tuple[str, int], ...] = (("B.", 1), ("10:1", 10), ("20:1", 20), ("50:1", 50), ("100:1", 100))
"""(printed label, Γ) of the global-imbalance levels, balanced first."""

ESTIMATORS: tuple[str, ...] = (*RECORDED, UNIFORM)
"""Every recorded composition estimator and the uniform guess."""

FOUR_LOSSES: tuple[str, ...] = ("ce", "focal", "ghmc", "ratio")
"""The paper's loss comparison."""

READINGS: tuple[str, ...] = ("ratio", "ratio_rel")
"""The two readings of the Ratio Loss a study can run: the paper's equation (``ratio``) and the released code's
(``ratio_rel``, the code the published numbers came from); each claim about the Ratio Loss is judged for each."""

READING_NAME = {"ratio": "paper reading", "ratio_rel": "released reading"}
"""How the tables, claims and pages name each reading of the Ratio Loss (``READINGS``)."""

BEYOND_LOSSES: tuple[str, ...] = ("ce", "ratio", "ratio_median", "la", "la_local", "fedlc", "fedrs")
"""The beyond-the-paper comparison (experiment family ``beyond``)."""

LOSS_NAME = {
    "ce": "CE", "focal": "Focal", "ghmc": "GHM-C", "ratio": "Ratio", "ratio_rel": "Ratio, released code",
    "ratio_median": "Ratio, median Ra", "mse": "MSE", "mfe": "MFE",
    "la": "LA, monitor prior", "la_local": "LA, local prior",
    "bsm": "Balanced Softmax, monitor prior", "bsm_local": "Balanced Softmax, local prior",
    "fedlc": "FedLC", "fedrs": "FedRS",
}
"""The one display name of each built-in loss: in the tables (HTML and LaTeX), the figures, the claims' evidence and
the docs' prose (a plug-in loss: its config name, ``loss_name``)."""

ESTIMATOR_NAME = {**{e: e for e in RECORDED}, UNIFORM: "uniform guess N/Q"}
"""The one display name of each composition estimator (its config name) and of the uniform guess."""


def loss_name(loss: str) -> str:
    """A loss's display name (``LOSS_NAME``; a plug-in's: its config name)."""
    return LOSS_NAME.get(loss, loss)


def estimator_name(estimator: str) -> str:
    """An estimator's display name (``ESTIMATOR_NAME``; a plug-in's: its config name)."""
    return ESTIMATOR_NAME.get(estimator, estimator)


TEX_ESCAPES = {"\\": r"\textbackslash{}", "{": r"\{", "}": r"\}", "_": r"\_", "%": r"\%", "&": r"\&", "#": r"\#",
               "$": r"\$", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}", "Γ": r"$\Gamma$", "α": r"$\alpha$",
               "β": r"$\beta$", "–": "--"}


def tex_escape(text: str) -> str:
    """Plain text as LaTeX text (a display name, the study's config path, dataset names: ``_``, ``%``, ``&``, braces,
    Γ, ...)."""
    return "".join(TEX_ESCAPES.get(ch, ch) for ch in text)


LOSS_LABEL = {loss: tex_escape(name) for loss, name in LOSS_NAME.items()}
"""``LOSS_NAME`` as LaTeX, for the tables."""


METRIC_RANGE = {"acm": (0.0, 100.0), "acc_majority": (0.0, 100.0), "auc": (0.0, 1.0), "cs": (0.0, 1.0),
                "cs_mean": (0.0, 1.0), "cs_var": (0.0, float("inf"))}
"""The range of each table metric in its printed units (accuracies in %, AUC and CS as fractions, a variance >= 0):
an interval of it is reported inside it (``fedbalance.evidence.seedstats.ranged_interval``; the CS variance on the log scale)."""

PLAIN_METRIC = {"acm": "Ac.M", "auc": "AUC", "acc_majority": "Ac.", "cs": "CS", "cs_mean": "mean CS",
                "cs_var": "CS variance"}
"""Plain name of each table metric in prose (claims, the reproduction summary)."""


def gamma_setting(gamma: int) -> str:
    """The setting name of global imbalance Γ in the loss experiments ("g10")."""
    return setting_name(("g", gamma))


@dataclass(frozen=True)
class Read:
    """Jobs a table cell, figure or claim reads: an experiment and, where given, a dataset, setting and loss.

    ``None`` matches any value; ``by`` names the reader (a table label, a figure name, "claims").
    """

    experiment: str
    dataset: str | None = None
    setting: str | None = None
    loss: str | None = None
    by: str = ""

    def matches(self, experiment: str, dataset: str, setting: str, loss: str) -> bool:
        """Whether the job (experiment, dataset, setting, loss) is one this read takes."""
        return (experiment == self.experiment and self.dataset in (None, dataset)
                and self.setting in (None, setting) and self.loss in (None, loss))
