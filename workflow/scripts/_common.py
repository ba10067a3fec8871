"""Shared by the thin scripts of workflow/scripts/.

Importing this module puts the src/ of the workflow it belongs to (the repository's, two folders above this
file, found from its own location, not the working directory) first on sys.path, so `import fedbalance`
imports that copy and works in any environment, including the `--use-conda` ones (workflow/envs/*.yaml hold
the dependencies, not the project), and from a user's folder that uses the workflow as a module. A
workflow fetched from a git host has no src/ on disk: the fedbalance installed beside Snakemake is used (in a
`--use-conda` job too: Snakemake's script preamble appends its own sys.path to the job's). Snakemake adds
this directory (or, for a fetched workflow, the source cache's copy of it) to sys.path before it runs
a script, hence each script starts with `import _common`.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from pathlib import Path

SRC = str(Path(__file__).resolve().parents[2] / "src")
# First, even when already on the path further back (Snakemake's preamble appends search paths): an
# installed fedbalance from another checkout, or one on PYTHONPATH, must not shadow this one.
if Path(SRC, "fedbalance").is_dir():
    sys.path[:] = [SRC, *(p for p in sys.path if p != SRC)]


@contextlib.contextmanager
def logged(smk):
    """Send stdout and stderr (Python-level and the file descriptors) to the rule's log file, and the library's log
    messages (from INFO: a job's progress lines, warnings) there too (fedbalance.logs.configure). A user's mistake
    (bad data or configuration: ``fedbalance.cli.user_errors``) ends the script with its one line on the console,
    its traceback in the log only (``user_error_exit``)."""
    from fedbalance.logs import configure

    configure()
    with user_error_exit(smk):
        if not smk.log:
            yield
            return
        with _to_log(smk):
            yield


@contextlib.contextmanager
def user_error_exit(smk):
    """A user error raised inside: its one line on stderr ("fedbalance: error in rule R: ..."), exit status 1."""
    try:
        yield
    except Exception as exc:
        from fedbalance.cli import user_errors

        if not isinstance(exc, user_errors()):
            raise
        where = f" (traceback: {smk.log[0]})" if smk.log else ""
        print(f"fedbalance: error in rule {smk.rule}: {exc}{where}", file=sys.stderr, flush=True)
        raise SystemExit(1) from None


@contextlib.contextmanager
def _to_log(smk):
    """stdout and stderr into the rule's log file; an exception's traceback written there before it propagates."""
    path = Path(str(smk.log[0]))
    path.parent.mkdir(parents=True, exist_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    global _console
    with open(path, "w") as log:
        saved = os.dup(1), os.dup(2)
        _console = os.fdopen(os.dup(saved[1]), "w")
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
        try:
            with contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
                try:
                    yield
                except BaseException:
                    import traceback

                    traceback.print_exc()
                    raise
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            _console.close()
            _console = None
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])


_console = None
"""The console's stderr while a rule's output goes to its log (``_to_log``), for ``progress``."""


def progress(smk, done: int, total: int, what: str, started: float) -> None:
    """One line on the console (the log has it too) at every tenth of a long step: "rule R: 120 of 488 jobs
    written (25 %, 41 s)"."""
    step = max(1, total // 10)
    if done != total and done % step:
        return
    line = f"rule {smk.rule}: {done} of {total} {what} ({100 * done // max(total, 1)} %, {time.time() - started:.0f} s)"
    print(line, flush=True)
    if _console is not None:
        print(line, file=_console, flush=True)


def record(smk, folder, metrics, started: float, *, trained: bool = True, **extra) -> None:
    """Write ``folder``'s provenance.json (fedbalance.jobs.provenance.job_record): this rule and its wildcards, the
    commit of the workflow's src/ (or FEDBALANCE_COMMIT), the command the Snakefile recorded, and ``extra``."""
    from importlib.metadata import version

    from fedbalance.jobs.provenance import SNAKEMAKE, job_record, write

    how = {"runner": SNAKEMAKE, "runner_version": version("snakemake"), "rule": smk.rule,
           "wildcards": dict(smk.wildcards.items())}
    code = SRC if Path(SRC, "fedbalance").is_dir() else None
    write(folder, job_record(metrics, how=how, code=code, started=started, trained=trained, extra=extra))


def done() -> None:
    """End a script that has written and closed all its outputs, skipping the interpreter's teardown.

    Tearing down a process that imported torch (module finalisers, freeing its allocations) takes
    about half a second of CPU; a short training job pays it for nothing. Called only after the
    script's work succeeded; any exception before it ends the script the normal way.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)

