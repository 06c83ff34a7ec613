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
Reward             ``flowtime``: minus the weighted number of jobs queued at or running on
                   the machine, integrated over the step's simulated interval, / ``p_max``.
                   ``tardiness``: minus ``weight * tardiness / p_max`` of each job whose
                   last operation the machine finishes
Termination        all ``n_jobs`` jobs are finished
Truncation         ``max_steps`` env steps (default 1000) or ``max_time`` simulated time
Heuristic          ``heuristic(obs, mask)``: weighted shortest processing time (WSPT)
=================  ======================================================================

Arguments:
    n_machines (int): machines, one agent each.
    n_jobs (int): jobs in an episode.
    max_ops (int): maximum operations per job.
    flexibility (float): probability that a machine is eligible for an operation (one
        random machine always is).
    utilization (float): offered load per machine; sets the arrival rate.
    due_tightness (float): due date = arrival + tightness * mean work of the job.
    ptime_range (tuple): processing times are uniform on this range.
    queue_slots (int): queue positions a machine sees and can pick from.
    reward (str): ``"flowtime"`` or ``"tardiness"``.

Presets: `small` (3 machines, 30 jobs), `default` (4 machines, 100 jobs),
`large` (96 machines, 2400 jobs, 16 queue slots: about 13x the work per step of `small`,
mostly observing 96 machines).

Version History:
    v0: initial release.
"""

from __future__ import annotations

import numpy as np

from deszoo.core import NOOP, Integrator, SimPyParallelEnv
from deszoo.core.config import check_fraction, check_ints, check_numbers, check_pair
from deszoo.envs.jobshop.model import JobShopModel, Operation
from deszoo.errors import ConfigError

__all__ = ["JobShopEnv", "heuristic"]

GLOBAL = 4
SLOT = 6


class JobShopEnv(SimPyParallelEnv):
    """Flexible job shop; see the module docstring."""

    metadata = {
        "render_modes": ["human", "ansi", "rgb_array"],
        "name": "jobshop_v0",
        "render_fps": 4,
    }
    defaults = {
        "n_machines": 4,
        "n_jobs": 100,
        "max_ops": 4,
        "flexibility": 0.5,
        "utilization": 0.95,
        "due_tightness": 2.0,
        "ptime_range": (1.0, 10.0),
        "queue_slots": 8,
        "reward": "flowtime",
        "max_steps": 1000,
    }
    presets = {
        "small": {"n_machines": 3, "n_jobs": 30},
        "default": {},
        "large": {"n_machines": 96, "n_jobs": 2400, "queue_slots": 16, "max_steps": 20000},
    }

    def _setup(self):
        c, name = self.config, self.metadata["name"]
        check_ints(c, name, ("n_machines", "n_jobs", "max_ops", "queue_slots"))
        check_numbers(c, name, ("utilization", "due_tightness"))
        check_fraction(c, name, "flexibility", closed=True)
        if c["flexibility"] == 0:
            raise ConfigError(f"{name}: flexibility=0 leaves one eligible machine; must be > 0")
        check_pair(c, name, "ptime_range")
        lo, hi = c["ptime_range"]
        if c["reward"] not in ("flowtime", "tardiness"):
            raise ConfigError(f"{name}: reward={c['reward']!r}; valid: 'flowtime', 'tardiness'")
        k = c["queue_slots"]
        low = np.zeros(GLOBAL + SLOT * k, dtype=np.float32)
        low[GLOBAL + 3 :: SLOT] = -1.0
        high = np.ones_like(low)
        self._pmax = float(hi)
        names = [f"machine_{m}" for m in range(c["n_machines"])]
        return names, low, high, k + 1

    def _build(self):
        c = self.config
        self.model = JobShopModel(
            self.sim, self.rng, c["n_machines"], c["n_jobs"], c["max_ops"], c["flexibility"],
            c["utilization"], c["due_tightness"], tuple(c["ptime_range"]), self._choose,
            on_route=self._on_route, on_finish=self._on_finish, on_all_done=self.end_episode,
        )
        self._wip = Integrator(c["n_machines"])
        self.model.start()

    def _choose(self, m: int):
        queue = self.model.queues[m]
        mask = np.zeros(self.n_actions, dtype=np.int8)
        mask[1 : 1 + min(len(queue), self.config["queue_slots"])] = 1
        return self.sim.process(self._pick(m, mask))

    def _pick(self, m: int, mask: np.ndarray):
        action = yield self.decide(m, mask)
        return action - 1

    def _on_route(self, m: int, op: Operation) -> None:
        self._wip.add(self.sim.now, m, op.job.weight)

    def _on_finish(self, m: int, op: Operation) -> None:
        job = op.job
        self._wip.add(self.sim.now, m, -job.weight)
        if job.done_at is not None and self.config["reward"] == "tardiness":
            self.add_reward(m, -job.weight * max(0.0, job.done_at - job.due) / self._pmax)

    def _flush(self, until: float) -> None:
        if self.config["reward"] == "flowtime":
            self.rew_buf -= (self._wip.take(until) / self._pmax).astype(np.float32)

    def _observe(self, i: int, out: np.ndarray) -> None:
        model, now, pmax = self.model, self.sim.now, self._pmax
        k = self.config["queue_slots"]
        queue = model.queues[i]
        wip = sum(len(q) for q in model.queues) + sum(r is not None for r in model.running)
        out[0] = model.running[i] is not None
        out[1] = min(1.0, max(0.0, model.busy_until[i] - now) / pmax)
        out[2] = min(1.0, len(queue) / k)
        out[3] = min(1.0, wip / (k * model.n_machines))
        out[GLOBAL:] = 0.0
        scale = 4 * pmax
        for s, op in enumerate(queue[:k]):
            job = op.job
            base = GLOBAL + SLOT * s
            out[base] = 1.0
            out[base + 1] = op.times[i] / pmax
            out[base + 2] = min(1.0, (now - op.ready) / scale)
            out[base + 3] = min(1.0, max(-1.0, (job.due - now - job.work_left) / scale))
            out[base + 4] = job.weight / 4.0
            out[base + 5] = (len(job.ops) - op.index) / model.max_ops

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
