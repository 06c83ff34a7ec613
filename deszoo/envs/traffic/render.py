"""Pictures of the traffic grid: a frame of the network now and a chart of an episode.

Reads the model's state (queues per lane, vehicles per link, signal phases, edge
backlogs) and never changes it. Right-hand traffic: a lane's queue is drawn on the right
of its road, the left-turn lane nearer the centre line.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from deszoo.core.canvas import COLORS, frame, header, job_color
from deszoo.envs.traffic.model import EXIT

__all__ = ["Trace", "draw"]

COMPACT = 16  # intersections; above this the frame drops per-link text
LINES = 9  # intersections; above this the chart shows the mean and max over them
PHASES = ("N-S", "N-S left", "E-W", "E-W left")
TRAVEL = ((0, 1), (1, 0), (0, -1), (-1, 0))  # screen direction of headings N, E, S, W
AMBER = "#F0C000"


def _queued(model: Any) -> np.ndarray:
    """Vehicles waiting per intersection: at its stop lines and in the edge backlog feeding it."""
    n = model.n_nodes
    lanes = np.fromiter((len(q) for q in model.queues), dtype=np.int64, count=8 * n)
    out = lanes.reshape(n, 8).sum(axis=1)
    for link, waiting in model.backlog.items():
        out[link // 4] += waiting
    return out


def _head_waits(model: Any, now: float) -> list[float]:
    return [now - q[0][2] for q in model.queues if q]


class Trace:
    """Per-step record of an episode: queues per intersection, waits and vehicle counts."""

    def __init__(self) -> None:
        self.times: list[float] = []
        self.queued: list[np.ndarray] = []
        self.backlog: list[int] = []
        self.network: list[int] = []
        self.longest: list[float] = []
        self.mean_head: list[float] = []
        self._step: int | None = None

    def record(self, env: Any) -> None:
        """Read ``env``'s state after ``reset`` or a step."""
        if env.num_steps == self._step:
            return
        self._step = env.num_steps
        model = env.model
        waits = _head_waits(model, env.now)
        self.times.append(env.now)
        self.queued.append(_queued(model))
        self.backlog.append(sum(model.backlog.values()))
        self.network.append(model.entered - model.exited)
        self.longest.append(max(waits, default=0.0))
        self.mean_head.append(float(np.mean(waits)) if waits else 0.0)

    def chart(self, fig: Any, env: Any) -> str:
        """Queues per intersection, waiting times at the stop lines, vehicles in the grid."""
        model = env.model
        queued = np.asarray(self.queued)
        t = np.asarray(self.times)
        ax, bx, cx = fig.subplots(3, 1, sharex=True, height_ratios=(2, 1, 1))
        if model.n_nodes <= LINES:
            for i, agent in enumerate(env.possible_agents):
                ax.step(t, queued[:, i], where="post", color=job_color(i), linewidth=1,
                        label=agent)  # fmt: skip
            ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
        else:
            ax.step(t, queued.mean(axis=1), where="post", color=COLORS["busy"],
                    label="mean over intersections")  # fmt: skip
            ax.step(t, queued.max(axis=1), where="post", color=COLORS["bad"], linewidth=0.8,
                    label="largest")  # fmt: skip
            ax.legend(loc="upper left", frameon=False)
        ax.set_ylabel("vehicles")
        ax.set_title("vehicles queued per intersection (stop lines and the edge backlog "
                     "feeding it)", loc="left")  # fmt: skip
        bx.step(t, self.longest, where="post", color=COLORS["bad"],
                label="longest wait of a vehicle first in its lane")  # fmt: skip
        bx.step(t, self.mean_head, where="post", color=COLORS["dark"],
                label="mean over lanes with a queue")  # fmt: skip
        bx.set_ylabel("seconds")
        bx.set_title("waiting at the stop lines (vehicles first in their lane)", loc="left")
        bx.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
        cx.step(t, self.network, where="post", color=COLORS["busy"], label="in the grid")
        cx.step(t, self.backlog, where="post", color=COLORS["wait"],
                label="waiting to enter at the edge")  # fmt: skip
        cx.set_ylabel("vehicles")
        cx.set_xlabel("simulated time (s)")
        cx.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
        cx.set_title("vehicles", loc="left")
        return (
            f"{model.entered} vehicles entered, {model.exited} left the grid by t = "
            f"{env.now:,.0f} s; {model.switches} phase switches; mean queued per "
            f"intersection {queued.mean():.1f}"
        )


def draw(env: Any) -> np.ndarray:
    """The grid now: queues per lane coloured by signal, phases, vehicles on the links."""
    return frame(env, lambda canvas, memory: _paint(canvas, env))


def _xy(model: Any, node: int) -> tuple[float, float]:
    r, c = divmod(node, model.cols)
    return float(c), float(-r)


MAP = (0.01, 0.02, 0.72, 0.84)  # the map's axes in figure fractions
QUEUE_REF = 10  # vehicles in a lane that make a full bar (longer queues are capped)
ROAD, LANE = 0.3, 0.05  # road and lane widths in grid units (intersections 1 apart)


def _points(fig: Any, model: Any, units: float) -> float:
    """A length in grid units as a line width in points (the map keeps its aspect)."""
    w, h = fig.get_size_inches()
    scale = min(MAP[2] * w / (model.cols + 0.5), MAP[3] * h / (model.rows + 0.5))
    return units * scale * 72.0


def _layout(fig: Any, model: Any) -> Any:
    from matplotlib.collections import LineCollection
    from matplotlib.lines import Line2D

    ax = fig.add_axes(MAP)
    ax.set_aspect("equal")
    ax.set_xlim(-0.75, model.cols - 0.25)
    ax.set_ylim(-model.rows + 0.25, 0.75)
    ax.axis("off")
    roads = []
    for link in range(4 * model.n_nodes):  # every incoming link, from upstream to the node
        node, h = divmod(link, 4)
        x, y = _xy(model, node)
        dx, dy = TRAVEL[h]
        upstream = 0.7 if link in model.backlog else 1.0
        roads.append([(x - dx * upstream, y - dy * upstream), (x, y)])
        if model.out_link[4 * node + h] == EXIT:  # the road out of the grid
            roads.append([(x, y), (x + dx * 0.7, y + dy * 0.7)])
    ax.add_collection(LineCollection(roads, colors="#e6e6e6", capstyle="butt", zorder=0,
                                     linewidths=_points(fig, model, ROAD)))  # fmt: skip
    handles = [
        Line2D([], [], color=COLORS["idle"], linewidth=4, label="queue, green light"),
        Line2D([], [], color=COLORS["bad"], linewidth=4, label="queue, red light"),
        Line2D([], [], color=AMBER, linewidth=4, label="queue, clearance (all red)"),
        Line2D([], [], color="none", label=f"full bar: {QUEUE_REF} or more vehicles"),
    ]
    fig.legend(handles=handles, loc="upper left", bbox_to_anchor=(0.74, 0.84), frameon=False,
               fontsize=8)  # fmt: skip
    fig.text(0.745, 0.56, "in the squares: the signal's phase\n(red edge: deciding now)\n"
             "grey numbers: vehicles driving\non the link\norange numbers: vehicles "
             "waiting\nto enter at the edge\nright-hand traffic; left-turn lane\nnearer "
             "the centre line", va="top", fontsize=8, color=COLORS["dark"],
             linespacing=1.4)  # fmt: skip
    return ax


def _paint(canvas: Any, env: Any) -> None:
    from matplotlib.collections import LineCollection, PatchCollection
    from matplotlib.patches import Rectangle

    model = env.model
    ax = canvas.layout(lambda fig: _layout(fig, model))
    n = model.n_nodes
    compact = n > COMPACT
    queued = _queued(model)
    header(canvas.figure, env, f"queued {int(queued.sum())}   in the grid "
           f"{model.entered - model.exited}   left {model.exited}   switches "
           f"{model.switches}")  # fmt: skip
    segments, colors = [], []
    for lane in range(8 * n):
        q = len(model.queues[lane])
        if not q:
            continue
        node, slot = divmod(lane, 8)
        h, kind = divmod(slot, 2)
        x, y = _xy(model, node)
        dx, dy = TRAVEL[h]
        side = LANE * (0.8 if kind == 1 else 2.0)  # left-turn lane nearer the centre line
        ox, oy = x + dy * side, y - dx * side  # right of the direction of travel
        start, length = 0.13, 0.42 * min(1.0, q / QUEUE_REF)
        segments.append([(ox - dx * start, oy - dy * start),
                         (ox - dx * (start + length), oy - dy * (start + length))])
        if model.in_clearance[node]:
            colors.append(AMBER)
        else:
            colors.append(COLORS["idle"] if model.green[lane] else COLORS["bad"])
    ax.add_collection(LineCollection(segments, colors=colors, capstyle="butt",
                                     linewidths=_points(canvas.figure, model, LANE)))
    boxes, edges = [], []
    for node in range(n):
        x, y = _xy(model, node)
        boxes.append(Rectangle((x - 0.12, y - 0.12), 0.24, 0.24))
        edges.append(COLORS["bad"] if env.needs_action(node) else COLORS["dark"])
        if not compact:
            label = "clear" if model.in_clearance[node] else PHASES[model.phase[node]]
            ax.text(x, y, label.replace(" ", "\n"), ha="center", va="center", fontsize=7)
    ax.add_collection(PatchCollection(boxes, facecolors="white", edgecolors=edges,
                                      linewidths=1.5))  # fmt: skip
    if compact:
        return
    for link in range(4 * n):
        node, h = divmod(link, 4)
        moving = model.count[link] - model.queued_on[link]
        x, y = _xy(model, node)
        dx, dy = TRAVEL[h]
        if moving:  # on its own (right-hand) side, beyond the longest queue bar
            ax.text(x - dx * 0.64 + dy * 0.1, y - dy * 0.64 - dx * 0.1, str(moving),
                    ha="center", va="center", fontsize=7, color=COLORS["grey"])  # fmt: skip
        waiting = model.backlog.get(link, 0)
        if waiting:
            ax.text(x - dx * 0.8 + dy * 0.1, y - dy * 0.8 - dx * 0.1, f"+{waiting}",
                    ha="center", va="center", fontsize=8, color=COLORS["wait"],
                    fontweight="bold")  # fmt: skip
