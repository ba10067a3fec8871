"""A client's local training: SGD on one client (``sgd``), many clients at once under ``torch.func.vmap``
(``vectorised``), and the choice between the two with its copy plan (``train``).

May import: ``fedbalance.common``, ``fedbalance.methods``.
"""

from fedbalance.common.lazy import lazy_api

__getattr__, __dir__ = lazy_api(__name__, {"sgd_steps": "sgd", "make_optimizer": "sgd", "job_plan": "train"})
__all__ = ["sgd_steps", "make_optimizer", "job_plan"]
