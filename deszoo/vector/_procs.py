"""Process plumbing shared by the backends that start worker processes (``shm``,
``supersuit``, and the ``shm`` pools of Ray nodes): the start method, how a worker
process begins (Ctrl-C, dying with its parent), and how it is ended and described.

Ctrl-C belongs to the parent. A terminal's Ctrl-C reaches every process of its foreground
process group, workers included; a worker ignores it, so only the parent's call is
interrupted (it raises ``KeyboardInterrupt`` and the vector env stays usable).

A worker dies with its parent, even when it is stopped (``SIGSTOP``): on Linux it asks the
kernel for ``SIGKILL`` when its parent goes (``PR_SET_PDEATHSIG``), which reaches a stopped
process too. The kernel counts the *thread* that started the worker as its parent, so a
worker started from a thread other than the main one is not armed (it would die with that
thread); it still exits at the EOF of its pipes when the parent dies, unless it is stopped.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import threading
from typing import Any

from deszoo.core.params import choice, optional, real
from deszoo.errors import ConfigError
from deszoo.vector.options import MAX_SECONDS, option

__all__ = [
    "CLOSE_TIMEOUT",
    "START_METHOD",
    "context",
    "die_with_parent",
    "end",
    "exit_detail",
    "parent_token",
    "worker_begins",
]

# The options of every backend that starts processes.
START_METHOD = option("start_method", None, optional(choice("fork", "spawn", "forkserver")),
                      "multiprocessing start method of the workers")
CLOSE_TIMEOUT = option("close_timeout", 5.0, real(0, MAX_SECONDS),
                       "seconds close() waits for the workers to exit before killing them")

PR_SET_PDEATHSIG = 1


def context(start_method: str | None) -> Any:
    """The multiprocessing context of ``start_method``, or ``ConfigError`` naming the valid
    ones."""
    try:
        return mp.get_context(start_method)
    except ValueError:
        raise ConfigError(
            f"start_method={start_method!r}; valid: None or one of {mp.get_all_start_methods()}"
        ) from None


def parent_token(start_method: str, always: bool = False) -> int | None:
    """What a new worker needs to die with this process: its pid (``0`` when the worker's
    parent is another process, as under ``forkserver``), or ``None`` when it must not be
    armed (called from a thread other than the main one, unless ``always``)."""
    if not always and threading.current_thread() is not threading.main_thread():
        return None
    return 0 if start_method == "forkserver" else os.getpid()


def die_with_parent(parent: int | None) -> None:
    """In a worker: ``SIGKILL`` when the parent dies (Linux; elsewhere nothing).

    ``parent``: the pid the worker's parent must have (``0``: do not check; ``None``: do
    nothing). A parent already gone before the request is armed ends the worker at once.
    """
    if parent is None:
        return
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL) != 0:
            return
    except (OSError, AttributeError):  # not Linux
        return
    if parent and os.getppid() != parent:
        os._exit(1)
    if parent == 0:
        _leave_forkserver()


def _leave_forkserver() -> None:
    """Under ``forkserver``, drop this worker's copy of the fd by which the fork server
    learns that its clients are gone. Python hands every child one; while a stopped worker
    holds it, the fork server outlives the parent, so the worker's parent never dies and
    ``PR_SET_PDEATHSIG`` never fires (both were left behind for good). Without it, the fork
    server exits with the parent and the kernel kills its children, stopped ones too."""
    from multiprocessing import forkserver

    server = forkserver._forkserver  # noqa: SLF001 (the stdlib has no public name for it)
    fd = server._forkserver_alive_fd  # noqa: SLF001
    if fd is not None:
        server._forkserver_alive_fd = None  # noqa: SLF001
        try:
            os.close(fd)
        except OSError:
            pass


def worker_begins(parent: int | None) -> None:
    """The first thing a worker process does: leave Ctrl-C to the parent, die with it."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    die_with_parent(parent)


def exit_detail(proc: Any) -> str:
    """How a worker process ended, for a ``WorkerDiedError`` message."""
    code = proc.exitcode
    signal_note = ", killed by a signal" if code is not None and code < 0 else ""
    return f" (exit code {code}{signal_note}); its envs were lost"


def died(index: int, proc: Any) -> Any:
    """The reply of worker ``index`` whose process ``proc`` ended (reaped first)."""
    from deszoo.vector.pool import Reply

    proc.join(1.0)
    return Reply(index, "died", detail=exit_detail(proc))


def end(proc: Any, *conns: Any) -> None:
    """Kill ``proc`` if it still runs, reap it and close it and ``conns``."""
    if proc.is_alive():
        proc.kill()
        proc.join(5.0)
    if not proc.is_alive():
        proc.close()
    for conn in conns:
        conn.close()
