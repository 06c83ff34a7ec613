"""Pictures of load balancing: a frame of the pools now and a chart of an episode.

Reads the model's state (pools, counters) and never changes it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from deszoo.core.canvas import COLORS, frame, header, job_color

__all__ = ["Trace", "draw"]

COMPACT = 16  # pools; above this the frame drops per-pool text
LINES = 8  # pools; above this the chart shows the mean and max over pools


class Trace:
    """Per-step record of an episode: each pool's queue, busy servers and expected wait."""

    def __init__(self) -> None:
        self.times: list[float] = []
        self.waiting: list[list[int]] = []
        self.busy: list[list[int]] = []
        self.expected: list[list[float]] = []
        self.lost: list[int] = []
        self.served: list[int] = []
        self._step: int | None = None

    def record(self, env: Any) -> None:
        """Read ``env``'s state after ``reset`` or a step."""
        if env.num_steps == self._step:
            return
        self._step = env.num_steps
        model = env.model
        self.times.append(env.now)
        self.waiting.append([p.waiting for p in model.pools])
        self.busy.append([p.busy for p in model.pools])
        self.expected.append([p.expected_wait() for p in model.pools])
        self.lost.append(sum(model.blocked) + sum(model.abandoned))
        self.served.append(sum(model.served))

    def chart(self, fig: Any, env: Any) -> str:
        """Queue lengths, expected waits and utilisation per pool; losses over time."""
        from matplotlib.ticker import MaxNLocator

        model = env.model
        servers = np.array([p.servers for p in model.pools], dtype=float)
        ax, bx, cx = fig.subplots(3, 1, sharex=True)
        waiting, expected = np.asarray(self.waiting), np.asarray(self.expected)
        busy = np.asarray(self.busy) / servers
        for axis, data, what in ((ax, waiting, "requests waiting"),
                                 (bx, expected, "expected wait of a request joining")):
            if len(servers) <= LINES:
                for k in range(len(servers)):
                    axis.step(self.times, data[:, k], where="post", color=job_color(k),
                              linewidth=1, label=f"pool_{k} ({servers[k]:.0f} servers)")
            else:
                axis.step(self.times, data.mean(axis=1), where="post", color=COLORS["busy"],
                          label="mean over pools")
                axis.step(self.times, data.max(axis=1), where="post", color=COLORS["bad"],
                          linewidth=0.8, label="largest pool value")
            axis.set_title(what, loc="left")
        ax.axhline(model.queue_cap, color=COLORS["grey"], linestyle=":", linewidth=1)
        ax.text(0, model.queue_cap, "waiting room full", color=COLORS["grey"], fontsize=8,
                va="bottom")
        ax.set_ylabel("requests")
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        ax.legend(loc="upper right", frameon=False, ncols=2)
        bx.set_ylabel("mean service times")
        cx.step(self.times, busy.mean(axis=1), where="post", color=COLORS["busy"],
                linewidth=0.8)  # fmt: skip
        cx.set_ylim(0, 1.05)
        cx.set_ylabel("busy servers / servers", color=COLORS["busy"])
        dx = cx.twinx()
        dx.step(self.times, self.lost, where="post", color=COLORS["bad"], linewidth=1.5)
        dx.set_ylabel("requests lost so far", color=COLORS["bad"])
        dx.spines["right"].set_visible(True)
        cx.set_title("utilisation, mean over pools (left axis) and requests lost so far, "
                     "blocked or abandoned (right axis)", loc="left")  # fmt: skip
        cx.set_xlabel("simulated time (mean service times)")
        for axis in (ax, bx, cx):
            axis.axvline(env.config["horizon"], color=COLORS["grey"], linestyle=":")
        arrived = sum(model.arrivals)
        return (
            f"{arrived} requests: {sum(model.served)} served, {sum(model.blocked)} blocked, "
            f"{sum(model.abandoned)} abandoned ({self.lost[-1] / max(1, arrived):.1%} lost)   "
            "(dotted line: arrivals stop)"
        )


def draw(env: Any) -> np.ndarray:
    """The pools now: busy servers and waiting requests against capacity, and the sources."""
    return frame(env, lambda canvas, memory: _paint(canvas, env))


def _layout(fig: Any, model: Any, n_sources: int) -> tuple[Any, Any]:
    from matplotlib.patches import Patch

    n = len(model.pools)
    gs = fig.add_gridspec(1, 2, width_ratios=(2.2, 1), left=0.07, right=0.98, top=0.86,
                          bottom=0.1, wspace=0.25)  # fmt: skip
    ax = fig.add_subplot(gs[0])
    ax.set_xlim(-0.6, n - 0.4)
    top = max(model.servers) + model.queue_cap
    ax.set_ylim(0, top * 1.12)
    if n <= COMPACT:
        ax.set_xticks(range(n), [f"pool_{k}" for k in range(n)])
    else:
        ax.set_xlabel("pool")
    ax.set_ylabel("requests")
    ax.set_title("pools: servers (lower box) and waiting room (upper box)", loc="left", pad=16)
    handles = [Patch(color=COLORS["busy"], label="in service"),
               Patch(color=COLORS["wait"], label="waiting"),
               Patch(facecolor="none", edgecolor=COLORS["bad"], linewidth=2, label="full")]
    ax.legend(handles=handles, loc="lower left", bbox_to_anchor=(0, 1), ncols=3,
              frameon=False, fontsize=7, borderaxespad=0.1, handlelength=1)  # fmt: skip
    bx = fig.add_subplot(gs[1])
    labels = [f"dispatcher_{d}" for d in range(n_sources)]
    if model.background_rate > 0:
        labels.append("background")
    bx.set_yticks(range(len(labels)), labels if len(labels) <= COMPACT else None)
    bx.set_ylim(len(labels) - 0.5, -0.5)
    bx.set_xlabel("requests so far")
    bx.set_title("per source (\u25b6 routing one now)", loc="left", pad=16)
    handles = [Patch(color=COLORS["idle"], label="served"),
               Patch(color=COLORS["other"], label="in the system"),
               Patch(color=COLORS["bad"], label="lost")]
    bx.legend(handles=handles, loc="lower left", bbox_to_anchor=(0, 1), ncols=3,
              frameon=False, fontsize=7, borderaxespad=0.1, handlelength=1)  # fmt: skip
    return ax, bx


def _paint(canvas: Any, env: Any) -> None:
    from matplotlib.collections import PatchCollection
    from matplotlib.patches import Rectangle

    model = env.model
    pools = model.pools
    n, cap = len(pools), model.queue_cap
    n_sources = len(model.arrivals) - 1
    ax, bx = canvas.layout(lambda fig: _layout(fig, model, n_sources))
    served, blocked, abandoned = sum(model.served), sum(model.blocked), sum(model.abandoned)
    header(canvas.figure, env, f"arrived {sum(model.arrivals)}   served {served}   blocked "
           f"{blocked}   abandoned {abandoned}   in the system {model.in_system}")  # fmt: skip

    outline, outline_c, outline_w, filled, filled_c = [], [], [], [], []
    for k, pool in enumerate(pools):
        c = pool.servers
        full = pool.full()
        outline += [Rectangle((k - 0.35, 0), 0.7, c), Rectangle((k - 0.35, c), 0.7, cap)]
        outline_c += [COLORS["bad"] if full else COLORS["dark"]] * 2
        outline_w += [2.0 if full else 0.8] * 2
        if pool.busy:
            filled.append(Rectangle((k - 0.35, 0), 0.7, pool.busy))
            filled_c.append(COLORS["busy"])
        if pool.waiting:
            filled.append(Rectangle((k - 0.35, c), 0.7, pool.waiting))
            filled_c.append(COLORS["wait"])
        if n <= COMPACT:
            w = pool.expected_wait()
            ax.text(k, c + cap, f"{pool.busy}/{c} busy\n{pool.waiting}/{cap} waiting\n"
                    f"E[wait] {w:.2f}", ha="center", va="bottom", fontsize=7)  # fmt: skip
    ax.add_collection(PatchCollection(filled, facecolors=filled_c, edgecolors="none"))
    ax.add_collection(PatchCollection(outline, facecolors="none", edgecolors=outline_c,
                                      linewidths=outline_w))  # fmt: skip

    rows = n_sources + (1 if model.background_rate > 0 else 0)
    idx = list(range(n_sources)) + ([-1] if rows > n_sources else [])
    served = np.array([model.served[d] for d in idx], dtype=float)
    lost = np.array([model.blocked[d] + model.abandoned[d] for d in idx], dtype=float)
    arrived = np.array([model.arrivals[d] for d in idx], dtype=float)
    inside = arrived - served - lost
    y = np.arange(rows)
    bx.barh(y, served, height=0.6, color=COLORS["idle"])
    bx.barh(y, inside, left=served, height=0.6, color=COLORS["other"])
    bx.barh(y, lost, left=served + inside, height=0.6, color=COLORS["bad"])
    bx.set_xlim(0, max(10.0, float(arrived.max()) * 1.05))
    deciding = [d for d in range(n_sources) if env.needs_action(d)]
    bx.plot([0] * len(deciding), deciding, ">", color=COLORS["bad"], markersize=7,
            clip_on=False)  # fmt: skip
