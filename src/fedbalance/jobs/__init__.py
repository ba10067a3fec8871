"""A study's jobs: the config and its schema (``config``), the plug-in contracts checked at load (``contracts``),
running a job with its checkpoint and lock (``run``), the job folder and its one check (``jobfolder``), how a job was
made (``provenance``), twins and branches (``reuse``), derived jobs and replays (``derive``, ``replay``), packs of
jobs on one device (``pack``), the cost of a study (``cost``), the tidy frames (``aggregate``) and the seal every
writer of job folders calls first (``seal``).

May import: every subpackage below (``common``, ``data``, ``methods``, ``training``, ``monitor``, ``engine``). The names
of ``run`` are this package's too (``fedbalance.jobs.run_job``, as before the package was split).
"""

from fedbalance.common.lazy import lazy_api

__getattr__, __dir__ = lazy_api(__name__, {
    "run_job": "run", "JobError": "run", "load_config": "config", "ConfigError": "config",
}, fallback="run")
__all__ = ["run_job", "JobError", "load_config", "ConfigError"]
