"""Checks for scenario parameters; each raises :class:`ConfigError` naming the parameter."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from deszoo.errors import ConfigError

__all__ = [
    "MAX_SEED",
    "is_int",
    "is_number",
    "check_seed",
    "check_ints",
    "check_numbers",
    "check_fraction",
    "check_pair",
]

# Seeds are ints in [0, MAX_SEED]: numpy's SeedSequence takes any, but one bound everywhere
# (API, vector envs, command line; 32 bits, as other RL tooling takes) is easier to state.
MAX_SEED = 2**32 - 1


def is_int(value: Any) -> bool:
    """An integer that is not a bool (numpy integers count)."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def is_number(value: Any) -> bool:
    """An int or a float that is not a bool and not NaN."""
    if is_int(value):
        return True
    return isinstance(value, (float, np.floating)) and not np.isnan(value)


def check_seed(seed: Any, what: str = "seed") -> None:
    """``seed`` must be ``None`` or an int in ``[0, MAX_SEED]`` (no bools, no floats)."""
    if seed is None:
        return
    if not is_int(seed) or not 0 <= seed <= MAX_SEED:
        raise ConfigError(
            f"{what}: seed={seed!r} must be None or an int in [0, 2**32 - 1]"
            + (" (a float is not truncated)" if isinstance(seed, float) else "")
        )


def check_ints(config: Mapping, name: str, keys: Iterable[str], minimum: int = 1) -> None:
    """Each ``config[key]`` must be an int >= ``minimum``."""
    for key in keys:
        value = config[key]
        if not is_int(value) or value < minimum:
            need = "a positive int" if minimum == 1 else f"an int >= {minimum}"
            raise ConfigError(f"{name}: {key}={value!r} must be {need}")


def check_numbers(
    config: Mapping, name: str, keys: Iterable[str], *, positive: bool = True
) -> None:
    """Each ``config[key]`` must be a number > 0 (``positive``) or >= 0."""
    for key in keys:
        value = config[key]
        if not is_number(value) or not (value > 0 if positive else value >= 0):
            need = "a positive number" if positive else "a number >= 0"
            raise ConfigError(f"{name}: {key}={value!r} must be {need}")


def check_fraction(config: Mapping, name: str, key: str, *, closed: bool = False) -> None:
    """``config[key]`` must be a number in ``[0, 1)`` (``[0, 1]`` when ``closed``)."""
    value = config[key]
    if not is_number(value) or not (0 <= value <= 1 if closed else 0 <= value < 1):
        raise ConfigError(f"{name}: {key}={value!r} must be in [0, {'1]' if closed else '1)'}")


def check_pair(config: Mapping, name: str, key: str, *, ints: bool = False, low: float = 0) -> None:
    """``config[key]`` must be a pair ``(lo, hi)`` of numbers with ``low <= lo <= hi``.

    ``low`` is exclusive for floats and inclusive for ints (``ints=True``).
    """
    value = config[key]
    kind = is_int if ints else is_number
    ok = isinstance(value, (tuple, list)) and len(value) == 2 and all(kind(v) for v in value)
    if ok:
        lo, hi = value
        ok = (low <= lo if ints else low < lo) and lo <= hi
    if not ok:
        what = "ints" if ints else "numbers"
        bound = f"{low} <= lo" if ints else f"{low} < lo"
        raise ConfigError(
            f"{name}: {key}={value!r} must be a pair of {what} (lo, hi), {bound} <= hi"
        )
