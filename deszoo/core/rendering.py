"""``render()`` for a scenario: text (``human``, ``ansi``) or pictures (``rgb_array``).

A scenario overrides ``_render_text`` (one frame as text) and, for pictures,
``_render_rgb`` (usually drawing with :mod:`deszoo.core.canvas`). The class is a mixin of
:class:`~deszoo.core.env.SimPyParallelEnv`.
"""

from __future__ import annotations

import sys

import numpy as np

__all__ = ["Rendering"]


class Rendering:
    """PettingZoo's ``render()`` over the scenario's two drawing hooks."""

    def render(self) -> str | np.ndarray | None:
        if self.render_mode == "rgb_array":
            return self._render_rgb()
        if self.render_mode == "ansi":
            return self._render_text()
        if self.render_mode == "human":
            if self.sim is not None:
                sys.stdout.write(self._render_text() + "\n")
            return None
        return None

    def _render_text(self) -> str:
        return f"{self.metadata['name']} t={self.now:.2f}"

    def _render_rgb(self) -> np.ndarray:
        raise NotImplementedError(f"{type(self).__name__} draws no rgb_array pictures")
