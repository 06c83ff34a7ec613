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
        # Updates come one agent at a time, a few per step, while ``take`` covers every
        # agent: agents unchanged since the last ``take`` integrate as one array product;
        # only the changed ones keep (area so far, time of their last change) in ``_open``,
        # in plain floats. The results are the same float64 sums as agent by agent.
        self.value = [0.0] * n
        self._values = np.zeros(n, dtype=np.float64)
        self._t0 = float(t0)  # start of the current interval
        self._open: dict[int, tuple[float, float]] = {}

    def set(self, t: float, i: int, value: float) -> None:
        area, since = self._open.get(i, (0.0, self._t0))
        self._open[i] = (area + self.value[i] * (t - since), float(t))
        self.value[i] = value = float(value)
        self._values[i] = value

    def add(self, t: float, i: int, delta: float) -> None:
        self.set(t, i, self.value[i] + delta)

    def take(self, t: float) -> np.ndarray:
        """Each agent's integral since the last ``take`` (float64); starts a new interval."""
        # ``+ 0.0`` as in ``0.0 + v * dt`` agent by agent: it turns a -0.0 into 0.0.
        out = self._values * (t - self._t0) + 0.0
        value = self.value
        for i, (area, since) in self._open.items():
            out[i] = area + value[i] * (t - since)
        self._open = {}
        self._t0 = float(t)
        return out
