"""Pictures of ride hailing: a frame of the city now and a chart of an episode.

Reads the model's state (drivers' states and zones, open requests, counters) and the
env's per-step rewards (``rew_buf``) and never changes them. While a driver drives, the
model knows only where it is going, so the frame draws it in that zone.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from deszoo.core.canvas import COLORS, frame, header
from deszoo.envs.ridehail.model import BUSY, GONE, IDLE, MOVING, OFF

__all__ = ["Trace", "draw"]

COMPACT = 36  # zones; above this the frame drops per-zone text
STATES = (  # state, label, colour (drawing order of the chart's stacked areas)
    (IDLE, "idle", COLORS["idle"]),
    (BUSY, "with rider", COLORS["busy"]),
    (MOVING, "repositioning", COLORS["move"]),
    (OFF, "not started", "#dddddd"),
    (GONE, "logged off", "#aaaaaa"),
)


class Trace:
    """Per-step record of an episode: requests, drivers by state and earnings."""

    def __init__(self) -> None:
        self.times: list[float] = []
        self.open: list[int] = []
        self.states: list[np.ndarray] = []
        self.served: list[int] = []
        self.cancelled: list[int] = []
        self.reward: list[float] = []
        self._total = 0.0
        self._step: int | None = None

    def record(self, env: Any) -> None:
        """Read ``env``'s state after ``reset`` or a step."""
        if env.num_steps == self._step:
            return
        self._step = env.num_steps
        model = env.model
        self._total += float(env.rew_buf.sum())
        self.times.append(env.now)
        self.open.append(len(model.open))
        self.states.append(np.bincount(np.asarray(model.state), minlength=5))
        self.served.append(model.served)
        self.cancelled.append(model.cancelled)
        self.reward.append(self._total)

    def chart(self, fig: Any, env: Any) -> str:
        """Open requests, drivers by state, rides and earnings over the day."""
        from matplotlib.ticker import MaxNLocator

        model = env.model
        hours = np.asarray(self.times) / 3600.0
        ax, bx, cx = fig.subplots(3, 1, sharex=True)
        ax.step(hours, self.open, where="post", color=COLORS["wait"], label="open requests")
        ax.set_ylabel("requests")
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_title("open requests (made, not yet accepted or cancelled)", loc="left")
        states = np.asarray(self.states)
        bx.stackplot(hours, *[states[:, s] for s, _, _ in STATES], step="post",
                     colors=[c for *_, c in STATES], labels=[lab for _, lab, _ in STATES])
        bx.set_ylabel("drivers")
        bx.set_ylim(0, model.n_drivers)
        bx.set_title("drivers by state (with rider: driving to the pickup or with the rider; "
                     "not started: shift not begun)", loc="left")  # fmt: skip
        bx.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
        cx.plot(hours, self.reward, color=COLORS["dark"],
                label="earnings, all drivers\n(fares minus driving costs)")  # fmt: skip
        cx.set_ylabel("money")
        dx = cx.twinx()
        dx.step(hours, self.served, where="post", color=COLORS["busy"], label="rides completed")
        dx.step(hours, self.cancelled, where="post", color=COLORS["bad"],
                label="requests cancelled")  # fmt: skip
        dx.set_ylabel("count so far")
        dx.spines["right"].set_visible(True)
        handles = cx.get_legend_handles_labels()[0] + dx.get_legend_handles_labels()[0]
        cx.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.06, 1.0), frameon=False)
        cx.set_title("earnings and rides so far", loc="left")
        cx.set_xlabel("simulated time (hours)")
        return (
            f"{model.n_requests} requests: {model.served} rides completed, {model.cancelled} "
            f"cancelled; earnings {self.reward[-1]:,.0f} (fares minus driving costs)"
        )


def draw(env: Any) -> np.ndarray:
    """The city now: open requests per zone, drivers by state, and the day's demand."""
    return frame(env, lambda canvas, memory: _paint(canvas, env))


def _layout(fig: Any, model: Any) -> tuple[Any, ...]:
    from matplotlib.lines import Line2D
    from matplotlib.ticker import MaxNLocator

    gs = fig.add_gridspec(3, 2, width_ratios=(1.5, 1), left=0.02, right=0.97, top=0.86,
                          bottom=0.12, wspace=0.25, hspace=0.9)  # fmt: skip
    ax = fig.add_subplot(gs[:, 0])
    ax.set_xlim(-0.5, model.zx - 0.5)
    ax.set_ylim(model.zy - 0.5, -0.5)
    ax.set_aspect("equal")
    ax.set_xticks([])
    ax.set_yticks([])
    for spine in ax.spines.values():
        spine.set_visible(False)
    ax.set_title("zones: shade and number = open requests; dots = drivers", loc="left")
    for x in range(model.zx + 1):
        ax.plot([x - 0.5, x - 0.5], [-0.5, model.zy - 0.5], color="white", linewidth=2, zorder=2)
    for y in range(model.zy + 1):
        ax.plot([-0.5, model.zx - 0.5], [y - 0.5, y - 0.5], color="white", linewidth=2, zorder=2)
    handles = [
        Line2D([], [], marker="o", linestyle="", color=c, label=lab) for _, lab, c in STATES[:3]
    ] + [Line2D([], [], marker="o", linestyle="", markerfacecolor=COLORS["idle"],
                markeredgecolor=COLORS["bad"], markeredgewidth=2, label="deciding now")]
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, 0.0), frameon=False,
              fontsize=8, ncols=4, handletextpad=0.2, columnspacing=1.0)  # fmt: skip
    ax.text(0.5, -0.09, "a driving driver is drawn in the zone it is driving to",
            transform=ax.transAxes, ha="center", va="top", fontsize=7, color=COLORS["grey"])
    bx = fig.add_subplot(gs[0, 1])
    bx.set_title("drivers", loc="left")
    bx.set_yticks(range(len(STATES)), [lab for _, lab, _ in STATES], fontsize=7)
    bx.set_ylim(len(STATES) - 0.5, -0.5)
    bx.set_xlim(0, model.n_drivers * 1.1)
    cx = fig.add_subplot(gs[1, 1])
    cx.set_title("requests so far", loc="left")
    cx.set_yticks(range(3), ["open now", "completed", "cancelled"], fontsize=7)
    cx.set_ylim(2.5, -0.5)
    for axis in (bx, cx):  # the counts are written at the bars: no x ticks (they cost)
        axis.set_xticks([])
        axis.spines["bottom"].set_visible(False)
    dx = fig.add_subplot(gs[2, 1])
    day = np.linspace(0, model.horizon, 200, endpoint=False)
    dx.plot(day / 3600, [model.rate_factor(t) for t in day], color=COLORS["grey"])
    dx.set_xlim(0, model.horizon / 3600)
    dx.set_ylim(0, 1.5)
    dx.set_yticks([0, 1])
    dx.xaxis.set_major_locator(MaxNLocator(5))
    dx.set_xlabel("hour of the day")
    dx.set_title("demand intensity (1 = day average)", loc="left")
    return ax, bx, cx, dx


def _paint(canvas: Any, env: Any) -> None:
    model, now = env.model, env.now
    ax, bx, cx, dx = canvas.layout(lambda fig: _layout(fig, model))
    zx, zy, Z = model.zx, model.zy, model.n_zones
    state = np.asarray(model.state)
    counts = np.bincount(state, minlength=5)
    header(canvas.figure, env, f"requests open {len(model.open)}   completed {model.served}"
           f"   cancelled {model.cancelled}")  # fmt: skip

    open_by_zone = np.bincount([r.origin for r in model.open.values()], minlength=Z)
    grid = open_by_zone.reshape(zy, zx)
    vmax = max(4, int(grid.max()))
    ax.imshow(grid, cmap="Oranges", vmin=0, vmax=vmax * 1.3, origin="upper",
              extent=(-0.5, zx - 0.5, zy - 0.5, -0.5))  # fmt: skip
    if Z <= COMPACT:
        for z in range(Z):
            if open_by_zone[z]:
                ax.text(z % zx + 0.42, z // zx - 0.42, str(open_by_zone[z]), ha="right",
                        va="top", fontsize=10, fontweight="bold", color=COLORS["bad"])
    on = np.flatnonzero((state == IDLE) | (state == BUSY) | (state == MOVING))
    zone = np.asarray(model.zone)[on]
    xs, ys, colors, edges = [], [], [], []
    per_zone = np.bincount(zone, minlength=Z)
    side = max(1, int(np.ceil(np.sqrt(per_zone.max() if len(zone) else 1))))
    slot = np.zeros(Z, dtype=int)
    palette = {s: c for s, _, c in STATES}
    for i, z in zip(on.tolist(), zone.tolist(), strict=True):
        k = slot[z]
        slot[z] += 1
        xs.append(z % zx - 0.32 + 0.64 * (k % side + 0.5) / side)
        ys.append(z // zx - 0.25 + 0.6 * (k // side + 0.5) / side)
        colors.append(palette[int(state[i])])
        edges.append(COLORS["bad"] if env.needs_action(i) else "white")
    size = max(6.0, min(80.0, 2400.0 / (side * max(zx, zy)) ** 2))
    ax.scatter(xs, ys, s=size, c=colors, edgecolors=edges, linewidths=1.2, zorder=3)

    values = [counts[s] for s, _, _ in STATES]
    bx.barh(range(len(STATES)), values, color=[c for *_, c in STATES], height=0.7)
    for k, v in enumerate(values):
        bx.text(v, k, f" {v}", va="center", fontsize=7)
    req = [len(model.open), model.served, model.cancelled]
    cx.barh(range(3), req, color=[COLORS["wait"], COLORS["busy"], COLORS["bad"]], height=0.7)
    cx.set_xlim(0, max(10, model.n_requests) * 1.15)
    for k, v in enumerate(req):
        cx.text(v, k, f" {v}", va="center", fontsize=7)
    dx.axvline(now / 3600, color=COLORS["bad"], linewidth=1.5)
