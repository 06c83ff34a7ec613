"""Pictures of the warehouse: a frame of the floor now and a chart of an episode.

Reads the model's state (robots' positions and batches, open orders, aisle and station
loads) and never changes it. The model counts a robot's lines left but not which of its
batch's lines are picked, so the frame marks every line of a batch on tour.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from deszoo.core.canvas import COLORS, frame, header, job_color

__all__ = ["Trace", "draw"]

COMPACT_ROBOTS = 8  # above this the frame drops the robots' labels and status lines
COMPACT_AISLES = 16  # above this the frame drops the aisles' labels


class Trace:
    """Per-step record of an episode: orders open, on tour and delivered, their ages, robots."""

    def __init__(self) -> None:
        self.times: list[float] = []
        self.open: list[int] = []
        self.on_tour: list[int] = []
        self.delivered: list[int] = []
        self.oldest: list[float] = []
        self.mean_age: list[float] = []
        self.busy: list[int] = []
        self.in_aisles: list[int] = []
        self.at_stations: list[int] = []
        self._step: int | None = None

    def record(self, env: Any) -> None:
        """Read ``env``'s state after ``reset`` or a step."""
        if env.num_steps == self._step:
            return
        self._step = env.num_steps
        model, now = env.model, env.now
        ages = [now - o.arrival for o in model.open]
        self.times.append(now)
        self.open.append(len(model.open))
        self.on_tour.append(sum(len(b) for b in model.batch))
        self.delivered.append(model.delivered)
        self.oldest.append(max(ages, default=0.0))
        self.mean_age.append(float(np.mean(ages)) if ages else 0.0)
        self.busy.append(sum(model.busy))
        self.in_aisles.append(sum(model.aisle_load))
        self.at_stations.append(sum(model.station_load))

    def chart(self, fig: Any, env: Any) -> str:
        """Orders waiting and delivered, how long they wait, and what the robots do."""
        model = env.model
        t = np.asarray(self.times) / 60.0
        ax, bx, cx = fig.subplots(3, 1, sharex=True)
        ax.step(t, self.open, where="post", color=COLORS["wait"],
                label="open (waiting for a robot)")  # fmt: skip
        ax.step(t, self.on_tour, where="post", color=COLORS["busy"],
                label="in robots' batches (taken, not yet dropped)")  # fmt: skip
        ax.set_ylabel("orders")
        ax.set_title("orders in the system", loc="left")
        dx = ax.twinx()
        dx.step(t, self.delivered, where="post", color=COLORS["idle"], label="delivered so far")
        dx.set_ylabel("orders delivered")
        dx.spines["right"].set_visible(True)
        handles = ax.get_legend_handles_labels()[0] + dx.get_legend_handles_labels()[0]
        ax.legend(handles=handles, loc="upper left", frameon=False)
        bx.step(t, np.asarray(self.oldest) / 60.0, where="post", color=COLORS["bad"],
                label="oldest open order")  # fmt: skip
        bx.step(t, np.asarray(self.mean_age) / 60.0, where="post", color=COLORS["dark"],
                label="mean over open orders")  # fmt: skip
        bx.set_ylabel("minutes")
        bx.set_title("how long the open orders have waited", loc="left")
        bx.legend(loc="upper left", frameon=False)
        cx.step(t, self.busy, where="post", color=COLORS["busy"], label="on a tour")
        cx.step(t, self.in_aisles, where="post", color=COLORS["move"],
                label="in an aisle or waiting at its entry")  # fmt: skip
        cx.step(t, self.at_stations, where="post", color=COLORS["wait"],
                label="dropping or waiting at a station")  # fmt: skip
        cx.set_ylim(0, model.n_robots + 0.5)
        cx.set_ylabel("robots")
        cx.set_title("robots", loc="left")
        cx.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
        cx.set_xlabel("simulated time (minutes)")
        return (
            f"{model.delivered}/{model.n_orders} orders delivered by t = {env.now / 60:,.1f} "
            f"min; largest backlog of open orders {max(self.open)}; longest wait of an open "
            f"order {max(self.oldest) / 60:.1f} min"
        )


def _marker(model: Any, size: float) -> float:
    """Marker size in points: ``size`` on narrow floors, smaller where aisles are many."""
    pixels_per_aisle = 0.6 * 960 / (model.n_aisles + 0.6)
    return min(size, 0.45 * pixels_per_aisle * 0.72)


def draw(env: Any) -> np.ndarray:
    """The floor now: aisles, stations, open orders' lines, robots and their batches."""
    return frame(env, lambda canvas, memory: _paint(canvas, env))


def _layout(fig: Any, model: Any) -> tuple[Any, Any, Any]:
    from matplotlib.collections import PatchCollection
    from matplotlib.lines import Line2D
    from matplotlib.patches import Rectangle

    A, L = model.n_aisles, model.length
    ax = fig.add_axes((0.05, 0.05, 0.6, 0.8))
    ax.set_xlim(-0.8, A - 0.2)
    ax.set_ylim(-2.6, L + 0.8)
    ax.set_xticks(range(A) if A <= COMPACT_AISLES else [])
    ax.set_yticks([])
    for side in ("left", "bottom"):
        ax.spines[side].set_visible(False)
    ax.tick_params(bottom=False, pad=0)
    shelves = [Rectangle((a - 0.5, -0.5), 0.16, L) for a in range(A)]
    shelves += [Rectangle((a + 0.34, -0.5), 0.16, L) for a in range(A)]
    ax.add_collection(PatchCollection(shelves, facecolors="#d9d9d9", edgecolors="none"))
    for a in range(A):  # one-way aisles: even ones front to back, odd ones back to front
        ax.annotate("", (a, L - 0.7 if a % 2 == 0 else -0.3), (a, -0.3 if a % 2 == 0 else L - 0.7),
                    arrowprops={"arrowstyle": "->", "color": "#eeeeee", "linewidth": 6},
                    zorder=0.5)  # fmt: skip
    ax.text(-0.75, -1, "front", va="center", fontsize=7, color=COLORS["grey"], rotation=90)
    ax.text(-0.75, L, "back", va="center", fontsize=7, color=COLORS["grey"], rotation=90)
    for s, x in enumerate(model.station_x):
        ax.add_patch(Rectangle((x - 0.35, -2.45), 0.7, 0.6, facecolor="white",
                               edgecolor=COLORS["dark"]))  # fmt: skip
        if len(model.station_x) <= COMPACT_ROBOTS:
            ax.text(x, -2.55, f"station {s}", ha="center", va="top", fontsize=7)
    ax.set_title("aisles (one-way, arrows), stations at the front", loc="left")
    handles = [
        Line2D([], [], marker="s", linestyle="", color=COLORS["wait"], markersize=5,
               label="line of an open order"),
        Line2D([], [], marker="o", linestyle="", markerfacecolor="none",
               markeredgecolor=job_color(0), markersize=6, label="line of a robot's batch"),
        Line2D([], [], marker="o", linestyle="", color=job_color(0), markersize=8,
               label="robot on a tour"),
        Line2D([], [], marker="o", linestyle="", markerfacecolor="white",
               markeredgecolor=job_color(0), markeredgewidth=2, markersize=8,
               label="robot free"),
        Line2D([], [], marker="o", linestyle="", markerfacecolor="white",
               markeredgecolor=COLORS["bad"], markeredgewidth=2, markersize=8,
               label="deciding now"),
    ]  # fmt: skip
    fig.legend(handles=handles, loc="upper left", bbox_to_anchor=(0.67, 0.86), frameon=False,
               fontsize=8, title="colour: robot", title_fontsize=8)  # fmt: skip
    bx = fig.add_axes((0.8, 0.06, 0.16, 0.24))
    bx.set_yticks(range(4), ["not arrived", "open", "in batches", "delivered"], fontsize=8)
    bx.set_ylim(3.5, -0.5)
    bx.set_xlim(0, model.n_orders * 1.25)
    bx.set_xticks([])
    bx.spines["bottom"].set_visible(False)
    bx.set_title("orders", loc="left")
    status = fig.text(0.67, 0.56, "", va="top", fontsize=8, linespacing=1.5)
    return ax, bx, status


def _paint(canvas: Any, env: Any) -> None:
    model = env.model
    ax, bx, status = canvas.layout(lambda fig: _layout(fig, model))
    R, L = model.n_robots, model.length
    header(canvas.figure, env, f"open {len(model.open)}   delivered "
           f"{model.delivered}/{model.n_orders}   robots on tour {sum(model.busy)}/{R}")

    xs, ys = [], []
    for order in model.open:
        for a, cells in order.picks.items():
            for y in cells:
                xs.append(a)
                ys.append(y)
    ax.plot(xs, ys, "s", color=COLORS["wait"], markersize=_marker(model, 6), zorder=2.5)
    for r in range(R):
        color = job_color(r)
        bxs, bys = [], []
        for order in model.batch[r]:
            for a, cells in order.picks.items():
                for y in cells:
                    bxs.append(a + 0.12)
                    bys.append(y)
        ax.plot(bxs, bys, "o", markerfacecolor="none", markeredgecolor=color,
                markersize=_marker(model, 6))  # fmt: skip
    at = {}
    for r in range(R):  # robots on the same spot of a cross-aisle sit side by side
        key = (model.x[r], model.y[r])
        at[key] = at.get(key, 0) + 1
    seen: dict[tuple[float, float], int] = {}
    rx, ry, faces, edges, widths = [], [], [], [], []
    for r in range(R):
        key = (model.x[r], model.y[r])
        k = seen.get(key, 0)
        seen[key] = k + 1
        spread = 0.22 * (k - (at[key] - 1) / 2)
        rx.append(model.x[r] + spread)
        ry.append(model.y[r] if model.y[r] < L else L + 0.1)
        color = job_color(r)
        faces.append(color if model.busy[r] else "white")
        deciding = env.needs_action(r)
        edges.append(COLORS["bad"] if deciding else color)
        widths.append(2.0 if deciding or not model.busy[r] else 0.8)
    size = _marker(model, 9.5) ** 2
    ax.scatter(rx, ry, s=size, c=faces, edgecolors=edges, linewidths=widths, zorder=3)
    if R <= COMPACT_ROBOTS:
        for r in range(R):
            ax.text(rx[r], ry[r] + 0.55, str(r), ha="center", va="bottom", fontsize=7,
                    color=COLORS["dark"])  # fmt: skip
    for s, x in enumerate(model.station_x):
        if model.station_load[s]:
            ax.text(x, -2.15, str(model.station_load[s]), ha="center", va="center",
                    fontsize=8, fontweight="bold")  # fmt: skip
    if R <= COMPACT_ROBOTS:
        lines = []
        for r in range(R):
            batch = len(model.batch[r])
            if model.busy[r]:
                lines.append(f"robot_{r}: tour, {batch} orders, {model.lines_left[r]} lines left")
            else:
                lines.append(f"robot_{r}: free, {batch} in batch")
        status.set_text("\n".join(lines))
    on_tour = sum(len(b) for b in model.batch)
    values = [model.n_orders - model.released, len(model.open), on_tour, model.delivered]
    bx.barh(range(4), values, color=[COLORS["grey"], COLORS["wait"], COLORS["busy"],
                                     COLORS["idle"]], height=0.7)  # fmt: skip
    for k, v in enumerate(values):
        bx.text(v, k, f" {v}", va="center", fontsize=8)
