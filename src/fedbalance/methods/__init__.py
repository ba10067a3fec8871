"""The methods the paper compares: the models (``models``: LeNet-5, CNN7, ResNet-18/50), the losses (``losses``: CE,
Focal, GHM-C, MSE, MFE, the Ratio Loss in both readings, the newer baselines, plug-ins), and the metrics (``metrics``:
Ac.M, the majority accuracy, AUCs).

May import: ``fedbalance.common``. A plug-in loss subclasses ``fedbalance.methods.Loss`` (or ``CountsLoss``).
"""

from fedbalance.common.lazy import lazy_api

__getattr__, __dir__ = lazy_api(__name__, {
    "Loss": "losses", "CountsLoss": "losses", "LOSSES": "losses", "get_loss": "losses", "build_model": "models",
    "evaluate": "metrics",
})
__all__ = ["Loss", "CountsLoss", "LOSSES", "get_loss", "build_model", "evaluate"]
