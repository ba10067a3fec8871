"""The report layer: the paper's tables (``tables``), its claims (``claims``) and figures (``figures``).

Everything here reads the tidy frames of :mod:`fedbalance.aggregate`; display names shared by the
tables and the figures live in :mod:`fedbalance.presentation.names`.
"""
