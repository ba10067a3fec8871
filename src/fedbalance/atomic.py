"""Atomic file writes: a temporary file in the target's folder, then ``os.replace``.

The file gets the permissions a plain ``open`` would give it (0666 minus the umask), not
``mkstemp``'s 0600, so group members of a shared project can read results.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable


def _umask() -> int:
    """The process umask (read by setting it and setting it back)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _out_of_space(exc: BaseException) -> bool:
    """ENOSPC/EDQUOT, or torch.save's report of a short write (``unexpected pos``) on a full disk."""
    if isinstance(exc, OSError):
        return exc.errno in (errno.ENOSPC, errno.EDQUOT)
    return isinstance(exc, RuntimeError) and "unexpected pos" in str(exc)


def atomic_write(path: str | Path, write: Callable[[Any], None], mode: str = "w") -> None:
    """Call ``write(fh)`` on a temporary file beside ``path`` and move it into place; nothing half-written remains.

    A full disk (or quota) raises ``OSError(ENOSPC)`` naming ``path`` and the free space left, whatever
    the writer reported (torch.save says ``unexpected pos``).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, mode) as fh:
            os.chmod(fh.fileno(), 0o666 & ~_umask())
            write(fh)
        os.replace(tmp, path)
    except BaseException as exc:
        Path(tmp).unlink(missing_ok=True)
        if _out_of_space(exc):
            free = shutil.disk_usage(path.parent).free
            raise OSError(
                errno.ENOSPC,
                f"no space left on the device while writing {path} ({free / 2**20:.1f} MiB free there); "
                "free some space and rerun: the job resumes from its last checkpoint",
            ) from exc
        raise


def write_json(obj: Any, path: str | Path, indent: int | None = 1) -> None:
    """``json.dump`` to ``path`` atomically."""
    atomic_write(path, lambda fh: json.dump(obj, fh, indent=indent))


@contextmanager
def held(lock: Any, path: str | Path) -> Iterator[None]:
    """Run the block holding the acquired ``lock`` (a ``filelock`` lock on ``path``), then remove the lock file while
    still holding it and let go: a finished or failed holder leaves no lock file (a process that opened it meanwhile
    finds an unlinked file and opens a new one: filelock checks)."""
    try:
        yield
    finally:
        try:
            Path(path).unlink(missing_ok=True)
        finally:
            lock.release()
