"""The report layer: the paper's tables (``tables``), its claims (``claims``) and figures (``figures``), the report's
pages, the README's headline (``headline``) and the docs spliced from a reference set's render (``refdocs``).

Everything here reads the tidy frames of :mod:`fedbalance.jobs.aggregate`; display names shared by the
tables and the figures live in :mod:`fedbalance.presentation.names`.

May import: every subpackage (``common`` … ``evidence``); only ``fedbalance.cli`` imports it.
"""
