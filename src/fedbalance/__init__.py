"""fedbalance: class imbalance in federated learning (Wang et al., AAAI 2021), reproduced."""

import logging

from fedbalance.version import __version__

# a library's convention: its loggers print nothing unless the application says where (fedbalance.logs.configure)
logging.getLogger("fedbalance").addHandler(logging.NullHandler())

__all__ = ["__version__"]
