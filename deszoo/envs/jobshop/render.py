"""Pictures of the job shop: a frame of the current state and a chart of an episode.

Reads the model's state (``queues``, ``running``, ``busy_until``, ``jobs``) and never
changes it. The operations' history is rebuilt from what can be seen between two
consecutive steps: a machine that was deciding at the last step started, at that
instant, the operation that has left its queue since (every start of an operation is a
decision, and a decision ends the step). So with a frame (or a record) after every
step the Gantt chart is exact; after skipped steps it shows only the operations seen
running.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from deszoo.core.canvas import COLORS, frame, header, job_color

__all__ = ["Trace", "draw"]

COMPACT = 12  # machines; above this the frame drops per-job labels


class Trace:
    """Per-step record of an episode: the operations run and the shop's counts."""

    def __init__(self) -> None:
        self.ops: dict[tuple[int, int], tuple[int, int, float, float]] = {}
        self.times: list[float] = []
        self.in_system: list[int] = []
        self.queued: list[int] = []
        self.finished: list[int] = []
        self._step: int | None = None
        self._now = 0.0
        self._deciding: dict[int, list[Any]] = {}

    def record(self, env: Any) -> None:
        """Read ``env``'s state after ``reset`` or a step (a second call per step is a no-op)."""
        model, step, now = env.model, env.num_steps, env.now
        if step == self._step:
            return
        if self._step is not None and step == self._step + 1:
            for m, before in self._deciding.items():
                queue = model.queues[m]
                for op in before:
                    if not any(op is other for other in queue):  # started at the last step
                        self._add(m, op, self._now)
        for m, op in enumerate(model.running):
            if op is not None:
                self._add(m, op, model.busy_until[m] - op.times[m])
        self._deciding = {
            m: list(q) for m, q in enumerate(model.queues) if q and env.needs_action(m)
        }
        self._step, self._now = step, now
        queued = sum(len(q) for q in model.queues)
        running = sum(op is not None for op in model.running)
        self.times.append(now)
        self.in_system.append(queued + running)
        self.queued.append(queued)
        self.finished.append(model.finished)

    def _add(self, m: int, op: Any, start: float) -> None:
        self.ops.setdefault((op.job.id, op.index), (m, op.job.id, start, start + op.times[m]))

    def chart(self, fig: Any, env: Any) -> str:
        """Gantt chart of the machines over the episode, and the jobs in the shop."""
        from matplotlib.ticker import MaxNLocator

        model = env.model
        n = model.n_machines
        ax, bx = fig.subplots(2, 1, sharex=True, height_ratios=(3, 1))
        end = max([e for *_, e in self.ops.values()] + [env.now, 1e-9])
        labels = n <= 2 * COMPACT
        for m, job, start, stop in self.ops.values():
            ax.barh(m, stop - start, left=start, height=0.8, color=job_color(job),
                    edgecolor="white", linewidth=0.5)  # fmt: skip
            if labels and stop - start > end / 70:
                ax.text((start + stop) / 2, m, str(job), ha="center", va="center", fontsize=7)
        if labels:
            ax.set_yticks(range(n), [f"machine_{m}" for m in range(n)])
        else:
            ax.set_ylabel("machine")
        ax.set_ylim(n - 0.5, -0.5)
        ax.set_xlim(0, end)
        ax.set_title("operations per machine (colour and label: job id)", loc="left")
        bx.step(self.times, self.in_system, where="post", color=COLORS["busy"],
                label="jobs in the shop (queued or running)")  # fmt: skip
        bx.step(self.times, self.queued, where="post", color=COLORS["wait"],
                label="operations queued")  # fmt: skip
        bx.set_xlabel("simulated time")
        bx.set_ylabel("count")
        bx.yaxis.set_major_locator(MaxNLocator(integer=True))
        bx.legend(loc="lower left", bbox_to_anchor=(0, 1), ncols=2, frameon=False)
        jobs = [j for j in model.jobs if j.done_at is not None]
        flow = np.mean([j.done_at - j.arrival for j in jobs]) if jobs else float("nan")
        tardy = sum(j.done_at > j.due for j in jobs)
        wt = sum(j.weight * max(0.0, j.done_at - j.due) for j in jobs)
        return (
            f"finished {len(jobs)}/{model.n_jobs} jobs by t = {env.now:,.1f}; mean flow time "
            f"{flow:.1f}; tardy jobs {tardy}; weighted tardiness {wt:,.0f}"
        )


def draw(env: Any) -> np.ndarray:
    """The shop now: recent operations per machine (Gantt strip) and each machine's queue."""
    return frame(env, lambda canvas, memory: _paint(canvas, memory, env))


def _layout(fig: Any, n: int, slots: int) -> tuple[Any, Any]:
    compact = n > COMPACT
    gs = fig.add_gridspec(1, 2, width_ratios=(1.6, 1), left=0.1, right=0.98, top=0.86,
                          bottom=0.1, wspace=0.04)  # fmt: skip
    ax = fig.add_subplot(gs[0])
    ax.set_ylim(n - 0.5, -0.5)
    if compact:
        ax.set_ylabel("machine")
    else:
        ax.set_yticks(range(n), [f"machine_{m}" for m in range(n)])
    ax.set_xlabel("simulated time (dashed: now; faded: rest of the running operation)")
    ax.set_title("recent operations (colour: job)   \u25b6 deciding now", loc="left")
    bx = fig.add_subplot(gs[1], sharey=ax)
    bx.tick_params(labelleft=False, left=False)
    if compact:
        bx.set_xlabel("operations queued")
        bx.set_title("queue per machine", loc="left")
    else:
        bx.set_xlim(0, slots + 0.8)
        bx.set_xticks([])
        bx.spines["bottom"].set_visible(False)
        bx.set_title("queue, first slot left\n(p: time on this machine, w: job weight)",
                     loc="left", fontsize=9)  # fmt: skip
    return ax, bx


def _paint(canvas: Any, memory: dict, env: Any) -> None:
    from matplotlib.collections import PatchCollection
    from matplotlib.patches import Rectangle

    model, now = env.model, env.now
    trace = memory.setdefault("trace", Trace())
    trace.record(env)
    n = model.n_machines
    compact = n > COMPACT
    hi = float(env.config["ptime_range"][1])
    slots = env.config["queue_slots"]
    ax, bx = canvas.layout(lambda fig: _layout(fig, n, slots))
    header(canvas.figure, env, f"jobs finished {model.finished}/{model.n_jobs}   "
           f"in the shop {trace.in_system[-1]}")  # fmt: skip
    past, ahead = 6 * hi, 1.5 * hi
    lo = now - past
    done, rest, done_c, rest_c = [], [], [], []
    for m, job, start, stop in trace.ops.values():
        if stop < lo:
            continue
        color = job_color(job)
        if min(stop, now) > start:
            done.append(Rectangle((start, m - 0.375), min(stop, now) - start, 0.75))
            done_c.append(color)
        if start <= now < stop:  # the rest of the running operation, still to come
            rest.append(Rectangle((now, m - 0.375), stop - now, 0.75))
            rest_c.append(color)
        if not compact and stop - max(start, lo) > hi / 4:
            ax.text((max(start, lo) + stop) / 2, m, f"J{job}", ha="center", va="center",
                    fontsize=7, clip_on=True)  # fmt: skip
    ax.add_collection(PatchCollection(done, facecolors=done_c, edgecolors="white",
                                      linewidths=0.5))  # fmt: skip
    ax.add_collection(PatchCollection(rest, facecolors=rest_c, edgecolors=rest_c, alpha=0.35,
                                      linewidths=0.8))  # fmt: skip
    deciding = [m for m in range(n) if env.needs_action(m)]
    ax.plot([now] * len(deciding), deciding, ">", color=COLORS["bad"],
            markersize=3 if compact else 7, clip_on=False)  # fmt: skip
    if not compact:
        for m in range(n):
            if model.running[m] is None and m not in deciding:
                ax.text(now + 0.3, m, "idle", va="center", fontsize=7, color=COLORS["grey"])
    ax.axvline(now, color=COLORS["dark"], linewidth=1, linestyle="--")
    ax.set_xlim(lo, now + ahead)

    if compact:
        lengths = [len(q) for q in model.queues]
        bx.barh(range(n), lengths, height=0.8, color=COLORS["wait"])
        bx.set_xlim(0, max(lengths + [slots]))
        return
    boxes, colors = [], []
    for m, queue in enumerate(model.queues):
        for s, op in enumerate(queue[:slots]):
            job = op.job
            boxes.append(Rectangle((s + 0.05, m - 0.35), 0.9, 0.7))
            colors.append(job_color(job.id))
            bx.text(s + 0.5, m - 0.15, f"J{job.id}", ha="center", va="center", fontsize=7)
            bx.text(s + 0.5, m + 0.15, f"p{op.times[m]:.1f}\nw{job.weight:.0f}",
                    ha="center", va="center", fontsize=6, linespacing=1.1)  # fmt: skip
        if len(queue) > slots:
            bx.text(slots + 0.05, m, f"+{len(queue) - slots}", va="center", fontsize=8)
        if not queue:
            bx.text(0.1, m, "queue empty", va="center", fontsize=7, color=COLORS["grey"])
    bx.add_collection(PatchCollection(boxes, facecolors=colors, edgecolors=COLORS["dark"],
                                      linewidths=0.5))  # fmt: skip
