"""fedbalance: class imbalance in federated learning (Wang et al., AAAI 2021), reproduced.

The package's folders are its layers, each importing only those before it (tests/test_layout.py):

``common`` → ``data`` → ``methods`` → ``training`` → ``monitor`` → ``engine`` → ``jobs`` → ``evidence`` →
``presentation`` → ``cli``; ``atomic``, ``logs`` and ``version`` at the top serve every layer (docs/design.md,
"Layout"). The modules' names before the layout (``fedbalance.losses``, ``fedbalance.estimators``, …) still import,
with a DeprecationWarning naming the new one (``MOVED``).
"""

import importlib
import importlib.abc
import importlib.util
import logging
import sys
import warnings

from fedbalance.version import __version__

# a library's convention: its loggers print nothing unless the application says where (fedbalance.logs.configure)
logging.getLogger("fedbalance").addHandler(logging.NullHandler())

LAYERS = ("common", "data", "methods", "training", "monitor", "engine", "jobs", "evidence", "presentation", "cli")
"""The subpackages (and the CLI) in import order: a module imports only from its own layer and those before it, and
``atomic``, ``logs``, ``version`` (which import no layer)."""

MOVED = {
    "records": "common.records", "jobspec": "common.jobspec", "plugins": "common.plugins",
    "partition": "data.partition",
    "models": "methods.models", "losses": "methods.losses", "metrics": "methods.metrics",
    "sgd": "training.sgd", "vectorised": "training.vectorised", "train": "training.train",
    "estimators": "monitor.estimators", "drift": "monitor.drift",
    "fl": "engine.fl", "centralised": "engine.centralised",
    "config": "jobs.config", "jobfolder": "jobs.jobfolder", "reuse": "jobs.reuse", "derive": "jobs.derive",
    "replay": "jobs.replay", "cost": "jobs.cost", "pack": "jobs.pack", "seal": "jobs.seal",
    "aggregate": "jobs.aggregate", "contracts": "jobs.contracts", "provenance": "jobs.provenance",
    "reference": "evidence.reference", "seedstats": "evidence.seedstats", "refset": "evidence.refset",
    "refdocs": "presentation.refdocs",
}
"""A module's name before the layout (``fedbalance.<old>``) -> its module now (``fedbalance.<new>``). ``data``,
``monitor`` and ``jobs`` were modules and are now the packages that hold them; each still answers the old module's
names (``fedbalance.data.Source``)."""


def _moved_notice(old: str) -> str:
    return (f"fedbalance.{old} moved to fedbalance.{MOVED[old]} (the package's layout, docs/design.md); "
            f"import fedbalance.{MOVED[old]}")


class _MovedFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports ``fedbalance.<old>`` as the module it moved to (the same module object), with a DeprecationWarning."""

    def find_spec(self, fullname, path, target=None):
        head, _, old = fullname.partition(".")
        if head == "fedbalance" and old in MOVED:
            return importlib.util.spec_from_loader(fullname, self)
        return None

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        old = module.__name__.partition(".")[2]
        warnings.warn(_moved_notice(old), DeprecationWarning, stacklevel=2)
        sys.modules[module.__name__] = importlib.import_module(f"fedbalance.{MOVED[old]}")


if not any(isinstance(f, _MovedFinder) for f in sys.meta_path):
    sys.meta_path.append(_MovedFinder())


def __getattr__(name: str):
    """``from fedbalance import losses`` (an old name): the module it moved to, with a DeprecationWarning."""
    if name in MOVED:
        warnings.warn(_moved_notice(name), DeprecationWarning, stacklevel=2)
        return importlib.import_module(f"fedbalance.{MOVED[name]}")
    raise AttributeError(f"module 'fedbalance' has no attribute {name!r}")


__all__ = ["__version__", "LAYERS", "MOVED"]
