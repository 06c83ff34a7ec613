"""PettingZoo's module conventions for a parallel-native scenario: ``env`` and ``raw_env``.

PettingZoo's own parallel environments expose three names per module: ``parallel_env``
(the class), ``raw_env`` (the same env seen through ``parallel_to_aec``) and ``env`` (the
AEC env wrapped as PettingZoo wraps its own: out-of-bounds actions asserted, call order
enforced). :func:`aec_constructors` builds the last two from the first.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pettingzoo import AECEnv
from pettingzoo.utils import wrappers
from pettingzoo.utils.conversions import parallel_to_aec

__all__ = ["aec_constructors"]


def aec_constructors(parallel_cls: type) -> tuple[Callable[..., AECEnv], Callable[..., AECEnv]]:
    """``(env, raw_env)`` for ``parallel_cls``; both take its keyword arguments."""

    def raw_env(**kwargs: Any) -> AECEnv:
        """The scenario as an AEC env (``parallel_to_aec``), unwrapped."""
        return parallel_to_aec(parallel_cls(**kwargs))

    def env(**kwargs: Any) -> AECEnv:
        """The scenario as an AEC env, wrapped as PettingZoo wraps its own environments."""
        aec = raw_env(**kwargs)
        aec = wrappers.AssertOutOfBoundsWrapper(aec)
        return wrappers.OrderEnforcingWrapper(aec)

    for fn in (raw_env, env):
        fn.__qualname__ = fn.__name__
        fn.__module__ = parallel_cls.__module__
    return env, raw_env
