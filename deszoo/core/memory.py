"""Refuse configurations whose memory would exceed what the machine has, before building them.

The estimate is deliberately simple: per agent, its rows of the bridge's arrays (observation,
final observation and the vector batch's copy, mask, flags) plus a model allowance measured on
the scenarios (a SimPy process and its objects: 2 to 3.3 KB per agent at 20,000 agents,
rounded up to 4 KB). It is an estimate, and the message says so; it exists so that a typo such
as ``n_drivers=1_000_000`` in an 8-env batch fails in a second with a number instead of
swapping for a minute and ending in an untyped ``MemoryError``.
"""

from __future__ import annotations

import os

from deszoo.errors import ConfigError

__all__ = ["MODEL_BYTES_PER_AGENT", "available_bytes", "env_bytes", "check_fits"]

MODEL_BYTES_PER_AGENT = 4096


def available_bytes() -> int | None:
    """Memory the machine can still give (``MemAvailable``), or ``None`` if unknown."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def env_bytes(n_agents: int, obs_dim: int, mask_dim: int, model: bool = True) -> int:
    """Estimated bytes of one env with ``n_agents`` rows (``model``: add the SimPy model)."""
    per_row = 3 * 4 * obs_dim + 2 * mask_dim + 32
    return n_agents * (per_row + (MODEL_BYTES_PER_AGENT if model else 0))


def _gib(n: float) -> str:
    return f"{n / 2**30:.1f} GiB"


def check_fits(what: str, nbytes: int, detail: str, available: int | None = None) -> None:
    """Raise :class:`ConfigError` if ``nbytes`` exceeds the available memory."""
    available = available_bytes() if available is None else available
    if available is not None and nbytes > available:
        raise ConfigError(
            f"{what} would need about {_gib(nbytes)} of memory ({detail}; an estimate), "
            f"more than the {_gib(available)} this machine has available; use fewer agents "
            "or envs"
        )
