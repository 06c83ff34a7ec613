"""Pictures of the supply chain: a frame of the chain now and a chart of an episode.

Reads the model's state (stock, backlog, pipeline and orders per node) and never
changes it. Goods in transit are not kept per shipment by the model, so the pipeline is
each node's ``on_order`` (ordered, not yet received).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from deszoo.core.canvas import COLORS, frame, header, job_color

__all__ = ["Trace", "draw"]

COMPACT = 6  # nodes in an echelon; above this the frame drops per-node text
LINES = 8  # the chart has a panel per node up to 2 * LINES nodes, else one per echelon
HISTORY = 40  # periods of orders shown in the frame
FIELDS = (  # model attribute, label, colour
    ("on_hand", "on hand", COLORS["idle"]),
    ("backlog", "backlog", COLORS["bad"]),
    ("on_order", "on order", COLORS["move"]),
)


def _echelons(env: Any) -> list[str]:
    """Echelon names from the agent names, retailers first."""
    names: list[str] = []
    for agent in env.possible_agents:
        title = agent.rsplit("_", 1)[0]
        if title not in names:
            names.append(title)
    return names


class Trace:
    """Per-step (per-period) record of an episode: every node's stock, backlog and orders."""

    def __init__(self) -> None:
        self.times: list[float] = []
        self.values: dict[str, list[list[float]]] = {
            f: [] for f in ("on_hand", "backlog", "on_order", "last_order", "last_demand")
        }
        self._step: int | None = None

    @property
    def orders(self) -> list[list[float]]:
        return self.values["last_order"]

    def record(self, env: Any) -> None:
        """Read ``env``'s state after ``reset`` or a step."""
        if env.num_steps == self._step:
            return
        self._step = env.num_steps
        model = env.model
        self.times.append(env.now)
        for f, rows in self.values.items():
            rows.append(list(getattr(model, f)))

    def chart(self, fig: Any, env: Any) -> str:
        """One panel per node (per echelon, summed, for wide chains): on hand and backlog
        as areas, orders placed and demand received as lines, over the periods."""
        model = env.model
        level = np.asarray(model.level)
        names = _echelons(env)
        data = {f: np.asarray(v, dtype=float) for f, v in self.values.items()}
        if model.n_nodes <= 2 * LINES:
            rows = [(env.possible_agents[i], [i]) for i in range(model.n_nodes)]
        else:
            rows = [(f"{name}s (sum of {model.widths[lvl]})", np.flatnonzero(level == lvl))
                    for lvl, name in enumerate(names)]  # fmt: skip
        chain = all(w == 1 for w in model.widths)
        axes = np.atleast_1d(fig.subplots(len(rows), 1, sharex=True, sharey=chain))
        t = np.asarray(self.times)
        for ax, (label, nodes) in zip(axes, rows, strict=True):
            get = {f: v[:, nodes].sum(axis=1) for f, v in data.items()}
            ax.fill_between(t, get["on_hand"], step="post", color=COLORS["idle"], alpha=0.5,
                            linewidth=0, label="on hand")  # fmt: skip
            ax.fill_between(t, -get["backlog"], step="post", color=COLORS["bad"], alpha=0.5,
                            linewidth=0, label="backlog (drawn below 0)")  # fmt: skip
            ax.step(t, get["on_order"], where="post", color=COLORS["move"], linewidth=0.8,
                    linestyle=":", label="on order (pipeline)")  # fmt: skip
            ax.step(t, get["last_demand"], where="post", color="black", linewidth=0.8,
                    linestyle="--", label="demand received last period")  # fmt: skip
            ax.step(t, get["last_order"], where="post", color=COLORS["busy"], linewidth=1.2,
                    label="order placed")  # fmt: skip
            ax.axhline(0, color=COLORS["grey"], linewidth=0.5)
            ax.set_ylabel(label, rotation=0, ha="right", va="center", fontsize=8)
        axes[0].legend(loc="lower left", bbox_to_anchor=(0, 1.0), ncols=5, frameon=False)
        axes[-1].set_xlabel("period")
        bullwhip = ", ".join(f"{name} {b:.2f}" for name, b in zip(names, model.bullwhip(),
                                                                   strict=True))
        return (
            f"items per node over {model.period} periods; bullwhip (variance of orders / "
            f"variance of customer demand): {bullwhip}"
        )


def draw(env: Any) -> np.ndarray:
    """The chain now: stock, backlog and pipeline per node, and the recent orders."""
    return frame(env, lambda canvas, memory: _paint(canvas, memory, env))


def _positions(model: Any) -> list[tuple[float, float]]:
    """Centre of every node's box: x = echelon, y spread evenly within the echelon."""
    out, seen = [], [0] * len(model.widths)
    for lvl in model.level:
        w = model.widths[lvl]
        out.append((float(lvl), (seen[lvl] + 0.5) / w))
        seen[lvl] += 1
    return out


def _layout(fig: Any, env: Any) -> tuple[Any, Any]:
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    model = env.model
    depth = len(model.widths)
    gs = fig.add_gridspec(2, 1, height_ratios=(1.6, 1), left=0.07, right=0.8, top=0.87,
                          bottom=0.09, hspace=0.35)  # fmt: skip
    ax = fig.add_subplot(gs[0])
    ax.set_xlim(-0.9, depth - 0.5)
    ax.set_ylim(1, 0)
    ax.axis("off")
    ax.set_title("goods flow left to the customers, orders flow right (arrows: last order); "
                 "bar length: share of the node's inventory-position limit", loc="left",
                 fontsize=9)  # fmt: skip
    for lvl, name in enumerate(_echelons(env)):
        ax.text(lvl, 1.0, name, ha="center", va="top", fontsize=9, fontweight="bold")
    ax.text(-0.7, 1.0, "customers", ha="center", va="top", fontsize=9, fontweight="bold")
    handles = [Patch(color=c, label=lab) for _, lab, c in FIELDS]
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False,
              title="per node")  # fmt: skip
    bx = fig.add_subplot(gs[1])
    bx.set_xlabel("period")
    bx.set_ylabel("items")
    bx.set_title(f"orders placed per echelon, last {HISTORY} periods (the bullwhip effect)",
                 loc="left")  # fmt: skip
    handles = [Line2D([], [], color=job_color(2 * lvl), label=name)
               for lvl, name in enumerate(_echelons(env))]  # fmt: skip
    handles.append(Line2D([], [], color="black", linestyle="--", linewidth=1,
                          label="customer demand"))  # fmt: skip
    bx.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
    return ax, bx


def _paint(canvas: Any, memory: dict, env: Any) -> None:
    from matplotlib.collections import PatchCollection
    from matplotlib.patches import FancyArrowPatch, Rectangle

    model = env.model
    trace = memory.setdefault("trace", Trace())
    trace.record(env)
    ax, bx = canvas.layout(lambda fig: _layout(fig, env))
    n = model.n_nodes
    header(canvas.figure, env, f"period {model.period}   customers per period at a retailer "
           f"~{model.demand_rate:g}")  # fmt: skip
    pos = _positions(model)
    cap = env.config["position_cap"]
    compact = max(model.widths) > COMPACT
    frames, bars, colors = [], [], []
    for i in range(n):
        x, y = pos[i]
        width = model.widths[model.level[i]]
        h = 0.8 / width
        words = width <= 2  # room for "on hand 11"; else the number alone
        limit = (model.lead[i] + 1 + cap) * model.mean[i]
        frames.append(Rectangle((x - 0.35, y - h / 2), 0.7, h))
        row = h / 4  # the name, then one row per field
        left, room = (x + 0.1, 0.23) if words else (x - 0.1, 0.43)
        for k, (f, label, color) in enumerate(FIELDS):
            value = getattr(model, f)[i]
            share = min(1.0, value / limit) if limit > 0 else 0.0
            cy = y - h / 2 + row * (k + 1.5)
            bars.append(Rectangle((left, cy - row * 0.35), room * share, row * 0.7))
            colors.append(color)
            if compact:
                continue
            if words:
                ax.text(x - 0.32, cy, f"{label} {value}", va="center", fontsize=8)
            else:
                ax.text(left - 0.03, cy, str(value), ha="right", va="center", fontsize=7)
        if not compact:
            ax.text(x - 0.32, y - h / 2 + row * 0.55, env.possible_agents[i], va="center",
                    fontsize=8 if words else 7, fontweight="bold")  # fmt: skip
        s = model.supplier[i]
        if s >= 0:
            sx, sy = pos[s]
            arrow = FancyArrowPatch((x + 0.35, y), (sx - 0.35, sy), arrowstyle="-|>",
                                    mutation_scale=10, color=COLORS["grey"], linewidth=1)
            ax.add_patch(arrow)
            if not compact:
                ax.text((x + sx) / 2, (y + sy) / 2, f"order {model.last_order[i]}",
                        ha="center", va="center", fontsize=7, color=COLORS["dark"],
                        bbox={"facecolor": "white", "edgecolor": "none", "pad": 0.5})
    ax.add_collection(PatchCollection(frames, facecolors="#f7f7f7", edgecolors=COLORS["grey"]))
    ax.add_collection(PatchCollection(bars, facecolors=colors, edgecolors="none"))
    if not compact:
        for i in range(model.widths[0]):
            x, y = pos[i]
            ax.text(-0.7, y, f"{model.last_demand[i]:g} bought\nlast period", ha="center",
                    va="center", fontsize=8 if model.widths[0] <= 2 else 7)  # fmt: skip

    orders = np.asarray(trace.orders[-HISTORY:], dtype=float)
    t = np.asarray(trace.times[-HISTORY:])
    level = np.asarray(model.level)
    for lvl, name in enumerate(_echelons(env)):
        bx.step(t, orders[:, level == lvl].sum(axis=1), where="post",
                color=job_color(2 * lvl), label=name)  # fmt: skip
    demand = np.asarray(model.demand_log[-HISTORY:], dtype=float)
    if len(demand):
        bx.step(np.arange(model.period - len(demand) + 1, model.period + 1), demand,
                where="pre", color="black", linestyle="--", linewidth=1,
                label="customer demand")  # fmt: skip
    bx.set_xlim(max(0.0, env.now - HISTORY), max(env.now, 10.0))
    top = max(1.0, float(orders.max()) if orders.size else 1.0, float(demand.max(initial=0)))
    bx.set_ylim(0, top * 1.1)
