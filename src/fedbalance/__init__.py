"""fedbalance: class imbalance in federated learning (Wang et al., AAAI 2021), reproduced."""

__version__ = "0.1.0"
