"""How the library's messages reach a user: every module logs through its own logger (``logging.getLogger(__name__)``,
below the ``fedbalance`` logger, which has a NullHandler and so prints nothing by itself); an application — the CLI,
the workflow's scripts, a user's own program — decides where they go and from which level (``configure``).
Progress bars stay tqdm's; a job without a terminal logs one line per round at INFO (``fedbalance.jobs.run``).
"""

from __future__ import annotations

import logging
import sys
from typing import TextIO

LOGGER = "fedbalance"


class _Formatter(logging.Formatter):
    """INFO and below as the message alone (a job's progress line carries its own time); WARNING and above headed by
    the level and the logger ("WARNING fedbalance.jobs.run: ignoring checkpoint ...")."""

    def format(self, record: logging.LogRecord) -> str:
        message = super().format(record)
        return message if record.levelno <= logging.INFO else f"{record.levelname} {record.name}: {message}"


class _StderrHandler(logging.StreamHandler):
    """A handler that writes to whatever ``sys.stderr`` is when a message comes (a workflow script's log file, a
    test's capture), not the one it was made with."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property  # type: ignore[override]
    def stream(self) -> TextIO:
        return sys.stderr

    @stream.setter
    def stream(self, value: TextIO) -> None:  # StreamHandler sets it; the property always reads sys.stderr
        pass


def configure(level: int | str = logging.INFO, stream: TextIO | None = None) -> logging.Handler:
    """Send the library's messages of ``level`` and above to ``stream`` (default: the current ``sys.stderr``), and
    Python's warnings through logging too; return the handler (replacing one this function added before)."""
    logger = logging.getLogger(LOGGER)
    for old in [h for h in logger.handlers if getattr(h, "_fedbalance", False)]:
        logger.removeHandler(old)
    handler = logging.StreamHandler(stream) if stream is not None else _StderrHandler()
    handler.setFormatter(_Formatter("%(message)s"))
    handler._fedbalance = True  # type: ignore[attr-defined]
    logger.addHandler(handler)
    logger.setLevel(level)
    logging.captureWarnings(True)
    warnings_logger = logging.getLogger("py.warnings")
    if not any(getattr(h, "_fedbalance", False) for h in warnings_logger.handlers):
        warnings_logger.addHandler(handler)
    return handler
