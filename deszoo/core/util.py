"""Small helpers for scenario models."""

from __future__ import annotations

import numpy as np

__all__ = ["Integrator"]


class Integrator:
    """Time integral of piecewise-constant per-agent signals (queue lengths, costs).

    ``set(t, i, value)`` changes agent ``i``'s signal at time ``t``; ``take(t)`` returns
    each agent's integral since the last ``take`` and starts a new interval.
    """

    def __init__(self, n: int, t0: float = 0.0):
        self.value = np.zeros(n, dtype=np.float64)
        self.area = np.zeros(n, dtype=np.float64)
        self.t = np.full(n, t0, dtype=np.float64)

    def set(self, t: float, i: int, value: float) -> None:
        self.area[i] += self.value[i] * (t - self.t[i])
        self.t[i] = t
        self.value[i] = value

    def add(self, t: float, i: int, delta: float) -> None:
        self.set(t, i, self.value[i] + delta)

    def take(self, t: float) -> np.ndarray:
        self.area += self.value * (t - self.t)
        self.t[:] = t
        out = self.area.copy()
        self.area[:] = 0.0
        return out
