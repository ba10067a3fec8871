"""The training loops: FedAvg rounds with the monitor and the Ratio Loss acknowledged (``fl``) and centralised
training on the pooled data (``centralised``).

May import: ``fedbalance.common``, ``data``, ``methods``, ``training``, ``monitor``.
"""

from fedbalance.common.lazy import lazy_api

__getattr__, __dir__ = lazy_api(__name__, {"run_fedavg": "fl", "run_centralised": "centralised"})
__all__ = ["run_fedavg", "run_centralised"]
