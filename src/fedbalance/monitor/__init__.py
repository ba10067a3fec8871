"""The paper's monitoring scheme: each round's class composition estimated from the global model's last-layer updates
on a little auxiliary data (``monitor``, the paper's Eq. 1–5), the composition estimators, plug-ins included
(``estimators``), what drifts between rounds (``drift``), and the Ratio Loss as other code reads it (``readings``).

May import: ``fedbalance.common``, ``data``, ``methods``, ``training``. The names of ``monitor`` are this package's too
(as before the package was split); a plug-in estimator uses ``fedbalance.monitor.Estimator`` and ``Track``.
"""

from fedbalance.common.lazy import lazy_api

__getattr__, __dir__ = lazy_api(__name__, {
    "Estimator": "estimators", "Track": "estimators", "RoundInputs": "estimators", "REGISTRY": "estimators",
}, fallback="monitor")
__all__ = ["Estimator", "Track", "RoundInputs", "REGISTRY"]
