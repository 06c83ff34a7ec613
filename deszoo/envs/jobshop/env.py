"""Flexible job shop: machines choose which queued operation to run next.

Jobs arrive as a Poisson stream; each is a chain of 1..``max_ops`` operations, each of
which can run on a random subset of machines. A released operation goes to the eligible
machine with the least outstanding work. When a machine becomes free and has work queued
it is at a decision point (decisions are asynchronous: machines free up at different
times).

=================  ======================================================================
Import             ``from deszoo.envs import jobshop_v0`` / ``deszoo.make("jobshop_v0")``
Agents             ``machine_0`` .. ``machine_{n_machines-1}``
Action space       ``Discrete(queue_slots + 1)``: ``0`` no-op, ``k`` runs the operation in
                   queue slot ``k-1`` (the queue is in arrival order)
Action mask        deciding: the occupied slots (``0`` is not allowed); not deciding: ``0``
Observation space  ``Box(-1, 1, (4 + 6 * queue_slots,), float32)``
Observation        ``[busy, remaining busy time / p_max, queue length / slots, shop WIP /
                   (slots * machines)]`` (each capped at 1), then per slot ``[present,
                   p / p_max, waited / (4 p_max), slack / (4 p_max) clipped to [-1, 1],
                   weight / 4, ops left / max_ops]`` (zeros for empty slots)
State              ``Box(-1, 1, (4 + 6 * n_machines,), float32)``: ``[jobs arrived / n_jobs,
                   finished / n_jobs, shop WIP / (slots * machines), share of the WIP
                   past its due date]``, then per machine ``[busy, remaining busy time /
                   p_max, queue length / slots, queued work / (slots * p_max), queued
                   weight / (4 slots), least slack in its queue / (4 p_max) clipped to
                   [-1, 1] (0 when empty)]`` (each capped at 1)
Reward             ``flowtime``: minus the weighted number of jobs queued at or running on
                   the machine, integrated over the step's simulated interval, / ``p_max``.
                   ``tardiness``: minus ``weight * tardiness / p_max`` of each job whose
                   last operation the machine finishes
Termination        all ``n_jobs`` jobs are finished
Truncation         ``max_steps`` env steps (default 1000) or ``max_time`` simulated time
Heuristic          ``heuristic(obs, mask)``: weighted shortest processing time (WSPT)
=================  ======================================================================

Presets: `small` (3 machines, 30 jobs), `default` (4 machines, 100 jobs),
`large` (96 machines, 2400 jobs, 16 queue slots: about 13x the work per step of `small`,
mostly observing 96 machines).

Version History:
    v0: initial release.
"""

from __future__ import annotations

import numpy as np
from gymnasium import spaces

from deszoo.core import NOOP, Integrator, SimPyParallelEnv
from deszoo.core.groups import discrete
from deszoo.core.params import BLACK_DEATH_V0, COMMON, Param, choice, integer, pair, real
from deszoo.envs.jobshop.model import JobShopModel, Operation

__all__ = ["JobShopEnv", "heuristic"]

GLOBAL = 4
SLOT = 6
MACHINE = 6  # state features per machine


class JobShopEnv(SimPyParallelEnv):
    """Flexible job shop; see the module docstring."""

    metadata = {
        "render_modes": ["human", "ansi", "rgb_array"],
        "name": "jobshop_v0",
        "render_fps": 8,
    }
    params = {
        "n_machines": Param(4, integer(1, 1024), "machines, one agent each"),
        "n_jobs": Param(100, integer(1, 100_000), "jobs in an episode"),
        "max_ops": Param(4, integer(1, 64), "maximum operations per job"),
        "flexibility": Param(0.5, real(0, 1, open_min=True),
                             "probability that a machine is eligible for an operation (one "
                             "random machine always is)"),
        "utilization": Param(0.95, real(0.001, 1e9),
                             "offered load per machine; sets the arrival rate (at least "
                             "0.001: jobs arrive within finite, bounded time)"),
        "due_tightness": Param(2.0, real(0, 1000, open_min=True),
                               "due date = arrival + tightness * mean work of the job"),
        "ptime_range": Param((1.0, 10.0), pair(real(0, 1e6, open_min=True)),
                             "processing times are uniform on this range"),
        "queue_slots": Param(8, integer(1, 256),
                             "queue positions a machine sees and can pick from"),
        "reward": Param("flowtime", choice("flowtime", "tardiness"), "the reward (see above)"),
        "max_steps": COMMON["max_steps"].with_default(1000),
        "black_death": BLACK_DEATH_V0,
    }
    presets = {
        "small": {"n_machines": 3, "n_jobs": 30},
        "default": {},
        "large": {"n_machines": 96, "n_jobs": 2400, "queue_slots": 16, "max_steps": 20000},
    }

    def _setup(self):
        p = self.p
        k = p.queue_slots
        low = np.zeros(GLOBAL + SLOT * k, dtype=np.float32)
        low[GLOBAL + 3 :: SLOT] = -1.0
        self._pmax = float(p.ptime_range[1])
        names = [f"machine_{m}" for m in range(p.n_machines)]
        return discrete(names, low, np.ones_like(low), k + 1)

    def _state_setup(self) -> spaces.Box:
        low = np.zeros(GLOBAL + MACHINE * self.p.n_machines, dtype=np.float32)
        low[GLOBAL + 5 :: MACHINE] = -1.0
        return spaces.Box(low, np.ones_like(low), dtype=np.float32)

    def _build(self):
        self.model = JobShopModel(
            self.sim, self.rng, self.p, self._choose, on_route=self._on_route,
            on_finish=self._on_finish, on_all_done=self.end_episode,
        )
        self._wip = Integrator(self.p.n_machines)
        # the mask with q queued operations in view: row q allows actions 1 to q
        k = self.p.queue_slots
        self._slot_masks = np.zeros((k + 1, k + 1), dtype=np.int8)
        for q in range(1, k + 1):
            self._slot_masks[q, 1 : q + 1] = 1
        self.model.start()

    def _choose(self, m: int):
        # The mask is taken when the step ends (jobs may still arrive at this instant), and
        # action j means the operation in slot j - 1 of the queue as observed then.
        queue = self.model.queues[m]
        rows, k = self._slot_masks, self.p.queue_slots
        return self.decide(m, lambda: rows[min(len(queue), k)],
                           values=lambda j: queue[j - 1] if j else None)

    def _on_route(self, m: int, op: Operation) -> None:
        self._wip.add(self.sim.now, m, op.job.weight)

    def _on_finish(self, m: int, op: Operation) -> None:
        job = op.job
        self._wip.add(self.sim.now, m, -job.weight)
        if job.done_at is not None and self.p.reward == "tardiness":
            self.add_reward(m, -job.weight * max(0.0, job.done_at - job.due) / self._pmax)

    def _flush(self, until: float) -> None:
        if self.p.reward == "flowtime":
            self.rew_buf -= (self._wip.take(until) / self._pmax).astype(np.float32)

    def _observe_all(self, obs: np.ndarray) -> None:
        model, now, pmax = self.model, self.sim.now, self._pmax
        k = self.p.queue_slots
        # every job in the shop has exactly one operation queued or running
        shop = min(1.0, (len(model.jobs) - model.finished) / (k * model.n_machines))
        obs[:, GLOBAL:] = 0.0
        scale = 4 * pmax
        max_ops = model.max_ops
        # A few machines and slots: plain Python floats, each machine's row written at once
        # (numpy's per-call cost on arrays this small is more than the arithmetic).
        machines = zip(model.running, model.busy_until, model.queues, strict=True)
        for i, (run, busy, queue) in enumerate(machines):
            row = [0.0 if run is None else 1.0, min(1.0, max(0.0, busy - now) / pmax),
                   min(1.0, len(queue) / k), shop]
            for op in queue[:k]:
                job = op.job
                row += (1.0, op.times[i] / pmax, min(1.0, (now - op.ready) / scale),
                        min(1.0, max(-1.0, (job.due - now - job.work_left) / scale)),
                        job.weight / 4.0, (len(job.ops) - op.index) / max_ops)
            obs[i, : len(row)] = row

    def _state_all(self, out: np.ndarray) -> None:
        model, now, pmax = self.model, self.sim.now, self._pmax
        k, n, scale = self.p.queue_slots, model.n_machines, 4 * self._pmax
        table = np.zeros((n, MACHINE))
        late = 0
        for m, queue in enumerate(model.queues):
            run = model.running[m]
            table[m, 0] = run is not None
            table[m, 1] = max(0.0, model.busy_until[m] - now) / pmax
            table[m, 2] = len(queue) / k
            table[m, 3] = sum(op.times[m] for op in queue) / (k * pmax)
            table[m, 4] = sum(op.job.weight for op in queue) / (4.0 * k)
            slack = [op.job.due - now - op.job.work_left for op in queue]
            table[m, 5] = max(-1.0, min(slack) / scale) if slack else 0.0
            late += sum(op.job.due < now for op in queue) + (run is not None and run.job.due < now)
        wip = sum(len(q) for q in model.queues) + int(table[:, 0].sum())
        out[:GLOBAL] = (len(model.jobs) / model.n_jobs, model.finished / model.n_jobs,
                        min(1.0, wip / (k * n)), late / wip if wip else 0.0)
        out[GLOBAL:] = np.minimum(table, 1.0).reshape(-1)

    def _render_text(self) -> str:
        model = self.model
        lines = [f"jobshop t={self.now:8.2f}  finished {model.finished}/{model.n_jobs}"]
        for m in range(model.n_machines):
            run = model.running[m]
            state = f"job {run.job.id:3d}" if run is not None else "idle   "
            lines.append(f"  machine_{m}: {state}  queue {len(model.queues[m]):3d}")
        return "\n".join(lines)

    def _render_rgb(self) -> np.ndarray:
        from deszoo.envs.jobshop import render  # matplotlib is needed only for pictures

        return render.draw(self)


def heuristic(obs: np.ndarray, mask: np.ndarray) -> int:
    """Weighted shortest processing time: the queued operation with the largest w / p."""
    if not mask[1:].any():
        return NOOP
    slots = (len(obs) - GLOBAL) // SLOT
    table = np.asarray(obs[GLOBAL:], dtype=np.float64).reshape(slots, SLOT)
    score = table[:, 4] / np.maximum(table[:, 1], 1e-9)
    score[mask[1 : 1 + slots] == 0] = -np.inf
    return int(np.argmax(score)) + 1
