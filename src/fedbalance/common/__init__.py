"""What every layer shares: the names of jobs, columns and estimators (``records``), a job's spec and its resolution
(``jobspec``), the plug-in registry (``plugins``), and ``lazy``, a subpackage's public API on first use.

May import: the standard library, numpy, and ``fedbalance.atomic``/``logs``/``version``; no other subpackage.
"""

from fedbalance.common.lazy import lazy_api

__getattr__, __dir__ = lazy_api(__name__, {"Job": "records", "JobSpec": "jobspec", "ConfigError": "jobspec",
                                           "PluginError": "plugins", "Plugin": "plugins"})
__all__ = ["Job", "JobSpec", "ConfigError", "Plugin", "PluginError"]
