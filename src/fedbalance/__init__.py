"""fedbalance: class imbalance in federated learning (Wang et al., AAAI 2021), reproduced."""

from fedbalance.version import __version__

__all__ = ["__version__"]
