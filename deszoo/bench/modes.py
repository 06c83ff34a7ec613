"""Benchmark modes: how a row samples its work.

``serial`` is the naive loop: ``num_envs`` independent envs, each run alone for all of its
steps (whole episodes, reset when one ends), one after another, in this process. Every
other mode is a backend of :func:`deszoo.vector.make_vec`, which steps all envs once per
``step`` call; :func:`available_modes` lists them, so a new backend appears here by itself.

Every mode does the same work in the same way: env ``i`` is reset with ``seed + i`` before
the timed region, then takes ``steps_per_env`` steps; an env whose episode is over is reset
(``reset(seed=None)``, drawing from its own seed sequence) at its next step, which counts as
a step, as Gymnasium 1.x's next-step autoreset does. Actions come from the priorities of
:func:`deszoo.bench.work.priorities`, so given bit-identical backends every mode follows
the same trajectories (the row's ``reward_sum`` checks it).
"""

from __future__ import annotations

import importlib
import importlib.util
import time
from dataclasses import dataclass

import numpy as np
from gymnasium import spaces

from deszoo.bench.work import Priorities, Work, masked_actions, steps_per_env
from deszoo.errors import ConfigError

__all__ = [
    "IN_PROCESS",
    "RunStats",
    "SerialSession",
    "VectorSession",
    "all_modes",
    "available_modes",
    "missing_package",
    "open_session",
    "vector_backends",
]

IN_PROCESS = ("serial", "roundrobin")
"""Modes that run every env in the parent process (reported with ``num_workers`` 0)."""

_PREFERRED_ORDER = ("serial", "roundrobin", "supersuit", "shm", "ray")


@dataclass
class RunStats:
    """What one timed run measured."""

    env_steps: int
    wall_s: float
    cpu_s: float
    harness_s: float
    reward_sum: float
    sim_events: int | None = None
    sim_time: float | None = None
    episodes: int | None = None


def vector_backends() -> list[str]:
    """Backend names :func:`deszoo.vector.make_vec` accepts, or ``[]`` without the package."""
    try:
        vector = importlib.import_module("deszoo.vector")
    except ImportError:
        return []
    for attr in ("list_backends", "backends", "available_backends"):
        fn = getattr(vector, attr, None)
        if callable(fn):
            return list(fn())
    names = getattr(vector, "BACKENDS", None)
    if names is not None:
        return list(names)
    return []


# Backends that need a package of their own (an extra); without it they are left out.
BACKEND_PACKAGES = {"ray": "ray", "supersuit": "supersuit"}


def missing_package(mode: str) -> str | None:
    """The package ``mode`` needs and this install lacks, or ``None``."""
    package = BACKEND_PACKAGES.get(mode)
    if package is None:
        return None
    return None if importlib.util.find_spec(package) is not None else package


def all_modes() -> list[str]:
    """``serial`` followed by every vector backend, installed or not, in a stable order."""
    modes = ["serial", *[b for b in vector_backends() if b != "serial"]]
    rank = {m: i for i, m in enumerate(_PREFERRED_ORDER)}
    return sorted(dict.fromkeys(modes), key=lambda m: (rank.get(m, len(rank)), m))


def available_modes() -> list[str]:
    """The modes this install can run: :func:`all_modes` less those missing a package."""
    return [m for m in all_modes() if missing_package(m) is None]


def is_in_process(mode: str) -> bool:
    return mode in IN_PROCESS


def build_env(work: Work):
    """One env of ``work``'s scenario (a registered name or a user's ``MODULE:ATTR``) behind
    the array API: a deszoo env as it is, any other ``ParallelEnv`` through
    :class:`deszoo.core.adapter.ParallelEnvArrays`."""
    from deszoo.core.arrays import is_array_env
    from deszoo.episodes import env_factory

    env = env_factory(work.scenario, work.preset, **work.env_kwargs)()
    if not is_array_env(env):
        from deszoo.core.adapter import ParallelEnvArrays

        env = ParallelEnvArrays(env)
    return env


def user_action_type(name: str, preset: str | None) -> type:
    """Build a user's env (``MODULE:ATTR``) once: the type of its rows' actions
    (``ConfigError`` if it does not build, or builds no ParallelEnv)."""
    from deszoo.checks import build
    from deszoo.core.arrays import is_array_env
    from deszoo.episodes import env_factory

    env = build(env_factory(name, preset), name)
    try:
        if is_array_env(env):
            return env.rows.type
        from deszoo.core.adapter import ParallelEnvArrays

        return ParallelEnvArrays(env).rows.type
    finally:
        env.close()


def discrete_actions(env, label: str) -> int:
    """The number of actions of ``env``'s rows; ``ConfigError`` unless they are Discrete
    (the benchmark's policy draws one legal action per row from the mask)."""
    if env.rows.type is not spaces.Discrete:
        raise ConfigError(f"{label}: the benchmark's policy needs Discrete actions, "
                          f"got {env.rows.type.__name__}")
    return int(env.rows.mask_dim)


class _Session:
    """Shared set-up: the policy's priorities and the reward log."""

    mode: str

    def _prepare(self, work: Work, num_envs: int, n_agents: int, n_actions: int) -> None:
        self.work = work
        self.num_envs = num_envs
        self.n_agents = n_agents
        self.n_actions = n_actions
        self.steps_per_env = steps_per_env(work, num_envs)
        self.prio = Priorities(work, num_envs, n_agents, n_actions)
        self.rew_log = np.zeros((self.steps_per_env, num_envs, n_agents), dtype=np.float32)

    def _steps(self, steps: int | None) -> int:
        steps = self.steps_per_env if steps is None else steps
        if not 0 < steps <= self.steps_per_env:
            raise ValueError(f"steps={steps} must be in 1..{self.steps_per_env}")
        return steps

    def worker_pids(self) -> list[int]:
        return []

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class SerialSession(_Session):
    """``num_envs`` envs in this process, each run for all its steps before the next."""

    mode = "serial"
    num_workers = 0

    def __init__(self, work: Work, num_envs: int):
        self.envs = [build_env(work) for _ in range(num_envs)]
        env = self.envs[0]
        self._prepare(work, num_envs, len(env.possible_agents),
                      discrete_actions(env, work.scenario))
        self._base_events = [0] * num_envs

    def reset(self) -> None:
        """Reset env ``i`` with ``seed + i`` (untimed)."""
        for i, env in enumerate(self.envs):
            env.reset_arrays(self.work.seed + i)
            self._base_events[i] = env.num_events
        self.rew_log.fill(0.0)

    def run(self, steps: int | None = None) -> RunStats:
        """Timed: ``steps`` steps (default: all) of each env in turn; then :meth:`reset`."""
        steps = self._steps(steps)
        prio = self.prio
        prio.restart()
        whole = prio.all_block(prio.steps) if prio.block == prio.steps else None
        scratch = np.empty((self.n_agents, self.n_actions), dtype=np.float32)
        clock = time.perf_counter
        cpu_clock = time.process_time
        events = 0
        sim_time = 0.0
        episodes = 0
        harness = wall = cpu = 0.0
        for i, env in enumerate(self.envs):
            rlog = self.rew_log[:, i]
            mask = env.mask_buf
            rew = env.rew_buf
            step = env.step_arrays
            events -= self._base_events[i]
            for lo in range(0, steps, prio.block):
                hi = min(lo + prio.block, steps)
                # Outside the clocks: this block of env i's priorities.
                p = whole[lo:hi, i] if whole is not None else prio.env_block(i, hi - lo)
                cpu0 = cpu_clock()
                wall0 = c = clock()
                for t in range(lo, hi):
                    if env.episode_over:  # next-step autoreset: this step is the reset
                        events += env.num_events
                        sim_time += env.now
                        episodes += 1
                        env.reset_arrays(None)
                        c = clock()
                        continue
                    act = masked_actions(mask, p[t - lo], scratch)
                    b = clock()
                    harness += b - c
                    step(act)
                    c = clock()
                    rlog[t] = rew
                end = clock()
                harness += end - c
                wall += end - wall0
                cpu += cpu_clock() - cpu0
            events += env.num_events
            sim_time += env.now
        return RunStats(
            env_steps=steps * self.num_envs,
            wall_s=wall,
            cpu_s=cpu,
            harness_s=harness,
            reward_sum=float(self.rew_log[:steps].sum(dtype=np.float64)),
            sim_events=events,
            sim_time=sim_time,
            episodes=episodes,
        )

    def close(self) -> None:
        for env in self.envs:
            env.close()


class VectorSession(_Session):
    """A :func:`deszoo.vector.make_vec` vector env stepping all envs at once."""

    def __init__(self, work: Work, num_envs: int, mode: str, num_workers: int | None):
        from deszoo.episodes import env_factory, is_user_env
        from deszoo.vector import make_vec

        self.mode = mode
        self.num_workers = 0 if is_in_process(mode) else num_workers
        self.vec = None
        if is_user_env(work.scenario):  # a factory the workers import by name
            env, kwargs = env_factory(work.scenario, work.preset, **work.env_kwargs), {}
        else:
            env, kwargs = work.scenario, {"preset": work.preset, **work.env_kwargs}
        self.vec = make_vec(
            env,
            num_envs,
            backend=mode,
            num_workers=None if is_in_process(mode) else num_workers,
            seed=work.seed,
            **kwargs,
        )
        if not isinstance(self.vec.single_action_space, spaces.Discrete):
            self.vec.close()
            raise ConfigError(f"{work.scenario}: the benchmark's policy needs Discrete actions")
        rows = self.vec.num_envs
        if rows % num_envs:
            raise ConfigError(f"{mode}: {rows} rows is not a multiple of num_envs={num_envs}")
        self._prepare(work, num_envs, rows // num_envs, int(self.vec.single_action_space.n))
        self._mask = None

    def reset(self) -> None:
        """``reset(seed=seed)``: env ``i`` gets ``seed + i`` (untimed)."""
        _, infos = self.vec.reset(seed=self.work.seed)
        self._mask = infos["action_mask"]
        self.rew_log.fill(0.0)

    def run(self, steps: int | None = None) -> RunStats:
        """Timed: ``steps`` vector steps (default: all); then :meth:`reset`."""
        steps = self._steps(steps)
        rows = self.num_envs * self.n_agents
        prio = self.prio
        prio.restart()
        rlog = self.rew_log.reshape(self.steps_per_env, rows)
        scratch = np.empty((rows, self.n_actions), dtype=np.float32)
        step = self.vec.step
        mask = self._mask
        clock = time.perf_counter
        cpu_clock = time.process_time
        harness = wall = cpu = 0.0
        for lo in range(0, steps, prio.block):
            hi = min(lo + prio.block, steps)
            # Outside the clocks: this block of every env's priorities.
            p = prio.all_block(hi - lo)
            p = p.reshape(p.shape[0], rows, self.n_actions)
            cpu0 = cpu_clock()
            wall0 = c = clock()
            for t in range(lo, hi):
                act = masked_actions(mask, p[t - lo], scratch)
                b = clock()
                harness += b - c
                out = step(act)
                c = clock()
                rlog[t] = out[1]
                mask = out[4]["action_mask"]
            end = clock()
            harness += end - c
            wall += end - wall0
            cpu += cpu_clock() - cpu0
        self._mask = mask
        return RunStats(
            env_steps=steps * self.num_envs,
            wall_s=wall,
            cpu_s=cpu,
            harness_s=harness,
            reward_sum=float(self.rew_log[:steps].sum(dtype=np.float64)),
        )

    def worker_pids(self) -> list[int]:
        from deszoo.bench.machine import worker_pids

        return worker_pids()

    def close(self) -> None:
        if self.vec is not None:
            self.vec.close()
            self.vec = None


def open_session(work: Work, mode: str, num_envs: int, num_workers: int | None):
    """Build the session for ``mode`` (untimed: worker start-up happens here)."""
    if mode == "serial":
        return SerialSession(work, num_envs)
    backends = vector_backends()
    if mode not in backends:
        raise ConfigError(
            f"unknown benchmark mode {mode!r}; available: {available_modes()}"
        )
    return VectorSession(work, num_envs, mode, num_workers)
