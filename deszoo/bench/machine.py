"""Machine record, load, CPU time and peak memory (RSS) of the parent and its workers."""

from __future__ import annotations

import os
import platform
import resource
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path

__all__ = [
    "PACKAGES",
    "children_peak_rss_mb",
    "code_record",
    "deszoo_commit",
    "free_cores",
    "child_pids",
    "load_average",
    "machine_record",
    "reset_peak_rss",
    "self_peak_rss_mb",
    "usable_cores",
    "worker_counts",
    "worker_pids",
]

from deszoo.vector import usable_cores  # noqa: E402  (one copy, re-exported here)

PACKAGES = ("deszoo", "simpy", "pettingzoo", "gymnasium", "numpy", "supersuit", "ray")
"""Packages whose versions every machine record lists (``null`` when not installed)."""


def worker_counts(cores: int | None = None) -> list[int]:
    """1, 2, 4, ... up to ``cores`` (default: the usable cores), and ``cores`` itself."""
    cores = usable_cores() if cores is None else cores
    counts = {cores}
    k = 1
    while k < cores:
        counts.add(k)
        k *= 2
    return sorted(counts)


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def load_average() -> list[float] | None:
    """1, 5 and 15 minute load averages, or ``None`` where the OS has none."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except (AttributeError, OSError):
        return None


def _spin(seconds: float, conn) -> None:
    cpu0 = time.process_time()
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass
    conn.send(time.process_time() - cpu0)
    conn.close()


def free_cores(seconds: float = 0.25) -> float | None:
    """How many cores are free now: one spinning process per usable core for ``seconds``;
    the CPU time they got over the wall time. About ``usable_cores()`` on an idle machine,
    less when other processes compete. ``None`` if processes cannot be started."""
    try:
        import multiprocessing as mp

        ctx = mp.get_context("fork" if "fork" in mp.get_all_start_methods() else None)
        pipes = [ctx.Pipe(duplex=False) for _ in range(usable_cores())]
        procs = [ctx.Process(target=_spin, args=(seconds, w), daemon=True) for _, w in pipes]
        for p in procs:
            p.start()
        got = sum(r.recv() for r, _ in pipes)
        for p in procs:
            p.join(timeout=5)
        return round(got / seconds, 2)
    except Exception:  # a probe must never stop a benchmark
        return None


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def _git(cwd: Path, *args: str) -> str | None:
    """``git args`` in ``cwd``: its output, or None if git is missing or fails."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    try:
        done = subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True,
                              text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def deszoo_commit(package_dir: Path | None = None) -> str:
    """Short git hash of the checkout deszoo runs from, ``+dirty`` when its tracked files
    differ from that commit, or ``unknown``.

    ``unknown`` unless ``package_dir`` (default: the imported ``deszoo`` package) is the
    ``deszoo`` folder at the top of a git work tree that tracks it: an installed wheel, or a
    venv inside some other repository, has no commit of deszoo's to give. Never raises.
    """
    if package_dir is None:
        import deszoo

        package_dir = Path(deszoo.__file__).parent
    try:
        package_dir = package_dir.resolve()
        top = _git(package_dir, "rev-parse", "--show-toplevel")
        if top is None or Path(top).resolve() != package_dir.parent:
            return "unknown"
        if _git(package_dir.parent, "ls-files", "--error-unmatch", "--",
                f"{package_dir.name}/__init__.py") is None:
            return "unknown"
        commit = _git(package_dir.parent, "rev-parse", "--short", "HEAD")
        if not commit:
            return "unknown"
        status = _git(package_dir.parent, "status", "--porcelain", "--untracked-files=no")
        if status is None:
            return "unknown"
        return commit + ("+dirty" if status else "")
    except OSError:
        return "unknown"


def code_record() -> dict[str, str]:
    """Which code measured: ``deszoo_version`` and ``commit`` (:func:`deszoo_commit`)."""
    import deszoo

    return {"deszoo_version": deszoo.__version__, "commit": deszoo_commit()}


def machine_record(label: str | None = None) -> dict:
    """What a result needs to say about the machine it was measured on."""
    return {
        "label": label,
        "cpu_model": cpu_model(),
        "usable_cores": usable_cores(),
        "logical_cpus": os.cpu_count(),
        "memory_gib": _memory_gib(),
        "os": platform.platform(),
        "python": platform.python_version(),
        "python_implementation": platform.python_implementation(),
        "packages": {p: _version(p) for p in PACKAGES},
        "load_average_start": load_average(),
        "load_average_end": None,
        "free_cores_start": free_cores(),
        "free_cores_end": None,
    }


def _memory_gib() -> float | None:
    try:
        return round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)
    except (ValueError, OSError, AttributeError):
        return None


# ---- memory ---------------------------------------------------------------------------
def _maxrss_mb(who: int) -> float:
    rss = resource.getrusage(who).ru_maxrss
    return rss / 2**20 if sys.platform == "darwin" else rss / 2**10  # bytes vs KiB


def _status_kb(pid: int | str, key: str) -> float | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return float(line.split()[1])
    except OSError:
        pass
    return None


def reset_peak_rss() -> bool:
    """Reset this process's peak RSS (Linux ``clear_refs``); False where impossible."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def self_peak_rss_mb() -> float:
    """Peak RSS of this process in MiB (since :func:`reset_peak_rss` where that worked)."""
    kb = _status_kb("self", "VmHWM")
    return kb / 1024 if kb is not None else _maxrss_mb(resource.RUSAGE_SELF)


def child_pids(pid: int | None = None) -> list[int]:
    """Live descendants of ``pid`` (default: this process), from ``/proc`` (Linux)."""
    pid = os.getpid() if pid is None else pid
    found: list[int] = []
    stack = [pid]
    while stack:
        p = stack.pop()
        try:
            tasks = os.listdir(f"/proc/{p}/task")
        except OSError:
            continue
        for tid in tasks:
            try:
                with open(f"/proc/{p}/task/{tid}/children") as f:
                    kids = [int(x) for x in f.read().split()]
            except OSError:
                continue
            found.extend(kids)
            stack.extend(kids)
    return found


_HELPERS = ("multiprocessing.resource_tracker", "multiprocessing.forkserver")


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def worker_pids(pid: int | None = None) -> list[int]:
    """Live descendants of ``pid`` that are workers: multiprocessing's resource tracker and
    fork server (started once per parent, not per vector env) are left out."""
    return [p for p in child_pids(pid) if not any(h in _cmdline(p) for h in _HELPERS)]


def children_peak_rss_mb(pids: list[int]) -> tuple[float | None, float | None, str]:
    """Largest and summed peak RSS (MiB) of ``pids``, and how it was measured.

    Reads ``VmHWM`` of each live child. Without ``/proc`` it falls back to
    ``getrusage(RUSAGE_CHILDREN)``, the largest child this process ever waited for, so the
    sum is unknown there (``None``).
    """
    peaks = [kb / 1024 for kb in (_status_kb(p, "VmHWM") for p in pids) if kb is not None]
    if peaks:
        return max(peaks), sum(peaks), "proc"
    if not pids:
        return None, None, "none"
    return _maxrss_mb(resource.RUSAGE_CHILDREN), None, "rusage"
