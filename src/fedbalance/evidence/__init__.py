"""The evidence: a reference set rendered and compared with a run (``reference``), grown, checked and sealed
(``refset``: collect, status, missing), the statistics over seeds every comparison states (``seedstats``), a set's
record of its looks (``looks``) and what it would take to decide a claim (``plan``).

May import: every subpackage below it (``common`` … ``jobs``).
"""

from fedbalance.common.lazy import lazy_api

__getattr__, __dir__ = lazy_api(__name__, {"compare": "reference", "render_jobs": "reference",
                                           "ReferenceSetError": "reference", "collect": "refset"})
__all__ = ["compare", "render_jobs", "ReferenceSetError", "collect"]
