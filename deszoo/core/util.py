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
        # Plain floats: updates come one agent at a time, where numpy's per-call cost would
        # exceed the arithmetic; the results are the same float64 sums.
        self.value = [0.0] * n
        self.area = [0.0] * n
        self.t = [float(t0)] * n

    def set(self, t: float, i: int, value: float) -> None:
        self.area[i] += self.value[i] * (t - self.t[i])
        self.t[i] = float(t)
        self.value[i] = float(value)

    def add(self, t: float, i: int, delta: float) -> None:
        self.set(t, i, self.value[i] + delta)

    def take(self, t: float) -> np.ndarray:
        """Each agent's integral since the last ``take`` (float64); starts a new interval."""
        out = np.array([a + v * (t - s) for a, v, s in zip(self.area, self.value, self.t,
                                                              strict=True)], dtype=np.float64)
        n = len(self.area)
        self.area = [0.0] * n
        self.t = [float(t)] * n
        return out
