"""Pictures of the elevator bank: a frame of the building now and a chart of an episode.

Reads the model's state (cars, hall queues, counters) and never changes it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from deszoo.core.canvas import COLORS, frame, header, job_color
from deszoo.envs.elevator.model import DOWN, UP

__all__ = ["Trace", "draw"]

COMPACT_FLOORS = 30  # above this the frame drops per-floor text
COMPACT_CARS = 16
LANE_CARS = 8  # the episode chart gives each car its own strip up to this many


def _oldest(model: Any, now: float) -> tuple[np.ndarray, float]:
    """Longest wait per floor and direction (seconds), and the longest in the building."""
    oldest = np.zeros((model.n_floors, 2))
    for f, (up, down) in enumerate(model.hall):
        if up:
            oldest[f, UP] = now - up[0].arrived
        if down:
            oldest[f, DOWN] = now - down[0].arrived
    return oldest, float(oldest.max()) if oldest.size else 0.0


class Trace:
    """Per-step record of an episode: car positions, queues and waits."""

    def __init__(self) -> None:
        self.times: list[float] = []
        self.floors: list[list[int]] = []
        self.waiting: list[int] = []
        self.riding: list[int] = []
        self.longest: list[float] = []
        self.mean_wait: list[float] = []
        self._step: int | None = None

    def record(self, env: Any) -> None:
        """Read ``env``'s state after ``reset`` or a step."""
        if env.num_steps == self._step:
            return
        self._step = env.num_steps
        model = env.model
        riding = sum(car.load for car in model.cars)
        boarded = model.delivered + riding
        self.times.append(env.now)
        self.floors.append([car.floor for car in model.cars])
        self.waiting.append(model.waiting)
        self.riding.append(riding)
        self.longest.append(_oldest(model, env.now)[1])
        self.mean_wait.append(model.total_wait / boarded if boarded else np.nan)

    def chart(self, fig: Any, env: Any) -> str:
        """Car trajectories, passengers waiting and riding, and waiting times."""
        model = env.model
        # One column of axes (so they line up): the car lanes, then the two panels below.
        n = model.n_cars if model.n_cars <= LANE_CARS else 1
        grid = fig.add_gridspec(n + 2, 1, height_ratios=[2 / n] * n + [1, 1])
        cx = fig.add_subplot(grid[n + 1])
        bx = fig.add_subplot(grid[n], sharex=cx)
        lanes = self._car_lanes(fig, [grid[k] for k in range(n)], model, sharex=cx)
        bx.step(self.times, self.waiting, where="post", color=COLORS["wait"],
                label="waiting at floors")  # fmt: skip
        bx.step(self.times, self.riding, where="post", color=COLORS["busy"], label="riding")
        bx.set_ylabel("passengers")
        bx.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
        cx.step(self.times, self.longest, where="post", color=COLORS["bad"],
                label="longest wait now")  # fmt: skip
        cx.plot(self.times, self.mean_wait, color=COLORS["dark"],
                label="mean wait of those\nboarded so far")  # fmt: skip
        cx.set_ylabel("seconds")
        cx.set_xlabel("simulated time (s)")
        cx.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
        horizon = env.config["horizon"]
        for axis in (*lanes, bx, cx):
            axis.axvline(horizon, color=COLORS["grey"], linestyle=":", linewidth=1)
        bx.text(horizon, bx.get_ylim()[1], "arrivals stop ", color=COLORS["grey"],
                fontsize=8, ha="right", va="top")  # fmt: skip
        for axis in (*lanes, bx):
            axis.tick_params(labelbottom=False)
        delivered = model.delivered
        wait = model.total_wait / max(1, delivered + sum(c.load for c in model.cars))
        journey = model.total_journey / delivered if delivered else float("nan")
        return (
            f"delivered {delivered}/{model.arrived} passengers by t = {env.now:,.0f} s; mean "
            f"wait {wait:.1f} s; mean journey (wait + ride) {journey:.1f} s"
        )


    def _car_lanes(self, fig: Any, cells: list[Any], model: Any, sharex: Any) -> list[Any]:
        """Where each car was: one strip per car (lines over one another would hide each
        other), or with many cars one row per car coloured by floor."""
        floors = np.asarray(self.floors, dtype=float)
        top = model.n_floors - 1
        if model.n_cars > LANE_CARS:
            ax = fig.add_subplot(cells[0], sharex=sharex)
            edges = np.append(self.times, self.times[-1] + 1e-9)
            mesh = ax.pcolormesh(edges, np.arange(model.n_cars + 1) - 0.5, floors.T,
                                 cmap="viridis", vmin=0, vmax=top, shading="flat")
            fig.colorbar(mesh, ax=ax, label="floor", pad=0.01)
            ax.set_ylabel("car")
            ax.set_title("car floors (one row per car, colour: floor at each step)", loc="left")
            return [ax]
        lanes = [fig.add_subplot(cell, sharex=sharex) for cell in cells]
        for c, lane in enumerate(lanes):
            lane.plot(self.times, floors[:, c], color=job_color(c), linewidth=1)
            lane.set_ylim(-0.5, top + 0.5)
            lane.set_yticks([0, top], ["L", str(top)], fontsize=7)
            lane.set_ylabel(f"car_{c}", rotation=0, ha="right", va="center", fontsize=8)
        lanes[0].set_title("car floors (one strip per car; L: lobby)", loc="left")
        return lanes


def draw(env: Any) -> np.ndarray:
    """The building now: waiting passengers per floor and direction, and the cars."""
    return frame(env, lambda canvas, memory: _paint(canvas, env))


def _layout(fig: Any, n_floors: int, n_cars: int) -> tuple[Any, Any]:
    compact = n_floors > COMPACT_FLOORS
    gs = fig.add_gridspec(1, 2, width_ratios=(1, 1.6), left=0.08, right=0.98, top=0.86,
                          bottom=0.1, wspace=0.03)  # fmt: skip
    ax = fig.add_subplot(gs[0])
    ax.set_ylim(-0.5, n_floors - 0.5)
    if compact:
        ax.set_ylabel("floor")
    else:
        ax.set_yticks(range(n_floors), ["lobby"] + [str(f) for f in range(1, n_floors)])
    from matplotlib.patches import Patch
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("passengers waiting (bars grow to the left)")
    handles = [Patch(color=COLORS["wait"], label="going up"),
               Patch(color=COLORS["bad"], label="going down")]  # fmt: skip
    ax.legend(handles=handles, loc="upper left", frameon=False)
    ax.set_title("hall queues: \u25b2 up  \u25bc down  (longest wait)", loc="left")
    bx = fig.add_subplot(gs[1], sharey=ax)
    bx.tick_params(labelleft=False, left=False)
    bx.set_xlim(-0.5, n_cars - 0.5)
    if n_cars <= COMPACT_CARS:
        bx.set_xticks(range(n_cars), [f"car_{c}" for c in range(n_cars)])
    else:
        bx.set_xlabel("car")
    bx.spines["left"].set_visible(False)
    bx.set_title("cars: fill = load, \u2022 = riders' stops, \u25b8 = next stop, "
                 "red edge = deciding", loc="left")  # fmt: skip
    return ax, bx


def _paint(canvas: Any, env: Any) -> None:
    from matplotlib.collections import PatchCollection
    from matplotlib.patches import Rectangle

    model, now = env.model, env.now
    n_f, n_c, cap = model.n_floors, model.n_cars, model.capacity
    compact = n_f > COMPACT_FLOORS or n_c > COMPACT_CARS
    ax, bx = canvas.layout(lambda fig: _layout(fig, n_f, n_c))
    riding = sum(car.load for car in model.cars)
    oldest, longest = _oldest(model, now)
    boarded = model.delivered + riding
    mean = f"{model.total_wait / boarded:.0f} s" if boarded else "-"
    header(canvas.figure, env, f"waiting {model.waiting}   riding {riding}   delivered "
           f"{model.delivered}/{model.arrived}   mean wait {mean}")  # fmt: skip

    counts = np.asarray(model.hall_count, dtype=float)  # (floors, 2)
    floors = np.arange(n_f)
    ax.barh(floors + 0.2, counts[:, UP], height=0.38, color=COLORS["wait"])
    ax.barh(floors - 0.2, counts[:, DOWN], height=0.38, color=COLORS["bad"])
    top = max(4.0, float(counts.max()) * 1.6)
    ax.set_xlim(top, 0)
    if not compact:
        for f in range(n_f):
            for way, dy, mark in ((UP, 0.2, "\u25b2"), (DOWN, -0.2, "\u25bc")):
                k = int(counts[f, way])
                if k:
                    ax.text(counts[f, way] + top * 0.01, f + dy,
                            f"{mark}{k} ({oldest[f, way]:.0f} s)", ha="right", va="center",
                            fontsize=7)  # fmt: skip

    shafts = [Rectangle((c - 0.3, -0.5), 0.6, n_f) for c in range(n_c)]
    bx.add_collection(PatchCollection(shafts, facecolors="#f2f2f2", edgecolors="none"))
    shells, fills, edges, widths = [], [], [], []
    for car in model.cars:
        c = car.index
        deciding = env.needs_action(c)
        shells.append(Rectangle((c - 0.28, car.floor - 0.4), 0.56, 0.8))
        edges.append(COLORS["bad"] if deciding else COLORS["dark"])
        widths.append(2.0 if deciding else 0.8)
        if car.load:
            fills.append(Rectangle((c - 0.28, car.floor - 0.4), 0.56, 0.8 * car.load / cap))
        stops = [f for f in range(n_f) if car.calls[f]]
        bx.plot([c + 0.38] * len(stops), stops, "o", color=COLORS["busy"],
                markersize=3 if compact else 4)  # fmt: skip
        if car.moving or car.target != car.floor:
            bx.plot(c - 0.4, car.target, ">", color=COLORS["dark"],
                    markersize=3 if compact else 6)  # fmt: skip
        if not compact:
            arrow = {1: "\u25b2", -1: "\u25bc"}.get(car.direction, "P" if car.parked else "")
            bx.text(c, car.floor, f"{arrow} {car.load}/{cap}", ha="center", va="center",
                    fontsize=7, color="black")  # fmt: skip
    bx.add_collection(PatchCollection(fills, facecolors=COLORS["other"], edgecolors="none"))
    bx.add_collection(PatchCollection(shells, facecolors="none", edgecolors=edges,
                                      linewidths=widths))  # fmt: skip
    if longest and not compact:
        bx.text(n_c - 0.5, -0.5, f"longest wait now {longest:.0f} s", ha="right",
                va="bottom", fontsize=7, color=COLORS["dark"])  # fmt: skip
