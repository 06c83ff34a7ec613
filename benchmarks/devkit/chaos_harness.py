"""Chaos testing of the vector backends: random faults, every result row checked.

The project's own test machinery (not part of the package): ``tests/test_chaos.py`` runs it
briefly, ``benchmarks/chaos.py`` for as long as you like.

:func:`run_chaos` steps a vector env with a seeded policy and injects faults at random
steps, then checks **every row of every step** against :class:`Replay`, which replays
each env on its own (a plain env of the same class, the same seeds and actions) under the
documented semantics (``docs/vector.md``, Faults and Autoreset):

* rows of envs a fault did not hit are bit-identical to the undisturbed replay;
* on the step that detects a fault, every env it hit (an env that raised; every env of a
  dead or hung worker) reports its rows truncated and dead, with ``infos["restarted"]``;
* on the next step (``SameStep``: on that step) those envs start a new episode seeded
  ``restart_seed(seed + i, k)`` (``k``: the env's restart count), and go on from there
  like any env.

Faults (:data:`HARNESS_KINDS` are injected by the harness; the others by the envs):

``sigkill``
    ``SIGKILL`` of a worker process, while it is idle or in the middle of a step; some
    also kill the replacement while it boots.
``sigstop``
    ``SIGSTOP`` of a worker: the ``timeout`` must see it and the worker be replaced (the
    stopped process killed, never left behind).
``sigint``
    ``SIGINT`` in the parent at one of :data:`POINTS` of a step (before the hand-out,
    during it, in the wait, during the repair of a fault, while the results are copied),
    sometimes again while the next call finishes that step; the ``KeyboardInterrupt`` is
    caught, then the vector env is used on (the interrupted step happened, its results are
    lost) or closed at once. The points are the vector env's declared fault points
    (``deszoo.vector.base.FAULT_POINTS``), reached through its ``fault_hook``: a point a
    step never reaches is an error of the run, never a test silently skipped.
``sigint_thread``
    ``SIGINT`` sent to the whole process by another thread (:class:`_Spammer`), as a
    terminal's Ctrl-C is, at random moments of a vector env call (a step; async mode: a
    ``recv`` and a ``send``), and again while the next call finishes a cut-short one. Only
    the landed ones count (a ``KeyboardInterrupt`` raised by the call). Whether a cut-short
    step happened is read from ``vec.num_events()`` once a call has finished it; a
    ``KeyboardInterrupt`` raised inside an env's code (a ``step_arrays``, SimPy) is an
    error, and so is async ``recv`` losing its batch or ``send`` half-sending.
``env_raise``
    an exception in one env's step or autoreset (:class:`ChaosFactory`'s schedule).
``env_exit``
    ``os._exit`` in one env's step: its worker dies mid-step (process backends only).

``sigstop`` in async mode: the stopped worker must be replaced (or ``WorkerTimeoutError``
raised) within the timeout while the other workers keep answering.

With ``state=True`` (a scenario that has ``state()``) ``infos["state"]`` and SameStep's
``infos["final_info"]["state"]`` are checked row by row too.

Each run is cut in segments (a vector env each, alternately ``on_error="restart"`` and
``"raise"``, ``NextStep`` and ``SameStep``); after each ``close`` the run checks that no
worker process and no new ``/dev/shm`` entry (shared memory, ``sem.*`` semaphores) is left.
Every vector env call runs under a watchdog: a call that does not return in time is a hang
(counted, the run goes on with a new vector env), never a blocked test.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import logging
import os
import signal
import struct
import sys
import threading
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import cloudpickle
import numpy as np
from gymnasium.vector import AutoresetMode

from deszoo.core.arrays import AGENT_ARRAYS
from deszoo.errors import SubEnvError, WorkerDiedError, WorkerTimeoutError
from deszoo.vector._host import restart_seed
from deszoo.vector.base import State
from deszoo.vector.pool import FAULT_POINTS

__all__ = [
    "ChaosConfig",
    "ChaosError",
    "ChaosFactory",
    "ChaosReport",
    "FaultSchedule",
    "Replay",
    "run_chaos",
]

log = logging.getLogger(__name__)

HARNESS_KINDS = ("sigkill", "sigstop", "sigint", "sigint_thread")
SIGINT_KINDS = ("sigint", "sigint_thread")  # no worker process needed
ENV_KINDS = ("env_raise", "env_exit")
IN_PROCESS = ("roundrobin",)  # backends without worker processes (also supersuit with 0-1)
EXIT_CODE = 57  # what an env_exit fault exits with
# The per-agent arrays of a deszoo env, as the vector backends adopt them.
ENV_ARRAYS = tuple(AGENT_ARRAYS)
# Result fields compared row by row: name in the expectation, where it is in a step's result.
FIELDS = ("obs", "rew", "term", "trunc", "action_mask", "needs_action", "live",
          "invalid_action", "invalid_count", "restarted", "sim_time")
SAME_STEP_FIELDS = ("final_obs", "_final_obs")
STATE_FIELDS = ("state", "final_state")  # with state=True: infos["state"], final_info's
# Where code runs inside an env's step or reset: a KeyboardInterrupt raised there is a defect
# (the vector env holds Ctrl-C off around them).
ENV_CODE = frozenset({"step_arrays", "reset_arrays", "write_state", "_state_all"})
# How many steps in a row a sigint_thread fault is tried until one lands.
SPAM_TRIES = 20
# How many times in a row a call after one cut short is tried under SIGINTs (then without).
AGAIN = 3
# Seconds a hung (stopped) worker in async mode may take beyond the timeout to be found.
HUNG_SLACK = 3.0
# Where a SIGINT lands in a step: a fault point of the vector env (FAULT_POINTS) -> (whether
# the step has reached the envs by then, whether the point is reached only when a worker is
# lost: then a worker is killed on that step too). "settle" is the SIGINT again while the
# next call finishes an interrupted step.
POINTS: dict[str, tuple[bool, bool]] = {
    "before": (False, False),  # nothing handed out yet
    "handout": (True, False),  # after the first worker's command (shm: its doorbell)
    "wait": (True, False),
    "polled": (True, False),  # replies read, not yet taken
    "taken": (True, False),
    "handle": (True, True),  # faults seen, not yet repaired
    "restart": (True, True),  # a replacement worker started
    "marked": (True, True),
    "after": (True, False),  # while the results are copied
}
# Fault points of the transport's exchange, which an in-place step (roundrobin) never passes.
STEP_IN_PLACE = ("handout", "wait", "polled", "taken")
# Envs of the harness (ChaosFactory) travel by value: Ray's workers cannot import this module.
cloudpickle.register_pickle_by_value(sys.modules[__name__])

if set(POINTS) | {"settle"} != set(FAULT_POINTS):
    raise ImportError(f"chaos POINTS {sorted(POINTS)} do not cover FAULT_POINTS "
                      f"{sorted(FAULT_POINTS)}: a fault point is never tested")


class ChaosError(RuntimeError):
    """The exception an ``env_raise`` fault raises inside an env."""


class ChaosExit(Exception):
    """An ``env_exit`` fault in a :class:`Replay` env (which must not exit the harness)."""


class ChaosHang(BaseException):
    """Raised by the watchdog in the main thread when a vector env call overruns."""


# ---- faults inside the envs ---------------------------------------------------------------


@dataclass(frozen=True)
class FaultSchedule:
    """Where envs fail: a hash of ``(salt, seed, episode, step)`` against the rates.

    Deterministic (the same env, seed and actions fail at the same step in a worker and in
    the replay) and picklable. ``raise_rate`` per env step (and per autoreset): raise
    :class:`ChaosError`, before the step or after it changed the env; ``exit_rate`` per env
    step: ``os._exit`` (only for backends with worker processes). ``at`` lists faults at
    given points besides: ``(seed, episode, step, fault)`` (``seed``: the env's seed, step
    ``1`` of episode ``1`` is its first step).
    """

    raise_rate: float = 0.0
    exit_rate: float = 0.0
    salt: int = 0
    at: tuple[tuple[int, int, int, str], ...] = ()  # (seed, episode, step, fault), besides

    def draw(self, seed: int | None, episode: int, step: int) -> str | None:
        """``"raise"``, ``"raise_after"``, ``"exit"`` or ``None`` (step 0: the reset)."""
        for s, e, k, fault in self.at:
            if (s, e, k) == (seed, episode, step):
                return fault
        if seed is None or not (self.raise_rate or self.exit_rate):
            return None
        key = struct.pack("<qQqq", self.salt, seed & (2**64 - 1), episode, step)
        h = int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "little")
        u = (h >> 1) / 2.0**63
        if u < self.raise_rate:
            return "raise_after" if h & 1 else "raise"
        if step > 0 and u < self.raise_rate + self.exit_rate:
            return "exit"
        return None


class _Faulty:
    """Hooks an env's ``reset_arrays`` and ``step_arrays`` to fail on its schedule."""

    def __init__(self, env: Any, schedule: FaultSchedule, replay: bool):
        self.schedule = schedule
        self.replay = replay
        self.seed: int | None = None  # the seed of this env's generator (as SeedSequence)
        self.episode = 0
        self.steps = 0
        self._reset, self._step = env.reset_arrays, env.step_arrays
        env.reset_arrays, env.step_arrays = self.reset_arrays, self.step_arrays

    def reset_arrays(self, seed: int | None = None) -> None:
        if seed is not None:
            self.seed = int(seed)
        self.episode += 1
        self.steps = 0
        self._reset(seed)
        # Autoresets only: a rebuilt env's first reset must succeed, or it would fail anew.
        if self.episode > 1 and self.schedule.draw(self.seed, self.episode, 0):
            raise ChaosError(f"chaos: autoreset of episode {self.episode} fails")

    def step_arrays(self, acts: np.ndarray, *args: Any, **kwargs: Any) -> None:
        self.steps += 1
        fault = self.schedule.draw(self.seed, self.episode, self.steps)
        if fault == "raise":
            raise ChaosError(f"chaos: step {self.steps} of episode {self.episode} fails")
        if fault == "exit":
            if self.replay:
                raise ChaosExit(f"chaos: step {self.steps} exits")
            os._exit(EXIT_CODE)
        self._step(acts, *args, **kwargs)
        if fault == "raise_after":
            raise ChaosError(f"chaos: step {self.steps} of episode {self.episode} fails late")


@dataclass(frozen=True)
class ChaosFactory:
    """A picklable env factory: ``base()`` with faults on ``schedule``.

    Args:
        base: zero-argument factory of a deszoo env (picklable), or a registered name.
        schedule: where the envs fail.
        env_kwargs: scenario arguments when ``base`` is a name.
        replay: build envs for :class:`Replay` (an ``exit`` raises :class:`ChaosExit`).
    """

    base: Any
    schedule: FaultSchedule = FaultSchedule()
    env_kwargs: tuple = ()
    replay: bool = False

    def __call__(self) -> Any:
        if isinstance(self.base, str):
            from deszoo import registry

            env = registry.make(self.base, **dict(self.env_kwargs))
        else:
            env = self.base()
        _Faulty(env, self.schedule, self.replay)
        return env

    def for_replay(self) -> ChaosFactory:
        return dataclasses.replace(self, replay=True)


# ---- the undisturbed replay ------------------------------------------------------------------


class Replay:
    """Each env of a vector env replayed on its own, as the documented semantics say.

    Args:
        factory: builds one env (the vector env's, with ``replay=True``).
        num_envs: envs in the batch.
        groups: ``(first, count)`` of each worker's envs (an ``env_exit`` fault ends all
            envs of its worker).
        same_step: ``autoreset_mode="SameStep"``.
        state: the vector env has ``state=True``: each row's ``infos["state"]`` is its
            env's ``state()`` (and SameStep's ``final_info["state"]`` the ended episode's).
    """

    def __init__(self, factory: Callable[[], Any], num_envs: int,
                 groups: Sequence[tuple[int, int]], same_step: bool = False,
                 state: bool = False):
        self.factory = factory
        self.same_step = same_step
        self.state = state
        self.envs = [factory() for _ in range(num_envs)]
        self.groups = [range(first, first + count) for first, count in groups]
        self.worker_of = {s: w for w, g in enumerate(self.groups) for s in g}
        env = self.envs[0]
        self.n = len(env.possible_agents)
        self.noop = env.mask_buf[0].copy()  # a fresh env's rows all have the no-op mask
        self.noop[:] = 0
        self.noop[0] = 1
        rows = num_envs * self.n
        self.rows = rows
        self.seeds: list[int] = [0] * num_envs
        self.restarts = [0] * num_envs
        self.need_reset = [False] * num_envs
        self.next_seed: list[int | None] = [None] * num_envs
        self.exp: dict[str, np.ndarray] = {
            "obs": np.zeros((rows, env.obs_buf.shape[1]), env.obs_buf.dtype),
            "rew": np.zeros(rows, env.rew_buf.dtype),
            "term": np.zeros(rows, bool),
            "trunc": np.zeros(rows, bool),
            "action_mask": np.zeros((rows, env.mask_buf.shape[1]), env.mask_buf.dtype),
            "needs_action": np.zeros(rows, bool),
            "live": np.zeros(rows, bool),
            "invalid_action": np.zeros(rows, bool),
            "invalid_count": np.zeros(rows, env.invalid_count.dtype),
            "restarted": np.zeros(rows, bool),
            "sim_time": np.zeros(rows, np.float64),
        }
        if same_step:
            self.exp["final_obs"] = np.zeros_like(self.exp["obs"])
            self.exp["_final_obs"] = np.zeros(rows, bool)
        if state:
            self._state_row = np.zeros(env.state_space.shape, np.float32)
            self.exp["state"] = np.zeros((rows, *env.state_space.shape), np.float32)
            if same_step:
                self.exp["final_state"] = np.zeros_like(self.exp["state"])
        # rows whose sim_time (and state) is documented this step
        self.timed = np.ones(rows, bool)

    @classmethod
    def of(cls, vec: Any, factory: ChaosFactory) -> Replay:
        """The replay of ``vec``, a vector env of ``factory``'s envs: its envs, its workers'
        groups and its autoreset mode."""
        return cls(factory.for_replay(), vec.num_sims,
                   [(w.first, w.count) for w in vec.workers],
                   same_step=vec.autoreset_mode is AutoresetMode.SAME_STEP,
                   state=vec.sim_spec.state_dim > 0)

    @property
    def mask(self) -> np.ndarray:
        return self.exp["action_mask"]

    def _copy(self, s: int) -> None:
        env, e, r = self.envs[s], self.exp, slice(s * self.n, (s + 1) * self.n)
        e["obs"][r] = env.obs_buf
        e["rew"][r] = env.rew_buf
        e["term"][r] = env.term_buf
        e["trunc"][r] = env.trunc_buf
        e["action_mask"][r] = env.mask_buf
        e["needs_action"][r] = env.needs_buf
        e["live"][r] = env.live
        e["invalid_action"][r] = env.invalid_buf
        e["invalid_count"][r] = env.invalid_count
        e["restarted"][r] = False
        e["sim_time"][r] = env.now
        if self.state:
            env.write_state(self._state_row)
            e["state"][r] = self._state_row
        self.timed[r] = True

    def _restarted(self, s: int) -> None:
        """Env ``s`` is rebuilt: its rows report a truncation; its next step resets it
        (``SameStep``: it is reset now, its rows show the new episode)."""
        e, r = self.exp, slice(s * self.n, (s + 1) * self.n)
        with contextlib.suppress(Exception):
            self.envs[s].close()
        self.restarts[s] += 1
        self.envs[s] = self.factory()
        seed = restart_seed(self.seeds[s], self.restarts[s])
        if self.same_step:
            self.envs[s].reset_arrays(seed)
            self._copy(s)
            e["final_obs"][r] = 0
            e["_final_obs"][r] = True
        else:
            for key in ("obs", "invalid_count"):
                e[key][r] = 0
            for key in ("needs_action", "live", "invalid_action"):
                e[key][r] = False
            e["action_mask"][r] = self.noop
            self.need_reset[s] = True
            self.next_seed[s] = seed
        e["rew"][r] = 0
        e["term"][r] = False
        e["trunc"][r] = True
        e["restarted"][r] = True
        self.timed[r] = False  # the clock of a lost env is not documented

    def reset(self, seed: int) -> dict[str, np.ndarray]:
        """``vec.reset(seed=seed)``: env ``i`` gets ``seed + i``."""
        for s, env in enumerate(self.envs):
            self.seeds[s] = seed + s
            self.need_reset[s] = False
            env.reset_arrays(seed + s)
            self._copy(s)
        if self.same_step:
            self.exp["_final_obs"][:] = False
        return self.exp

    def step(self, actions: np.ndarray, lost: set[int],
             workers: Sequence[int] | None = None) -> tuple[set[int], Counter]:
        """One ``vec.step(actions)``; the envs of the workers ``lost`` died or hung.
        ``workers``: only these workers' envs step (async mode: the rows of one ``send``,
        ``actions`` still indexed by row of the whole batch).

        Returns the envs restarted on this step and the env faults that fired.
        """
        hit: set[int] = set()
        fired: Counter = Counter()
        ws = range(len(self.groups)) if workers is None else workers
        for w in ws:
            group = self.groups[w]
            if self.same_step:
                self.exp["_final_obs"][group[0] * self.n : (group[-1] + 1) * self.n] = False
            if w in lost:
                hit.update(group)
                continue
            for s in group:
                env = self.envs[s]
                try:
                    if self.need_reset[s] or env.episode_over:
                        seed, self.next_seed[s] = self.next_seed[s], None
                        self.need_reset[s] = False
                        env.reset_arrays(seed)
                        self._copy(s)
                        continue
                    env.step_arrays(actions[s * self.n : (s + 1) * self.n])
                    self._copy(s)
                    if self.same_step and env.episode_over:
                        self._same_step_reset(s)
                except ChaosError:
                    fired["env_raise"] += 1
                    hit.add(s)
                except ChaosExit:  # the worker dies: all its envs are lost
                    fired["env_exit"] += 1
                    hit.update(group)
                    break
        for s in sorted(hit):
            self._restarted(s)
        return hit, fired

    def _same_step_reset(self, s: int) -> None:
        """``SameStep``: the ended episode's final observation, reward and flags; the new
        episode's observations and masks."""
        e, r = self.exp, slice(s * self.n, (s + 1) * self.n)
        e["final_obs"][r] = e["obs"][r]
        e["_final_obs"][r] = True
        if self.state:
            e["final_state"][r] = e["state"][r]
        keep = {k: e[k][r].copy() for k in ("rew", "term", "trunc", "invalid_action")}
        self.envs[s].reset_arrays(None)
        self._copy(s)
        for k, v in keep.items():
            e[k][r] = v

    def close(self) -> None:
        for env in self.envs:
            with contextlib.suppress(Exception):
                env.close()


def compare(got: dict[str, np.ndarray], exp: dict[str, np.ndarray], timed: np.ndarray
            ) -> tuple[np.ndarray, list[str]]:
    """Rows where ``got`` differs from ``exp`` in any field (bit for bit; ``sim_time`` only
    where ``timed``), and the first differences in words."""
    rows = len(timed)
    bad = np.zeros(rows, bool)
    notes: list[str] = []
    for key in FIELDS + SAME_STEP_FIELDS + STATE_FIELDS:
        if key not in exp:
            continue
        a, b = np.asarray(got[key]), exp[key]
        if a.dtype != b.dtype or a.shape != b.shape:
            bad[:] = True
            notes.append(f"{key}: {a.dtype}{a.shape}, expected {b.dtype}{b.shape}")
            continue
        diff = (a.view(np.uint8).reshape(rows, -1) != b.view(np.uint8).reshape(rows, -1)
                ).any(axis=1)
        if key in ("sim_time", "state"):  # a lost env's clock and state are not documented
            diff &= timed
        elif key == "final_obs":  # other rows hold whatever an earlier step left there
            diff &= exp["_final_obs"]
        elif key == "final_state":  # ... and a lost env's episode has no final state
            diff &= exp["_final_obs"] & ~exp["restarted"]
        if diff.any():
            r = int(np.flatnonzero(diff)[0])
            notes.append(f"{key} row {r}: {a[r].tolist()}, expected {b[r].tolist()}")
        bad |= diff
    return bad, notes


# ---- processes and /dev/shm ------------------------------------------------------------------

ProcId = tuple[int, int]  # (pid, start time): a pid that cannot be mistaken for a reuse


def _stat(pid: int) -> tuple[str, int, int] | None:
    """``(state, ppid, start time)`` of a process, or ``None`` if there is none."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            rest = f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return rest[0], int(rest[1]), int(rest[19])


def proc_id(pid: int) -> ProcId | None:
    st = _stat(pid)
    return None if st is None else (pid, st[2])


def running(ident: ProcId) -> bool:
    """The process exists (a zombie counts only if it is our unreaped child)."""
    st = _stat(ident[0])
    if st is None or st[2] != ident[1]:
        return False
    return st[0] != "Z" or st[1] == os.getpid()


def signal_proc(ident: ProcId, sig: int) -> bool:
    """Send ``sig`` to the process ``ident`` if it is still that process."""
    st = _stat(ident[0])
    if st is None or st[2] != ident[1] or st[0] == "Z":
        return False
    try:
        os.kill(ident[0], sig)
    except ProcessLookupError:
        return False
    return True


def _wait_state(ident: ProcId, states: str, within: float = 2.0) -> bool:
    """Wait until the process is in one of ``states`` (``"X"``: gone)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        st = _stat(ident[0])
        if st is None or st[2] != ident[1]:
            if "X" in states:
                return True
        elif st[0] in states:
            return True
        time.sleep(0.0005)
    return False


def children() -> dict[int, str]:
    """Our direct child processes: pid -> command line."""
    me, out = os.getpid(), {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            st = _stat(int(name))
            if st is not None and st[1] == me:
                try:
                    with open(f"/proc/{name}/cmdline", "rb") as f:
                        out[int(name)] = f.read().replace(b"\0", b" ").decode(errors="replace")
                except OSError:
                    pass
    return out


def shm_entries() -> set[str]:
    return set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()


def _tree() -> set[int]:
    """This process and its descendants."""
    parent: dict[int, int] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            st = _stat(int(name))
            if st is not None:
                parent[int(name)] = st[1]
    ours, grew = {os.getpid()}, True
    while grew:
        new = {p for p, pp in parent.items() if pp in ours and p not in ours}
        ours |= new
        grew = bool(new)
    return ours


def foreign_shm(names: set[str]) -> set[str]:
    """The entries of ``names`` that a process outside our tree has mapped (not ours).

    Matched by inode: glibc's ``sem_open`` makes a semaphore under a temporary name and
    links it to its own, so its creator maps ``/dev/shm/sem.XXXXXX (deleted)``.
    """
    inodes: dict[str, str] = {}
    for n in names:
        with contextlib.suppress(OSError):
            inodes[str(os.stat(f"/dev/shm/{n}").st_ino)] = n
    if not inodes:
        return set()
    ours, found = _tree(), set()
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) in ours:
            continue
        try:
            with open(f"/proc/{pid}/maps") as f:
                maps = f.read()
        except OSError:
            continue
        for line in maps.splitlines():
            parts = line.split(None, 5)
            if len(parts) == 6 and parts[5].startswith("/dev/shm/") and parts[4] in inodes:
                found.add(inodes[parts[4]])
    return found


# ---- the run ---------------------------------------------------------------------------------


@dataclass
class ChaosConfig:
    """What to run.

    Args:
        backend: ``"shm"``, ``"supersuit"``, ``"roundrobin"``, ``"ray"``.
        num_envs, num_workers: the vector env (``num_workers`` is SuperSuit's ``num_cpus``).
        steps: vector steps in all.
        faults: faults the harness injects (kinds drawn from ``kinds``).
        seed: seeds the policy, the fault plan and the envs.
        kinds: harness fault kinds to draw from (those the backend can take).
        points: where the SIGINT faults land (:data:`POINTS`).
        on_error: ``"restart"``, ``"raise"`` or ``"both"`` (alternate segments).
        autoreset_mode: ``"NextStep"``, ``"SameStep"`` or ``"both"`` (alternate every
            other segment pair).
        segment_steps: steps per vector env (then it is closed and checked for leaks).
        env: the base env: a zero-argument factory or a registered name.
        env_kwargs: scenario arguments when ``env`` is a name.
        raise_rate, exit_rate: env faults per env step (:class:`FaultSchedule`).
        timeout: the vector env's worker timeout (a stopped worker costs this much).
        watchdog: seconds a vector env call may take before it counts as a hang.
        options: more ``make_vec`` options (``start_method``, ...).
        batch_size: below ``num_envs``: async mode, ``async_reset`` then ``recv`` and
            ``send`` (harness faults: ``sigkill`` and ``sigstop`` of any worker, idle or
            with a step in flight, between a ``recv`` and its ``send``; ``sigint_thread``
            during a ``send`` and the next ``recv``).
        state: ``make_vec(state=True)`` (``env`` must have ``state()``): the states are
            checked too.
        hung_slack: async mode: seconds beyond ``timeout`` within which a stopped or
            killed worker must be found (a recv begun later that finds it is an error,
            and so is one not found by then).
    """

    backend: str = "shm"
    num_envs: int = 6
    num_workers: int = 2
    steps: int = 400
    faults: int = 20
    seed: int = 0
    kinds: tuple[str, ...] = HARNESS_KINDS
    points: tuple[str, ...] = tuple(POINTS)
    on_error: str = "both"
    autoreset_mode: str = "NextStep"
    segment_steps: int = 200
    env: Any = None
    env_kwargs: dict = field(default_factory=dict)
    raise_rate: float = 0.004
    exit_rate: float = 0.001
    timeout: float = 1.0
    watchdog: float = 120.0
    options: dict = field(default_factory=dict)
    batch_size: int | None = None
    state: bool = False
    hung_slack: float = HUNG_SLACK

    @property
    def is_async(self) -> bool:
        return self.batch_size is not None and self.batch_size < self.num_envs

    @property
    def has_processes(self) -> bool:
        if self.backend in IN_PROCESS:
            return False
        return not (self.backend == "supersuit" and self.num_workers <= 1)


@dataclass
class ChaosReport:
    """What a run saw. ``ok`` when nothing went wrong (every count below ``faults`` zero)."""

    backend: str
    steps: int = 0
    segments: int = 0
    faults: Counter = field(default_factory=Counter)
    hangs: int = 0
    divergent_rows: int = 0
    errors: int = 0
    leaked_processes: int = 0
    leaked_shm: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    sigints_sent: int = 0  # sigint_thread: SIGINTs sent (those that cut a call: faults)
    raised_at: Counter = field(default_factory=Counter)  # ... where their KeyboardInterrupts
    # async: seconds from a worker's SIGKILL or SIGSTOP to the end of the recv that found it
    found: list[float] = field(default_factory=list)
    cut_calls: Counter = field(default_factory=Counter)  # sigint_thread: the calls it cut
    # sigint_thread: KeyboardInterrupts raised in a finalizer, which Python drops (by object)
    in_finalizers: Counter = field(default_factory=Counter)

    @property
    def leaked_sem(self) -> int:
        return sum(name.startswith("sem.") for name in self.leaked_shm)

    @property
    def ok(self) -> bool:
        return not (self.hangs or self.divergent_rows or self.errors
                    or self.leaked_processes or self.leaked_shm)

    def note(self, text: str) -> None:
        if len(self.notes) < 50:
            self.notes.append(text)
        log.warning("chaos %s: %s", self.backend, text)

    def summary(self) -> str:
        kinds = ", ".join(f"{k} {v}" for k, v in sorted(self.faults.items())) or "none"
        return (
            f"{self.backend}: {self.steps} steps, {self.segments} vector envs, "
            f"{sum(self.faults.values())} faults ({kinds}); hangs {self.hangs}, divergent rows "
            f"{self.divergent_rows}, errors {self.errors}, leaked processes "
            f"{self.leaked_processes}, leaked shm {len(self.leaked_shm) - self.leaked_sem}, "
            f"leaked sem {self.leaked_sem}; {self.seconds:.1f} s"
        )

    def details(self) -> str:
        """The sigint_thread figures (SIGINTs sent, calls cut, where) and async mode's
        times to find a lost worker, in a line each (empty if none)."""
        lines = []
        if self.sigints_sent:
            cut = ", ".join(f"{k} {v}" for k, v in sorted(self.cut_calls.items()))
            where = ", ".join(f"{k} {v}" for k, v in self.raised_at.most_common(6))
            lines.append(f"sigint_thread: {self.sigints_sent} SIGINTs sent, calls cut: {cut}; "
                         f"raised at: {where}")
        if self.in_finalizers:
            lines.append(f"sigint_thread: {sum(self.in_finalizers.values())} dropped in "
                         f"finalizers: {dict(self.in_finalizers.most_common(3))}")
        if self.found:
            f = np.array(self.found)
            lines.append(f"async: {len(f)} lost workers found, {np.median(f):.2f} s median, "
                         f"{f.max():.2f} s at most after the signal")
        return "\n".join(lines)


@dataclass
class _Fault:
    kind: str
    worker: int = 0
    timing: str = "idle"  # sigkill/sigstop: "idle" (between steps) or "busy" (mid-step)
    point: str = "wait"  # sigint: where it lands (POINTS)
    close: bool = False  # sigint: close the vector env after it
    again: bool = False  # sigint: another one while the next call finishes this step
    twice: bool = False  # sigkill: kill the replacement too, while it boots


@dataclass
class _Carry:
    """What a step leaves to the next: a signal that landed after the worker answered
    (the next step must see it), an interrupted step, a closed vector env."""

    late: tuple[int, str, ProcId | None] | None = None  # (worker, kind, process)
    interrupted: bool = False
    again: bool = False
    closed: bool = False
    spam: int = 0  # a sigint_thread fault that has not landed yet: the steps it was tried


@contextlib.contextmanager
def _watchdog(seconds: float) -> Iterator[None]:
    """Raise :class:`ChaosHang` in the main thread if the block overruns ``seconds``."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def fire(signum: int, frame: Any) -> None:
        stack = "".join(traceback.format_stack(frame)[-8:])
        raise ChaosHang(f"no return within {seconds:g} s; stack:\n{stack}")

    old = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def _worker_pid(vec: Any, i: int) -> int | None:
    """The process id of worker ``i`` of ``vec`` (by index: ``worker_pids()`` leaves out
    a worker without a process, so positions in it can shift)."""
    return vec.pool.transport.pid(vec.workers[i])


def _worker_proc(vec: Any, i: int) -> ProcId | None:
    pid = _worker_pid(vec, i)
    return None if pid is None else proc_id(pid)


def _policy(mask: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """A uniformly random legal action per row (rows with only the no-op get ``0``)."""
    return (rng.random(mask.shape) * mask).argmax(axis=1).astype(np.int64)


def _default_env() -> Callable[[], Any]:
    from devkit.toyenv import ToyEnv

    return ToyEnv


class _Interrupt:
    """Makes a ``SIGINT`` land in the parent the first time a call of ``vec`` passes fault
    point ``point`` (``vec.fault_hook``): a real signal, turned into ``KeyboardInterrupt`` by
    Python's handler at once (or when the vector env unblocks it)."""

    def __init__(self, vec: Any, point: str):
        if point not in FAULT_POINTS:
            raise ValueError(f"{point!r} is not a fault point; see FAULT_POINTS")
        self.vec, self.point = vec, point
        self.reached = False
        # Python's handler, even in a process started in the background (SIGINT ignored).
        self.handler = signal.signal(signal.SIGINT, signal.default_int_handler)

        def hook(name: str) -> None:
            if name == point and not self.reached:
                self.reached = True
                signal.raise_signal(signal.SIGINT)

        vec.fault_hook = hook

    def restore(self) -> None:
        self.vec.fault_hook = None
        if self.handler is not None:
            signal.signal(signal.SIGINT, self.handler)
            self.handler = None


class _Spammer:
    """Another thread that sends ``SIGINT`` to the whole process (``os.kill(getpid())``, as
    a terminal's Ctrl-C: the OS hands it to any thread that does not block it) at random
    moments while a vector env call runs (:meth:`call`).

    The harness's own code is never cut: while a run has this fault, Python's handler is
    :meth:`_handler`, which raises ``KeyboardInterrupt`` (as ``signal.default_int_handler``
    does) only while :meth:`call` is running its call, and not once that call has returned
    into :meth:`call`. One SIGINT more than were sent is a real Ctrl-C: it is raised wherever
    it lands (held-off ones may come late: a vector env raises them when its block ends).

    The first SIGINT of a call is sent after a delay uniform in ``[0, est)``, ``est`` the
    mean duration of recent calls, then one after each such delay until the call returns.
    Python switches threads every 5 ms by default: longer than a step of an in-process
    backend, whose steps a SIGINT would then rarely reach; :meth:`start` lowers it to 20 us
    (it costs only while the sender waits for the interpreter).
    """

    def __init__(self, seed: Sequence[int]):
        self.rng = np.random.default_rng(list(seed))
        self.est = 0.001  # seconds: the mean duration of a call (updated by each call)
        self.armed = False
        self.go = threading.Event()
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.sent = 0
        self.handled = 0  # SIGINTs handled (never more than sent, unless one came from outside)
        self.landed: list[tuple[str, str | None]] = []  # (innermost frame, env frame or None)
        self.in_finalizers: list[str] = []  # KeyboardInterrupts Python dropped (see _unraisable)
        self.deferred: list[Any] = []  # other unraisable exceptions, passed on by close()
        self.thread: threading.Thread | None = None
        self.old_handler: Any = None
        self.old_hook: Any = None
        self.old_switch = 0.0

    def start(self) -> None:
        self.old_handler = signal.signal(signal.SIGINT, self._handler)
        self.old_hook = sys.unraisablehook
        sys.unraisablehook = self._unraisable
        self.old_switch = sys.getswitchinterval()
        sys.setswitchinterval(min(self.old_switch, 0.00002))
        self.thread = threading.Thread(target=self._run, daemon=True, name="chaos-sigint")
        self.thread.start()

    def close(self) -> None:
        self.stop.set()
        self.go.set()
        if self.thread is not None:
            self.thread.join()
        sys.setswitchinterval(self.old_switch)
        signal.signal(signal.SIGINT, self.old_handler)
        sys.unraisablehook = self.old_hook
        for args in self.deferred:
            self.old_hook(args)
        self.deferred.clear()

    def _unraisable(self, args: Any) -> None:
        """A ``KeyboardInterrupt`` raised in a finalizer (``__del__``, a weakref callback, a
        generator closed by the garbage collector) cannot propagate: Python reports it as
        unraisable and drops it, as it drops a real Ctrl-C there. Such a SIGINT is counted
        (:attr:`in_finalizers`), not an error; a hook that formats a traceback (pytest's)
        could itself be cut by the next SIGINT, so other exceptions wait for :meth:`close`."""
        if isinstance(args.exc_value, KeyboardInterrupt):
            self.in_finalizers.append(repr(args.object)[:80])
        else:
            self.deferred.append(args)

    def _run(self) -> None:
        pid = os.getpid()
        while not self.stop.is_set():
            self.go.wait()
            while self.go.is_set() and not self.stop.is_set():
                time.sleep(float(self.rng.uniform(0, self.est)))
                with self.lock:
                    if self.go.is_set() and not self.stop.is_set():
                        self.sent += 1  # before: the handler may run before kill returns
                        os.kill(pid, signal.SIGINT)

    def _handler(self, signum: int, frame: Any) -> None:
        self.handled += 1
        if self.armed:
            if frame is not None and frame.f_code in (_Spammer.call.__code__,
                                                      _Spammer._unraisable.__code__):
                return  # the call has returned (too late to cut it), or the hook runs
            raise KeyboardInterrupt
        if self.handled > self.sent:
            raise KeyboardInterrupt  # more SIGINTs than were sent: a real Ctrl-C

    def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)`` with SIGINTs sent meanwhile; a ``KeyboardInterrupt`` it raises is
        recorded (where it was raised) and propagates."""
        start = time.monotonic()
        # go before armed: a SIGINT raised inside Event.set, just after it took its lock,
        # would leave that lock held (and the next set or clear hangs).
        self.go.set()
        self.armed = True
        try:
            return fn(*args)
        except KeyboardInterrupt as exc:
            self.armed = False
            self.landed.append(_raised_at(exc.__traceback__))
            raise
        finally:
            self.armed = False
            self.go.clear()
            with self.lock:  # no SIGINT is being sent once this returns
                pass
            self.est = 0.9 * self.est + 0.1 * (time.monotonic() - start)


def _raised_at(tb: Any) -> tuple[str, str | None]:
    """Where a ``KeyboardInterrupt`` was raised (the innermost frame), and the innermost
    frame of env code on its way (:data:`ENV_CODE`, SimPy), if any."""
    where = env = None
    for frame, line in traceback.walk_tb(tb):
        code = frame.f_code
        if code is _Spammer._handler.__code__:
            continue
        name = f"{os.path.basename(code.co_filename)}:{line} {code.co_name}"
        where = name
        if code.co_name in ENV_CODE or f"{os.sep}simpy{os.sep}" in code.co_filename:
            env = name
    return where or "?", env


class _BootKiller:
    """Kills the first new child process (a replacement worker, while it boots)."""

    def __init__(self) -> None:
        self.before = set(children())
        self.killed: int | None = None
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.is_set():
            for pid, cmd in children().items():
                if pid not in self.before and "resource_tracker" not in cmd:
                    ident = proc_id(pid)
                    if ident is not None and signal_proc(ident, signal.SIGKILL):
                        self.killed = pid
                        return
            time.sleep(0.0005)

    def join(self) -> None:
        self.stop.set()
        self.thread.join()


class _Chaos:
    """One run: segments of vector envs, faults, checks."""

    def __init__(self, cfg: ChaosConfig, echo: Callable[[str], None] | None = None):
        self.cfg = cfg
        self.echo = echo
        self.report = ChaosReport(cfg.backend)
        self.rng = np.random.default_rng([cfg.seed, 1])
        base = cfg.env if cfg.env is not None else _default_env()
        exit_rate = cfg.exit_rate if cfg.has_processes else 0.0
        self.factory = ChaosFactory(
            base, FaultSchedule(cfg.raise_rate, exit_rate, cfg.seed),
            tuple(sorted(cfg.env_kwargs.items())),
        )
        kinds = [k for k in cfg.kinds if k in HARNESS_KINDS]
        if not cfg.has_processes:
            kinds = [k for k in kinds if k in SIGINT_KINDS]
        if cfg.is_async:
            kinds = [k for k in kinds if k != "sigint"]
        self.kinds = kinds
        self.plan = self._plan()
        self.spam = _Spammer([cfg.seed, 3])
        self.where: Counter = Counter()  # where sigint_thread's KeyboardInterrupts were raised
        self.hung: dict[int, tuple[ProcId, float, int]] = {}  # async: signalled workers
        self.found: list[float] = []  # async: seconds from a signal to the recv that found it
        self.calls: Counter = Counter()  # sigint_thread: the calls cut, by name

    def _plan(self) -> dict[int, _Fault]:
        """Fault steps (odd steps, so none follows another) and what each one is: the
        kinds, timings and phases in turn (shuffled), so a short run covers them all."""
        cfg, rng = self.cfg, self.rng
        slots = max(cfg.steps // 2, 1)
        n = min(cfg.faults, slots) if self.kinds else 0
        steps = sorted((rng.choice(slots, size=n, replace=False) * 2 + 1).tolist())
        kinds = [self.kinds[j % len(self.kinds)] for j in range(n)] if n else []
        rng.shuffle(kinds)
        seen: Counter = Counter()
        plan = {}
        # roundrobin's step runs the envs as it goes: no hand-out, wait or poll to land in
        # (a failure takes the general way, but a step is not planned to fail here).
        skip = STEP_IN_PLACE if cfg.backend == "roundrobin" else ()
        points = [p for p, (_, needs) in POINTS.items()
                  if p in cfg.points and (cfg.has_processes or not needs) and p not in skip]
        for s, kind in zip(steps, kinds, strict=True):
            j = seen[kind]
            seen[kind] += 1
            plan[s] = _Fault(
                kind,
                worker=int(rng.integers(max(cfg.num_workers, 1))),
                timing=("idle", "busy")[j % 2],
                point=points[j % len(points)],
                close=j % 7 == 3,
                again=j % 5 == 1,
                twice=j % 3 == 2 and cfg.backend != "ray",  # Ray's actors are not our children
            )
        return plan

    # ---- the run ------------------------------------------------------------------------
    def run(self) -> ChaosReport:
        start = time.monotonic()
        step, seg = 0, 0
        if "sigint_thread" in self.kinds:
            self.spam.start()
        try:
            while step < self.cfg.steps:
                n = min(self.cfg.segment_steps, self.cfg.steps - step)
                mode = self.cfg.on_error
                if mode == "both":
                    mode = "restart" if seg % 2 == 0 else "raise"
                step += max(self._segment(seg, step, n, mode), 1)  # a failed build: skip
                seg += 1
        finally:
            if "sigint_thread" in self.kinds:
                self.spam.close()
        self.report.raised_at = self.where
        self.report.sigints_sent = self.spam.sent
        self.report.found = self.found
        self.report.cut_calls = self.calls
        self.report.in_finalizers = Counter(self.spam.in_finalizers)
        self.report.steps = step
        self.report.segments = seg
        self.report.seconds = time.monotonic() - start
        return self.report

    def _make(self, seg: int, mode: str) -> Any:
        from deszoo.vector import make_vec

        cfg = self.cfg
        opts = dict(cfg.options)
        if cfg.backend != "roundrobin":
            opts["num_workers"] = cfg.num_workers
        if cfg.is_async:
            opts["batch_size"] = cfg.batch_size
        if cfg.state:
            opts["state"] = True
        return make_vec(self.factory, cfg.num_envs, backend=cfg.backend, seed=self._seed(seg),
                        timeout=cfg.timeout, on_error=mode,
                        autoreset_mode=self._autoreset(seg), **opts)

    def _autoreset(self, seg: int) -> str:
        mode = self.cfg.autoreset_mode
        if mode == "both":
            return "SameStep" if seg // 2 % 2 else "NextStep"
        return mode

    def _seed(self, seg: int) -> int:
        return self.cfg.seed * 1000 + seg * 100

    def _segment(self, seg: int, first: int, n: int, mode: str) -> int:
        """Run steps ``first .. first + n - 1`` on a new vector env; return the steps run."""
        rep, cfg = self.report, self.cfg
        self.label = f"{mode}, {self._autoreset(seg)}"
        kids, shm = children(), shm_entries()
        seen: set[ProcId] = set()
        self.diverged, self.events = False, []
        vec = replay = None
        self.done = 0  # steps tried (a step that hangs is not tried again)
        try:
            with _watchdog(cfg.watchdog):
                vec = self._make(seg, mode)
            replay = Replay.of(vec, self.factory)
            self._watch(vec, seen)
            if cfg.is_async:
                self._run_async(vec, replay, seg, first, n, mode, seen)
            else:
                self._run_sync(vec, replay, seg, first, n, mode, seen)
        except ChaosHang as exc:
            rep.hangs += 1
            rep.note(f"segment {seg} ({self.label}) hung: {exc}")
        except Exception as exc:  # a vector env that failed: an error, the run goes on
            rep.errors += 1
            rep.note(f"segment {seg} ({self.label}): {type(exc).__name__}: {exc}\n"
                     + traceback.format_exc(limit=-6))
        finally:
            if vec is not None:
                self._close(vec, seen)
            if replay is not None:
                replay.close()
            self._leaks(kids, shm, seen)
        if self.echo is not None:
            self.echo(f"segment {seg} ({self.label}): steps {first}..{first + self.done - 1}; "
                      + rep.summary())
        return min(self.done, n)

    def _run_sync(self, vec: Any, replay: Replay, seg: int, first: int, n: int, mode: str,
                  seen: set[ProcId]) -> None:
        """Steps ``first .. first + n - 1`` with ``reset`` and ``step``."""
        rep, cfg = self.report, self.cfg
        with _watchdog(cfg.watchdog):
            obs, infos = vec.reset()
        exp = replay.reset(self._seed(seg))
        self._check(self._got(obs, infos), exp, replay.timed, first, mode)
        policy = np.random.default_rng([cfg.seed, 2, seg])
        carry = _Carry()
        while self.done < n or (carry.late and self.done == n):  # a late signal gets its step
            t = first + self.done
            fault = self.plan.get(t) if self.done < n else None
            if fault is not None and (carry.late or carry.interrupted):
                fault = None  # one fault at a time
            if (fault is None and 0 < carry.spam < SPAM_TRIES and self.done < n
                    and not (carry.late or carry.interrupted)):
                fault = _Fault("sigint_thread")  # the last one did not land
            self.done += 1
            carry = self._step(vec, replay, policy, t, fault, carry, mode, seen)
            if carry.closed:
                break
        if carry.late is not None and not carry.closed:
            rep.errors += 1
            rep.note(f"step {first + self.done - 1}: a signal to worker {carry.late[0]} was "
                     "never seen")

    def _watch(self, vec: Any, seen: set[ProcId]) -> None:
        for pid in vec.worker_pids():
            ident = proc_id(pid)
            if ident is not None:
                seen.add(ident)

    @staticmethod
    def _got(obs: np.ndarray, infos: dict, rew: Any = None, term: Any = None,
             trunc: Any = None) -> dict:
        """A step's (or a reset's: no rewards, no flags) results by field name."""
        rows = len(obs)
        out = {k: infos[k] for k in FIELDS + SAME_STEP_FIELDS + ("state",) if k in infos}
        if "state" in infos.get("final_info", {}):
            out["final_state"] = infos["final_info"]["state"]
        out["obs"] = obs
        out["rew"] = np.zeros(rows, np.float32) if rew is None else rew
        out["term"] = np.zeros(rows, bool) if term is None else term
        out["trunc"] = np.zeros(rows, bool) if trunc is None else trunc
        return out

    def _step(self, vec: Any, replay: Replay, policy: np.random.Generator, t: int,
              fault: _Fault | None, carry: _Carry, mode: str, seen: set[ProcId]) -> _Carry:
        """One step with its fault; what it leaves to the next step."""
        rep, cfg = self.report, self.cfg
        acts = _policy(replay.mask, policy)
        gens = [w.generation for w in vec.workers]
        lost: set[int] = set()
        if carry.late is not None:
            lost.add(carry.late[0])
            w, kind, ident = carry.late
            want = "T" if kind == "sigstop" else "ZX"
            if ident is not None and not _wait_state(ident, want):
                st = _stat(ident[0])
                rep.errors += 1
                rep.note(f"step {t}: the {kind} of worker {w} (pid {ident[0]}) on the step "
                         f"before has not taken: state {st[0] if st else 'gone'}")
        timer = interrupt = killer = None
        target: ProcId | None = None
        kill = fault is not None and fault.kind in ("sigkill", "sigstop")
        spam = fault is not None and fault.kind == "sigint_thread"
        before = vec.num_events() if spam else None
        point = None
        if fault is not None and fault.kind == "sigint":
            point = fault.point
        elif carry.again:  # a SIGINT while this call finishes the interrupted step
            point = "settle"
        if point is not None:
            rep.faults["sigint"] += 1
            if point == "settle" and vec.state is not State.INTERRUPTED:
                # the last step was cut short before its hand-out: this one's, then
                point = "after" if self.cfg.backend == "roundrobin" else "wait"
            if point == "settle":
                applied = False  # it lands before this step's hand-out
            else:
                applied, needs = POINTS[point]
                kill = kill or needs
            interrupt = _Interrupt(vec, point)
        if kill and _worker_proc(vec, fault.worker) is None:  # between steps: never
            rep.errors += 1
            rep.note(f"step {t}: worker {fault.worker} has no process to signal")
            kill = False
        if kill:
            kind = fault.kind if fault.kind != "sigint" else "sigkill"
            sig = signal.SIGKILL if kind == "sigkill" else signal.SIGSTOP
            target = _worker_proc(vec, fault.worker)
            seen.add(target)
            if fault.kind != "sigint":
                rep.faults[kind] += 1
            if fault.timing == "idle" or fault.kind == "sigint":
                sent = signal_proc(target, sig)
                if not _wait_state(target, "ZX" if sig == signal.SIGKILL else "T", 5.0):
                    st = _stat(target[0])
                    rep.errors += 1
                    rep.note(f"step {t}: {kind} of idle worker {fault.worker} (pid "
                             f"{target[0]}, sent {sent}) has not taken in 5 s: state "
                             f"{st[0] if st else 'gone'}")
                lost.add(fault.worker)
            else:
                timer = threading.Timer(float(self.rng.uniform(0, 0.002)), signal_proc,
                                        (target, sig))
            if kind == "sigkill" and fault.twice:
                killer = _BootKiller()
        if spam:
            self.events.append(f"step {t}: sigint_thread (try {carry.spam + 1})")
        elif fault is not None or point is not None:
            self.events.append(f"step {t}: {fault.kind if fault else 'sigint'} "
                               + (f"at {point}" if point else f"{fault.timing} worker "
                                  f"{fault.worker}") + (" twice" if killer else "")
                               + (f" (pid {target[0]})" if target else ""))
        result = raised = None
        interrupted = False
        try:
            with _watchdog(cfg.watchdog):
                if timer is not None:
                    timer.start()
                try:
                    result = self.spam.call(vec.step, acts) if spam else vec.step(acts)
                except (SubEnvError, WorkerDiedError, WorkerTimeoutError) as exc:
                    if not hasattr(exc, "results"):
                        raise
                    result, raised = exc.results, exc
                finally:
                    if timer is not None:
                        timer.join()
                    if killer is not None:
                        killer.join()
        except KeyboardInterrupt:
            interrupted = True
        finally:
            if interrupt is not None:
                interrupt.restore()
        out = _Carry(interrupted=interrupted)
        if killer is not None and killer.killed is not None:
            rep.faults["sigkill"] += 1
            pids = [_worker_pid(vec, i) for i in range(len(vec.workers))]
            if killer.killed in pids:  # it had booted: the next step sees it
                w = pids.index(killer.killed)
                out.late = (w, "sigkill", proc_id(killer.killed))
        if timer is not None:
            if vec.workers[fault.worker].generation != gens[fault.worker]:
                lost.add(fault.worker)
            else:  # it landed after the worker answered: the next step must see it
                out.late = (fault.worker, fault.kind, target)
        if fault is not None and fault.kind == "sigstop" and out.late is None:
            self._release(target)
        if carry.late is not None and carry.late[1] == "sigstop":
            self._release(carry.late[2])
        if interrupt is not None and not interrupted:
            rep.errors += 1
            rep.note(f"step {t}: SIGINT at {point} raised no KeyboardInterrupt"
                     + ("" if interrupt.reached else " (the step never reached that point)"))
        if interrupted and interrupt is None and not spam:
            raise KeyboardInterrupt  # a real Ctrl-C: stop the run
        if spam and not interrupted:
            out.spam = carry.spam + 1  # no SIGINT landed in time: try again
        elif spam:
            out.interrupted = False  # finished here, as a user would (or closed)
            if fault.close:
                with _watchdog(cfg.watchdog):
                    vec.close()
                out.closed = True
                return out
            applied = self._spammed(vec, t, before)
        # What the step did, in the replay.
        hit: set[int] = set()
        if not interrupted or applied:
            hit, fired = replay.step(acts, lost)
            rep.faults.update(fired)
            if fired:
                self.events.append(f"step {t}: {dict(fired)}")
        elif lost:
            rep.errors += 1
            rep.note(f"step {t}: workers {sorted(lost)} lost on a step that never started")
        if [w.generation for w in vec.workers] != gens:
            self._watch(vec, seen)
        if interrupted:
            if fault is not None and fault.close:
                with _watchdog(cfg.watchdog):
                    vec.close()
                out.closed = True
            out.again = fault is not None and fault.again and not spam
            return out
        obs, rew, term, trunc, infos = result
        self._check(self._got(obs, infos, rew, term, trunc), replay.exp, replay.timed, t, mode)
        if mode == "raise" and bool(hit) != (raised is not None) and not self.diverged:
            rep.errors += 1
            rep.note(f"step {t}: on_error='raise', envs {sorted(hit)} hit, raised {raised!r}")
        return out

    def _landed(self, t: int, call: str) -> None:
        """A sigint_thread SIGINT cut call ``call`` short: count it; one raised inside an
        env's code is an error."""
        self.report.faults["sigint_thread"] += 1
        self.calls[call] += 1
        where, env = self.spam.landed[-1]
        self.where[where] += 1
        self.events.append(f"step {t}: sigint_thread cut {call}() at {where}")
        if env is not None:
            self.report.errors += 1
            self.report.note(f"step {t}: KeyboardInterrupt raised inside env code ({env}; "
                             f"innermost {where}) during {call}()")

    def _spammed(self, vec: Any, t: int, before: np.ndarray) -> bool:
        """A step was cut short by a sigint_thread SIGINT: finish it as a user would (the
        next call, here ``get_attr``, under SIGINTs too), and tell whether it happened (an
        env moved: ``num_events``); the rows of the steps after it say whether it happened
        in full."""
        self._landed(t, "step")
        for k in range(AGAIN + 1):
            try:
                with _watchdog(self.cfg.watchdog):
                    if k < AGAIN:
                        self.spam.call(vec.get_attr, "possible_agents")
                    else:
                        vec.get_attr("possible_agents")
                break
            except KeyboardInterrupt:
                self._landed(t, "get_attr")
        if vec.state is not State.READY:
            self.report.errors += 1
            self.report.note(f"step {t}: state {vec.state.name} after a call finished a step "
                             "cut short")
        moved = vec.num_events() != before
        self.events.append(f"step {t}: envs {np.flatnonzero(moved).tolist()} moved; "
                           f"generations {[w.generation for w in vec.workers]}")
        return bool(moved.any())

    def _run_async(self, vec: Any, replay: Replay, seg: int, first: int, n: int, mode: str,
                   seen: set[ProcId]) -> None:
        """Steps ``first .. first + n - 1`` in async mode: each ``recv``'s rows are checked
        against the replay of their workers' last ``send``; a worker whose generation
        changed since that ``send`` (it died or hung and was replaced) lost that step.

        A ``sigint_thread`` fault spams the ``send`` of its step and the next ``recv``: a
        ``recv`` cut short leaves its batch to the next one (state SENT), a ``send`` cut
        short sent its actions (SENT) or not (RECEIVED: sent again)."""
        rep, cfg = self.report, self.cfg
        policy = np.random.default_rng([cfg.seed, 2, seg])
        worker_of_row = np.repeat(np.arange(len(replay.groups)),
                                  [len(g) * replay.n for g in replay.groups])
        with _watchdog(cfg.watchdog):
            vec.async_reset()
        exp = replay.reset(self._seed(seg))
        gens = [w.generation for w in vec.workers]
        # worker -> (the actions it was sent, rows of the whole batch; None: the reset),
        # and its generation then
        sent: dict[int, tuple[np.ndarray | None, int]] = {w: (None, g) for w, g in
                                                          enumerate(gens)}
        self.hung.clear()
        spam_recv, tries = False, 0
        # A worker stopped or killed near the end is waited for (found, or overdue), with
        # steps checked as before, at most 200 a second (not counted in the run's steps).
        while self.done < n or self.hung:
            t = first + self.done
            if self.done >= n:
                time.sleep(0.005)
            self.done += 1
            landed = len(self.spam.landed)
            started = time.monotonic()
            self._overdue(vec, t, started)
            with _watchdog(cfg.watchdog):
                result = self._recv(vec, t, spam_recv)
            self._found(vec, t, started)
            obs, rew, term, trunc, infos = result
            rows = infos["env_id"]
            ws = list(dict.fromkeys(worker_of_row[rows].tolist()))
            lost = {w for w in ws if vec.workers[w].generation != sent[w][1]}
            moved = [w for w in ws if sent[w][0] is not None or w in lost]
            if moved:
                acts = sum((sent[w][0] for w in moved if sent[w][0] is not None),
                           np.zeros(replay.rows, np.int64))
                _, fired = replay.step(acts, lost, moved)
                rep.faults.update(fired)
            if [w.generation for w in vec.workers] != gens:
                self._watch(vec, seen)
            got = self._got(obs, infos, rew, term, trunc)
            self._check(got, {k: v[rows] for k, v in exp.items()}, replay.timed[rows], t, mode)
            acts = np.zeros(replay.rows, np.int64)
            acts[rows] = _policy(replay.mask[rows], policy)
            fault = self.plan.get(t) if self.done <= n else None  # none while waiting
            if fault is None and 0 < tries < SPAM_TRIES and self.done <= n:
                fault = _Fault("sigint_thread")  # the last one did not land
            spam = fault is not None and fault.kind == "sigint_thread"
            if fault is not None and not spam:
                self._signal_async(vec, fault, t, ws, seen)
            gens = [w.generation for w in vec.workers]
            with _watchdog(cfg.watchdog):
                self._send(vec, acts[rows], rows, t, spam)
            if spam_recv or spam:  # landed in this recv or send, or tried again
                tries = 0 if len(self.spam.landed) > landed else tries + 1
            spam_recv = spam
            for w in ws:
                sent[w] = (np.where(worker_of_row == w, acts, 0), gens[w])

    def _recv(self, vec: Any, t: int, spam: bool) -> tuple:
        """``vec.recv()``, under SIGINTs if ``spam``; a ``recv`` cut short must leave its
        batch to the next (state SENT)."""
        for k in range(AGAIN + 1):
            try:
                try:
                    return self.spam.call(vec.recv) if spam and k < AGAIN else vec.recv()
                except (SubEnvError, WorkerDiedError, WorkerTimeoutError) as exc:
                    if not hasattr(exc, "results"):
                        raise
                    return exc.results
            except KeyboardInterrupt:
                self._landed(t, "recv")
                if vec.state is not State.SENT:
                    raise RuntimeError(f"step {t}: recv() cut short by Ctrl-C left state "
                                       f"{vec.state.name}: its batch is lost") from None
        raise AssertionError("unreachable")

    def _send(self, vec: Any, acts: np.ndarray, rows: np.ndarray, t: int, spam: bool) -> None:
        """``vec.send(acts, rows)``, under SIGINTs if ``spam``: a ``send`` cut short sent
        the actions (state SENT) or not (RECEIVED: it is sent again)."""
        for k in range(AGAIN + 1):
            try:
                if spam and k < AGAIN:
                    self.spam.call(vec.send, acts, rows)
                else:
                    vec.send(acts, rows)
                return
            except KeyboardInterrupt:
                self._landed(t, "send")
                if vec.state is State.SENT:
                    return
                if vec.state is not State.RECEIVED:
                    raise RuntimeError(f"step {t}: send() cut short by Ctrl-C left state "
                                       f"{vec.state.name}") from None

    def _overdue(self, vec: Any, t: int, now: float) -> None:
        """Async mode: a worker stopped (or killed) longer ago than the timeout and more
        (``hung_slack``), still not replaced while the others answer, is an error."""
        limit = self.cfg.timeout + self.cfg.hung_slack
        for w, (ident, when, gen) in list(self.hung.items()):
            if vec.workers[w].generation == gen and now - when > limit:
                del self.hung[w]
                self.report.errors += 1
                self.report.note(f"step {t}: worker {w} (pid {ident[0]}) hung or dead for "
                                 f"{now - when:.1f} s and not replaced (timeout "
                                 f"{self.cfg.timeout:g} s)")

    def _found(self, vec: Any, t: int, started: float) -> None:
        """Async mode: the workers replaced by the last ``recv``, which began at
        ``started``: each must have been found within the timeout (and ``hung_slack``) of
        its signal."""
        for w, (ident, when, gen) in list(self.hung.items()):
            if vec.workers[w].generation != gen:
                del self.hung[w]
                self.found.append(time.monotonic() - when)
                if started - when > self.cfg.timeout + self.cfg.hung_slack:
                    self.report.errors += 1
                    self.report.note(f"step {t}: worker {w} (pid {ident[0]}) found hung or "
                                     f"dead {started - when:.1f} s after its signal (timeout "
                                     f"{self.cfg.timeout:g} s)")

    def _signal_async(self, vec: Any, fault: _Fault, t: int, idle: list[int],
                      seen: set[ProcId]) -> None:
        """SIGKILL or SIGSTOP worker ``fault.worker`` between a ``recv`` and its ``send``
        (it may have a step in flight). A stopped worker is killed when it is replaced, or
        by ``close``: one left behind counts as a leak."""
        target = _worker_proc(vec, fault.worker)
        st = None if target is None else _stat(target[0])
        if st is None or st[0] in "TZX":  # gone, or stopped and not yet replaced: no fault
            return
        seen.add(target)
        sig = signal.SIGKILL if fault.kind == "sigkill" else signal.SIGSTOP
        if signal_proc(target, sig):
            self.hung[fault.worker] = (target, time.monotonic(), vec.workers[fault.worker]
                                       .generation)
            self.report.faults[fault.kind] += 1
            state = "idle" if fault.worker in idle else "busy"
            self.events.append(f"step {t}: {fault.kind} {state} worker {fault.worker} "
                               f"(pid {target[0]})")

    def _release(self, target: ProcId | None) -> None:
        """After a SIGSTOP: the stopped worker must be gone once it was replaced."""
        if target is None:
            return
        if _wait_state(target, "ZX", within=5.0):
            return
        self.report.leaked_processes += 1
        self.report.note(f"stopped worker pid {target[0]} still there after its replacement")
        signal_proc(target, signal.SIGCONT)
        signal_proc(target, signal.SIGKILL)

    def _check(self, got: dict, exp: dict, timed: np.ndarray, t: int, mode: str) -> None:
        bad, notes = compare(got, exp, timed)
        count = int(bad.sum())
        if count:
            self.report.divergent_rows += count
            if not self.diverged:  # the rest of the segment follows from the first
                self.report.note(f"step {t} ({self.label}): {count} divergent rows; "
                                 + "; ".join(notes) + f"; after: {'; '.join(self.events[-3:])}")
            self.diverged = True

    def _close(self, vec: Any, seen: set[ProcId]) -> None:
        """Close ``vec`` under the watchdog; after a hang, end its workers by force."""
        try:
            # close() may wait close_timeout (5 s) for a worker that does not answer.
            with _watchdog(self.cfg.watchdog + 10.0):
                vec.close()
            return
        except ChaosHang as exc:
            self.report.hangs += 1
            self.report.note(f"close() hung: {exc}")
        except Exception as exc:
            self.report.errors += 1
            self.report.note(f"close() raised {type(exc).__name__}: {exc}")
        for ident in seen:  # already counted: end them, and reap those that are ours
            st = _stat(ident[0])
            signal_proc(ident, signal.SIGCONT)
            signal_proc(ident, signal.SIGKILL)
            if st is not None and st[1] == os.getpid() and _wait_state(ident, "ZX"):
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(ident[0], os.WNOHANG)

    def _leaks(self, kids: dict[int, str], shm: set[str], seen: set[ProcId]) -> None:
        """After a close: no worker process, no new child, no new /dev/shm entry."""
        rep = self.report
        grace = 15.0 if self.cfg.backend == "ray" else 2.0
        deadline = time.monotonic() + grace
        left = set(seen)
        while left and time.monotonic() < deadline:
            left = {p for p in left if running(p)}
            if left:
                time.sleep(0.02)
        for ident in sorted(left):
            st = _stat(ident[0])
            rep.leaked_processes += 1
            rep.note(f"worker pid {ident[0]} left running after close (state "
                     f"{st[0] if st else '?'})")
            signal_proc(ident, signal.SIGCONT)
            signal_proc(ident, signal.SIGKILL)
        helpers = ("resource_tracker", "forkserver")
        for pid, cmd in children().items():
            if pid not in kids and not any(h in cmd for h in helpers):
                ident = proc_id(pid)
                if ident is None or ident in left:
                    continue
                if _wait_state(ident, "ZX", within=1.0) and not running(ident):
                    continue
                rep.leaked_processes += 1
                rep.note(f"child pid {pid} left after close: {cmd[:120]}")
        # Any process that makes a multiprocessing lock under fork shows a sem.mp-* name
        # for a moment (tens of ms on a loaded machine): a new name must stay to count.
        deadline = time.monotonic() + 2.0
        new = shm_entries() - shm
        while new and time.monotonic() < deadline:
            time.sleep(0.05)
            new &= shm_entries()
        new -= foreign_shm(new)
        for name in sorted(new):
            rep.leaked_shm.append(name)
            rep.note(f"/dev/shm/{name} left after close")


def run_chaos(cfg: ChaosConfig, echo: Callable[[str], None] | None = None) -> ChaosReport:
    """Run ``cfg``; see the module docstring. ``echo`` gets a line per segment.

    Runs in the main thread only (the watchdog and the SIGINT faults are signals).
    """
    if threading.current_thread() is not threading.main_thread():
        raise RuntimeError("run_chaos needs the main thread (it uses signals)")
    # A process started in the background by a shell ignores SIGINT: the SIGINT faults
    # need Python's own handler (KeyboardInterrupt).
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        return _Chaos(cfg, echo).run()
    finally:
        signal.signal(signal.SIGINT, old)
