"""``ema``: a composition estimator that smooths the ``released`` estimator's shares over the rounds.

Round t's estimate is m_t x N_t, with N_t the selected clients' total and m_t the shares smoothed exponentially:
m_0 = s_0, m_t = decay m_{t-1} + (1 - decay) s_t, s_t the ``released`` estimate's shares of round t (negative counts
read as 0). A history estimator (``history=True``) reading the track of every round so far.
"""

from __future__ import annotations

import torch

from fedbalance.monitor.estimators import Estimator, Track

DECAY = 0.5


def ema_counts(track: Track, decay: float = DECAY) -> torch.Tensor:
    """The smoothed shares of ``released``'s estimates over the track's rounds, times the last round's total."""
    smoothed = None
    for estimate in track.series("released"):
        counts = torch.as_tensor(estimate, dtype=torch.float64).clamp_min(0.0)
        shares = counts / counts.sum().clamp_min(1e-12)
        smoothed = shares if smoothed is None else decay * smoothed + (1.0 - decay) * shares
    return smoothed * float(sum(track.totals[-1]))


ema = Estimator("ema", ema_counts, history=True, requires=("released",))
