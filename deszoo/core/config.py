"""Seeds and integers as deszoo takes them; a bad one raises :class:`ConfigError`."""

from __future__ import annotations

from typing import Any

import numpy as np

from deszoo.errors import ConfigError

__all__ = ["MAX_SEED", "is_int", "check_seed", "check_first_seed"]

# Seeds are ints in [0, MAX_SEED]: numpy's SeedSequence takes any, but one bound everywhere
# (API, vector envs, command line; 32 bits, as other RL tooling takes) is easier to state.
MAX_SEED = 2**32 - 1


def is_int(value: Any) -> bool:
    """An integer that is not a bool (numpy integers count)."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def check_seed(seed: Any, what: str = "seed") -> None:
    """``seed`` must be ``None`` or an int in ``[0, MAX_SEED]`` (no bools, no floats)."""
    if seed is None:
        return
    if not is_int(seed) or not 0 <= seed <= MAX_SEED:
        raise ConfigError(
            f"{what}: seed={seed!r} must be None or an int in [0, 2**32 - 1]"
            + (" (a float is not truncated)" if isinstance(seed, float) else "")
        )


def check_first_seed(seed: Any, count: int, what: str = "seed") -> None:
    """``seed`` seeds ``count`` envs ``seed + i``: each of them must be a seed
    (:func:`check_seed`), so ``seed`` is at most ``MAX_SEED - count + 1``."""
    check_seed(seed, what)
    if seed is not None and seed + count - 1 > MAX_SEED:
        raise ConfigError(
            f"{what}: seed={seed!r} is too large for {count} envs: env i gets seed + i, and "
            f"seeds are ints in [0, 2**32 - 1], so seed must be at most 2**32 - {count} "
            f"({MAX_SEED - count + 1})"
        )
