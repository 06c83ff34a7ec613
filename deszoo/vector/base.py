"""The interface every vector backend shares (a Gymnasium 1.x ``VectorEnv`` over agents).

Rows are env-major, agent-minor: row ``r`` is agent ``r % n`` of env ``r // n`` (``n``
agents per env), as SuperSuit's ``pettingzoo_env_to_vec_env_v1`` lays them out. See
``docs/vector.md`` for the semantics (seeding, autoreset, dead agents, faults).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from deszoo.errors import (
    ConfigError,
    InvalidActionError,
    ResetNeededError,
    SubEnvError,
    VectorEnvError,
)
from deszoo.vector._host import Buffers, EnvFailure, Layout, restart_seed

__all__ = ["VecSpec", "DeszooVecEnv", "State"]


@dataclass(frozen=True)
class VecSpec:
    """What a backend needs to build its envs: a picklable factory and the spaces."""

    factory: Callable[[], Any]
    name: str
    num_sims: int
    agents: tuple[str, ...]
    observation_space: spaces.Space
    action_space: spaces.Discrete

    @property
    def obs_box(self) -> spaces.Box:
        """The flat observation (the ``"observation"`` part of a ``mask_in_obs`` Dict)."""
        space = self.observation_space
        return space["observation"] if isinstance(space, spaces.Dict) else space

    @property
    def layout(self) -> Layout:
        return Layout(
            self.num_sims,
            len(self.agents),
            int(self.obs_box.shape[0]),
            int(self.action_space.n),
        )


class State(enum.Enum):
    """Where a vector env is: waiting for ``reset``, ready to step, failed or closed."""

    NEEDS_RESET = "needs reset"
    READY = "ready"
    FAILED = "failed"
    CLOSED = "closed"


class DeszooVecEnv(VectorEnv):
    """Base class of the backends: spaces, seeding, action checks, infos and restarts.

    Attributes:
        num_envs: rows (``num_sims * agents_per_sim``), as Gymnasium counts sub-envs.
        num_sims: simulations (PettingZoo envs) in the batch.
        agents_per_sim: agents of each simulation (``possible_agents``).
        backend: backend name (``"roundrobin"``, ``"supersuit"``, ``"shm"``, ...).
    """

    backend: str = "base"
    _bufs: Buffers  # every backend keeps its batch results here

    def __init__(
        self,
        spec: VecSpec,
        seed: int | None = 0,
        on_error: str = "raise",
        autoreset_mode: str | AutoresetMode = AutoresetMode.NEXT_STEP,
        copy: bool = True,
    ):
        if on_error not in ("raise", "restart"):
            raise ConfigError(f"on_error={on_error!r}; valid: 'raise' or 'restart'")
        mode = AutoresetMode(autoreset_mode)
        if mode not in (AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP):
            raise ConfigError(
                f"autoreset_mode={mode.value!r} is not supported; valid: 'NextStep', 'SameStep'"
            )
        self.sim_spec = spec
        self.layout = spec.layout
        self.num_sims = spec.num_sims
        self.agents_per_sim = len(spec.agents)
        self.possible_agents = list(spec.agents)
        self.num_envs = self.layout.rows
        self.single_observation_space = spec.observation_space
        self.single_action_space = spec.action_space
        self.observation_space = batch_space(spec.observation_space, self.num_envs)
        self.action_space = batch_space(spec.action_space, self.num_envs)
        self.n_actions = int(spec.action_space.n)
        self.autoreset_mode = mode
        # PettingZoo's mask convention: observations {"observation", "action_mask"}.
        self._mask_in_obs = isinstance(spec.observation_space, spaces.Dict)
        self.metadata = {"autoreset_mode": mode, "render_modes": [], "name": spec.name}
        self.on_error = on_error
        self.copy = copy
        self._base_seed = None if seed is None else int(seed)
        self._sim_seeds: list[int | None] = [None] * self.num_sims
        self._restarts = np.zeros(self.num_sims, dtype=np.int64)
        self._reset_once = False
        self._state = State.NEEDS_RESET
        self._restarted = np.zeros(self.num_envs, dtype=bool)

    # ---- seeding --------------------------------------------------------------------
    def _seeds(self, seed: int | Sequence[int | None] | None) -> list[int | None]:
        """Per-env seeds of a ``reset``: env ``i`` gets ``seed + i``."""
        if seed is None and not self._reset_once:
            seed = self._base_seed
        self._reset_once = True
        if seed is None:
            seeds: list[int | None] = [None] * self.num_sims
        elif isinstance(seed, (int, np.integer)) and not isinstance(seed, (bool, np.bool_)):
            seeds = [int(seed) + i for i in range(self.num_sims)]
        else:
            seeds = [None if s is None else int(s) for s in seed]
            if len(seeds) != self.num_sims:
                raise ConfigError(
                    f"reset(seed=...) got {len(seeds)} seeds; expected an int or one seed "
                    f"per env ({self.num_sims})"
                )
        # Restarted envs derive their seeds from these; unseeded envs stay unseeded.
        self._sim_seeds = [
            s if s is not None else old for s, old in zip(seeds, self._sim_seeds, strict=True)
        ]
        return seeds

    def _restart_seed(self, sim: int) -> int | None:
        self._restarts[sim] += 1
        return restart_seed(self._sim_seeds[sim], int(self._restarts[sim]))

    # ---- checks ---------------------------------------------------------------------
    def _check_state(self, stepping: bool = True) -> None:
        state = self._state
        if state is State.READY or (state is State.NEEDS_RESET and not stepping):
            return
        if state is State.CLOSED:
            raise VectorEnvError(f"{self.backend} vector env is closed")
        if state is State.FAILED:
            raise VectorEnvError(
                f"{self.backend} vector env failed earlier (a worker died or hung); "
                "close() it and build a new one"
            )
        raise ResetNeededError(
            f"{self.backend} vector env: step() before reset() or after a sub-env error; "
            "call reset() first"
        )

    def _check_actions(self, actions: Any, out: np.ndarray) -> None:
        """Validate ``actions`` and write them into ``out`` (int64), before any send."""
        a = actions if isinstance(actions, np.ndarray) else np.asarray(actions)
        if a.shape != out.shape:
            raise InvalidActionError(
                f"actions must have shape {out.shape} (one action per row: "
                f"{out.shape[0] // self.agents_per_sim} envs x {self.agents_per_sim} agents), "
                f"got shape {a.shape}"
            )
        if a.dtype.kind not in "iu":
            raise InvalidActionError(
                f"actions must be an integer array, got dtype {a.dtype}; "
                f"valid actions are 0..{self.n_actions - 1}"
            )
        np.copyto(out, a, casting="unsafe")
        # One reduction checks both ends: negatives wrap to huge unsigned values.
        if out.view(np.uint64).max() >= self.n_actions:
            bad = int(np.flatnonzero((a < 0) | (a >= self.n_actions))[0])
            raise InvalidActionError(
                f"row {bad} (env {bad // self.agents_per_sim}, agent "
                f"{self.possible_agents[bad % self.agents_per_sim]!r}) got action {a[bad]}; "
                f"the action space is Discrete({self.n_actions}), valid actions are "
                f"0..{self.n_actions - 1}"
            )

    # ---- results --------------------------------------------------------------------
    def _results(self, bufs: Buffers, rows: Any = None) -> tuple:
        """``(obs, rew, term, trunc, infos)`` for ``rows`` (all rows when ``None``)."""
        if rows is None:
            if self.copy:
                def take(a):
                    return a.copy()
            else:
                def take(a):
                    return a

            sim_time = bufs.sim_time.repeat(self.agents_per_sim)
            restarted = take(self._restarted)
        else:
            # Fancy indexing copies anyway.
            def take(a):
                return a[rows]

            sim_time = bufs.sim_time[rows // self.agents_per_sim]
            restarted = self._restarted[rows]
        infos = {
            "action_mask": take(bufs.mask),
            "needs_action": take(bufs.needs),
            "live": take(bufs.live),
            "sim_time": sim_time,
            "restarted": restarted,
            "invalid_action": take(bufs.invalid),
            "invalid_count": take(bufs.invalid_count),
        }
        obs = take(bufs.obs)
        if self.autoreset_mode is AutoresetMode.SAME_STEP:
            final_obs = take(bufs.final_obs)
            if self._mask_in_obs:  # an ended episode's agents decide nothing: no-op masks
                noop = np.zeros_like(infos["action_mask"])
                noop[:, 0] = 1
                final_obs = {"observation": final_obs, "action_mask": noop}
            infos["final_obs"] = final_obs
            infos["_final_obs"] = take(bufs.final)
        if self._mask_in_obs:
            obs = {"observation": obs, "action_mask": infos["action_mask"].copy()}
        return obs, take(bufs.rew), take(bufs.term), take(bufs.trunc), infos

    def _mark_restarted(self, bufs: Buffers, sims: Sequence[int]) -> None:
        """Report the episodes of rebuilt envs ``sims`` as truncated, rows dead."""
        n = self.agents_per_sim
        for s in sims:
            rows = slice(s * n, (s + 1) * n)
            bufs.obs[rows] = 0.0
            bufs.final_obs[rows] = 0.0
            bufs.rew[rows] = 0.0
            bufs.term[rows] = False
            bufs.trunc[rows] = True
            bufs.live[rows] = False
            bufs.needs[rows] = False
            bufs.final[rows] = self.autoreset_mode is AutoresetMode.SAME_STEP
            bufs.mask[rows] = 0
            bufs.mask[rows, 0] = 1
            bufs.invalid[rows] = False
            bufs.invalid_count[rows] = 0
            self._restarted[rows] = True

    def _raise_failures(self, failures: Sequence[EnvFailure]) -> None:
        failures = sorted(failures, key=lambda f: f.env_index)
        first = failures[0]
        more = f" ({len(failures) - 1} more env(s) failed too)" if len(failures) > 1 else ""
        self._state = State.NEEDS_RESET
        raise SubEnvError(
            f"env {first.env_index} raised {first.error_type}: {first.message}{more}\n"
            f"worker traceback:\n{first.traceback}",
            env_index=first.env_index,
            error_type=first.error_type,
            worker_traceback=first.traceback,
        )

    def num_events(self) -> np.ndarray:
        """SimPy events processed per env since this vector env was built (int64)."""
        return self._bufs.events.copy()

    def worker_pids(self) -> list[int]:
        """Process ids of the live workers (empty for in-process backends)."""
        return []

    # ---- Gymnasium API --------------------------------------------------------------
    def reset(self, *, seed=None, options=None):
        raise NotImplementedError

    def step(self, actions):
        raise NotImplementedError

    def close(self, **kwargs: Any) -> None:
        """Release workers and memory; safe to call any number of times."""
        if self.closed:
            return
        try:
            self.close_extras(**kwargs)
        finally:
            self.closed = True
            self._state = State.CLOSED

    def __repr__(self) -> str:
        return (
            f"<{type(self).__name__} {self.sim_spec.name} x{self.num_sims} "
            f"({self.num_envs} rows), {self._state.value}>"
        )
