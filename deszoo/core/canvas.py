"""Off-screen matplotlib drawing shared by the scenario pictures (optional extra ``render``).

``render_mode="rgb_array"`` and :mod:`deszoo.plots` draw with matplotlib on its Agg canvas
(no display, no pyplot, no change to the global backend). Matplotlib is imported only when a
picture is asked for, so the rest of deszoo runs without it.

An env keeps one :class:`Canvas` (one ``Figure`` of a fixed size) for all its frames: every
frame clears it and draws again, so frames keep one shape within and across episodes, as
video recorders need. ``SimPyParallelEnv.close()`` closes it.
"""

from __future__ import annotations

import contextlib
import weakref
from typing import Any

import numpy as np

__all__ = [
    "FRAME_SIZE", "COLORS", "Canvas", "canvas_for", "drop_canvas", "frame", "header",
    "job_color", "kept_canvas", "require_matplotlib",
]  # fmt: skip

FRAME_SIZE = (960, 540)  # pixels (even, 16:9: what video encoders like)
DPI = 100
# Okabe-Ito colour-blind-safe palette, by meaning, the same in every scenario.
COLORS = {
    "busy": "#0072B2",  # blue: working, serving, carrying
    "idle": "#009E73",  # green: free, on hand, green light
    "wait": "#E69F00",  # orange: queued, waiting, open
    "bad": "#D55E00",  # vermillion: lost, backlog, red light
    "move": "#CC79A7",  # purple: moving empty, on order
    "other": "#56B4E9",  # sky blue
    "grey": "#999999",
    "dark": "#333333",
}
STYLE = {
    "font.size": 9,
    "axes.titlesize": 10,
    "axes.labelsize": 9,
    "legend.fontsize": 8,
    "xtick.labelsize": 8,
    "ytick.labelsize": 8,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "figure.facecolor": "white",
    "savefig.facecolor": "white",
}


def require_matplotlib() -> Any:
    """Import matplotlib, or raise an ``ImportError`` that names the extra to install."""
    try:
        import matplotlib
        from matplotlib.backends import backend_agg  # noqa: F401
        from matplotlib.figure import Figure  # noqa: F401
    except ImportError as exc:
        raise ImportError(
            "deszoo pictures (render_mode='rgb_array', deszoo.plots) need matplotlib: "
            "pip install 'deszoo[render]'"
        ) from exc
    return matplotlib


def job_color(k: int) -> tuple[float, float, float, float]:
    """A colour per job (or other id): matplotlib's 20 categorical colours, consecutive ids
    in different hues (ids 10 apart share a hue, one dark and one light)."""
    import matplotlib

    index = 2 * (k % 10) + (k // 10) % 2
    return matplotlib.colormaps["tab20"](index / 20 + 0.025)


class Canvas:
    """One matplotlib ``Figure`` on an Agg canvas, redrawn for every picture.

    The axes are laid out once (:meth:`layout`) and kept: each frame removes what the last
    one drew in them and draws again, which costs a fraction of building new axes.
    ``memory`` is a dict the scenario may use to keep state between the frames of one
    episode (it is emptied when a new episode starts, see :meth:`begin`).
    """

    def __init__(
        self, size: tuple[int, int] = FRAME_SIZE, dpi: int = DPI, layout: str | None = None
    ):
        mpl = require_matplotlib()
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure

        self._mpl = mpl
        self.size = size
        with mpl.rc_context(STYLE):
            self.figure = Figure(figsize=(size[0] / dpi, size[1] / dpi), dpi=dpi, layout=layout)
        self._agg = FigureCanvasAgg(self.figure)
        self.memory: dict[str, Any] = {}
        self._episode: Any = None
        self._axes: Any = None
        self._static: set[int] = set()

    def begin(self, episode: Any) -> dict[str, Any]:
        """Start a picture of ``episode`` (any identity, e.g. the env's ``sim``).

        Empties ``memory`` when ``episode`` differs from the last one; returns ``memory``.
        """
        if episode is not self._episode:
            self._episode = episode
            self.memory = {}
        return self.memory

    def layout(self, build: Any) -> Any:
        """The axes ``build(figure)`` returned on the first call; later calls empty them."""
        if self._axes is None:
            self.figure.clear()
            self._axes = build(self.figure)
            # what the layout drew (reference lines, fixed curves) stays for every frame
            self._static = {id(a) for ax in self.figure.axes for a in _drawn(ax)}
        else:
            for ax in self.figure.axes:
                _wipe(ax, self._static)
        return self._axes

    def blank(self) -> None:
        """Drop the axes (the next :meth:`layout` builds them again)."""
        self.figure.clear()
        self._axes = None

    def style(self) -> contextlib.AbstractContextManager:
        """The shared style (font sizes, spines) as a matplotlib ``rc_context``."""
        return self._mpl.rc_context(STYLE)

    def to_array(self) -> np.ndarray:
        """Draw the figure and return it as a ``uint8`` array of shape ``(H, W, 3)``."""
        with self.style():  # ticks are made at draw time: give them the style too
            self._agg.draw()
        rgba = np.asarray(self._agg.buffer_rgba())
        return np.ascontiguousarray(rgba[:, :, :3])

    def save(self, path: Any) -> None:
        """Write the figure to ``path`` (the format from its suffix, e.g. ``.png``)."""
        with self.style():
            self.figure.savefig(path, dpi=self.figure.dpi)

    def close(self) -> None:
        self.blank()
        self.memory = {}
        self._episode = None


_GROUPS = ("containers", "patches", "texts", "lines", "collections", "images")


def _drawn(ax: Any) -> list[Any]:
    """The artists drawn in ``ax`` (titles, axis labels and legends belong to the layout)."""
    return [a for group in _GROUPS for a in getattr(ax, group)]


def _wipe(ax: Any, keep: set[int]) -> None:
    """Remove what a frame drew in ``ax``, but not the artists whose ids are in ``keep``."""
    for group in _GROUPS:  # containers first: removing one removes its bars too
        for artist in list(getattr(ax, group)):
            if id(artist) not in keep:
                artist.remove()


# Each env's canvas, kept here (not on the env) while the env lives; ``close()`` drops it.
_CANVASES: weakref.WeakKeyDictionary[Any, Canvas] = weakref.WeakKeyDictionary()


def canvas_for(env: Any) -> Canvas:
    """``env``'s canvas, made on first use (``env.close()`` drops it)."""
    canvas = _CANVASES.get(env)
    if canvas is None:
        canvas = _CANVASES[env] = Canvas()
    return canvas


def kept_canvas(env: Any) -> Canvas | None:
    """``env``'s canvas if it drew a picture since it was built or closed, else None."""
    return _CANVASES.get(env)


def drop_canvas(env: Any) -> None:
    """Close ``env``'s canvas, if it has one (its next picture makes a new one)."""
    canvas = _CANVASES.pop(env, None)
    if canvas is not None:
        canvas.close()


def frame(env: Any, paint: Any) -> np.ndarray:
    """``env``'s current picture: ``paint(canvas, memory)`` draws it on the env's canvas.

    Before the first ``reset`` there is no model to draw: the frame says so (same shape).
    """
    canvas = canvas_for(env)
    with canvas.style():
        memory = canvas.begin(env.sim)
        if getattr(env, "model", None) is None:
            canvas.blank()
            canvas.figure.text(
                0.5, 0.5, f"{env.metadata['name']}: no episode yet (call reset())",
                ha="center", va="center", fontsize=14, color=COLORS["dark"],
            )  # fmt: skip
        else:
            paint(canvas, memory)
    return canvas.to_array()


def header(fig: Any, env: Any, text: str) -> None:
    """The frame's title line: scenario, simulated time, step, then ``text``."""
    fig.suptitle(
        f"{env.metadata['name']}   t = {env.now:,.1f}   step {env.num_steps}   {text}",
        x=0.01, y=0.985, ha="left", va="top", fontsize=11, fontweight="bold",
    )  # fmt: skip
