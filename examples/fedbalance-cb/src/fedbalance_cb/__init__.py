"""An example fedbalance plug-in: the class-balanced loss (Cui et al., CVPR 2019) and the EMA composition estimator."""

__version__ = "0.1.0"
