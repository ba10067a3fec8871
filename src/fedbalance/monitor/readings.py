"""The Ratio Loss as other code reads it: each independent implementation's class weights π from one round.

Since the paper appeared, other researchers' code has run its Ratio Loss as a baseline, each reading the equations its
own way (docs/deviations.md, "The Ratio Loss as other code reads it", cites the repository, commit and file of each).
A reading here is one registry entry (``READINGS``, one ``@reading`` line): its name (a ``monitor.variant``, listed in
``fedbalance.monitor.monitor.READING_VARIANTS``), where it was read, how its π enters the loss (``weighting``, a
``RatioLoss`` weighting) and one function of what the project's monitor sees in a round (``Round``: the monitor with
its auxiliary data and settings, G_t, G_{t+1}'s state, the per-class copies' dW and the round's generator) returning
(R, π). Each is written here from the reading, not copied. The project's own readings, ``paper`` (``ratio``) and
``released`` (``ratio_rel``), read dW alone (``Monitor.weights``); ``round_weights`` is what the run calls for either.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Protocol

import torch
from torch import Tensor, nn

from fedbalance.methods.losses import RATIO_WEIGHTING
from fedbalance.monitor.monitor import (
    READING_VARIANTS,
    Monitor,
    aux_updates,
    class_gradients,
    class_ratios,
    ratio_weights,
    unit_ratios,
)


class Round(Protocol):
    """What a reading reads of a round (``fedbalance.monitor.estimators.RoundInputs`` is one)."""

    monitor: Monitor
    model_t: nn.Module
    state_t1: dict[str, Tensor]
    generator: torch.Generator

    @property
    def dW(self) -> Tensor: ...


@dataclass(frozen=True)
class Reading:
    """One implementation's Ratio Loss: ``fn(round)`` -> (R [Q], π [Q]), float64; ``weighting`` how π enters its loss;
    ``source`` the repository, commit and file it was read from; ``equals`` the project's loss its π and loss amount
    to, where they do ("" where its own)."""

    name: str
    fn: Callable[[Round], tuple[Tensor, Tensor]]
    source: str
    weighting: str
    equals: str = ""


READINGS: dict[str, Reading] = {}


def reading(name: str, *, source: str, weighting: str, equals: str = "") -> Callable:
    """Register ``fn`` as the reading ``name`` (one line above each reading's function)."""
    if name not in READING_VARIANTS or weighting not in RATIO_WEIGHTING:
        raise ValueError(f"reading {name!r}: the name must be one of {READING_VARIANTS} and the weighting one of "
                         f"{RATIO_WEIGHTING}, got {weighting!r}")

    def register(fn: Callable[[Round], tuple[Tensor, Tensor]]) -> Callable[[Round], tuple[Tensor, Tensor]]:
        READINGS[name] = Reading(name, fn, source, weighting, equals)
        return fn

    return register


def signed_mean_ratios(g: Tensor) -> Tensor:
    """Eq. (ratio) signed, averaged over every unit of row p, then its absolute value (CLIMB's reading):
    Ra_p = |mean_i (Q-1) g^p_{p,i} / (Σ_j g^j_{p,i} - g^p_{p,i})|, ``g`` [Q, Q, s], shape [Q], float64.

    No threshold T_Ra, no clip. A unit whose ratio is not finite (0/0 at a unit no auxiliary sample activates, x/0)
    is left out of the mean (ours: the code's mean would be NaN or infinite); a row with none left gives 0.
    """
    ra = unit_ratios(g.double(), signed=True)
    finite = torch.isfinite(ra)
    return (torch.where(finite, ra, torch.zeros_like(ra)).sum(1) / finite.sum(1).clamp_min(1)).abs()


def model_at(model: nn.Module, state: dict[str, Tensor]) -> nn.Module:
    """A copy of ``model`` holding ``state`` (``model`` is unchanged)."""
    out = copy.deepcopy(model)
    out.load_state_dict(state)
    return out


@reading("redgrape", weighting="batch_mean", equals="ratio_rel",
         source="keven980716/Federated_Learning_Experiments@1f0c493 "
                "FedNLP/FedML/fedml_api/distributed/fedavg_imb/FedAVGAggregator.py (server_update, outlier_detect, "
                "search_neuron_new, whole_determination); .../standalone/fedavg/my_model_trainer_imb_classification.py "
                "(ratio_loss)")
def redgrape(r: Round) -> tuple[Tensor, Tensor]:
    """The released code's Ra_p (owner filter, ratio of sums, 10 at a zero denominator, clip) on copies of G_t trained
    one epoch each, with the clients' lr, momentum and batch size and no weight decay; π = α + β Ra_p."""
    m = r.monitor
    dW = aux_updates(r.model_t, m.aux_x, m.aux_y, m.num_classes, replace(m.cfg, epochs=1, weight_decay=0.0),
                     r.generator, path=m.path)
    ra = class_ratios(dW, variant="released", clip=m.clip)
    return ra, ratio_weights(ra, alpha=m.alpha, beta=m.beta)


@reading("climb", weighting="normalised",
         source="shenzebang/Federated-Learning-Pytorch@c841a4d core/ratio_loss_fl.py (compute_Ra_p, RatioLossFL.step)")
def climb(r: Round) -> tuple[Tensor, Tensor]:
    """``signed_mean_ratios`` of the per-class mean CE gradients of the last layer's weights (one gradient, no step) at
    the model the weighted round starts from, G_{t+1}; π = α + β Ra_p, no clip."""
    m = r.monitor
    g = class_gradients(model_at(r.model_t, r.state_t1), m.aux_x, m.aux_y, m.num_classes)[:, :, :-1]
    ra = signed_mean_ratios(g)
    return ra, ratio_weights(ra, alpha=m.alpha, beta=m.beta)


def unweighted(r: Round) -> tuple[Tensor, Tensor]:
    """No Ra at all: the loss is built with its weights left at their default, π = 1 for every class (R reported 0)."""
    q = r.monitor.num_classes
    return torch.zeros(q, dtype=torch.float64), torch.ones(q, dtype=torch.float64)


reading("fedloge", weighting="per_sample", equals="ce",
        source="ZackZikaiXiao/FedLoGe@f4cac52 util/update_baseline.py (update_weights_ratio_loss: "
               "Ratio_Cross_Entropy(..., alpha=None, size_average=True)), util/losses.py")(unweighted)
reading("flower", weighting="per_sample", equals="ce",
        source="liul4/Federated_Learning@497b32f Ratio_Loss/imbalanced/net.py (train: RatioLoss(class_num=3, "
               "alpha=None), summed over the batch, Adam), Ratio_Loss/imbalanced/loss.py")(unweighted)


def round_weights(r: Round) -> tuple[Tensor, Tensor]:
    """(R, π) of the round for the monitor's variant: a reading's from the round, the project's own from dW."""
    entry = READINGS.get(r.monitor.variant)
    return r.monitor.weights(r.dW) if entry is None else entry.fn(r)


__all__ = ["READINGS", "Reading", "Round", "model_at", "reading", "round_weights", "signed_mean_ratios"]
