"""Stable-Baselines3 ``VecEnv`` adapter (optional extra ``deszoo[sb3]``).

SB3 expects same-step autoreset: when ``dones[i]`` is set, ``obs[i]`` already belongs to the
next episode and ``infos[i]["terminal_observation"]`` holds the final one. So the vector
env must be built with ``autoreset_mode="SameStep"``. Rows are SB3's envs.

* ``dones[r]`` is set once per agent episode: on the step its agent's episode ends (it
  leaves, or the simulation ends while it is live; ``TimeLimit.truncated`` marks
  truncations). An agent that leaves early observes zeros from then on (its row is dead):
  its row is not done again when the simulation resets, so ``VecMonitor`` counts each
  agent episode once (a dead row's idle steps count towards the length of its next one).
* ``step_seconds`` holds each row's simulated length of the last step (up to the end of
  the episode for a row whose episode ended in it): what
  :class:`deszoo.learning.SimTimeRolloutBuffer` discounts by.
* With ``make_vec(..., state=True)``, ``states`` holds each row's global state (its
  simulation's ``state()``, ``infos["state"]``) after the last reset or step, and a done
  row has the state its agent's episode ended in in ``infos[r]["terminal_state"]``.
* ``env_method("action_masks")`` returns the masks (as ``sb3_contrib``'s MaskablePPO
  asks). ``get_attr``, ``set_attr`` and ``env_method`` act on the simulation of each row
  in ``indices`` (each simulation once, however many of its rows are named).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from deszoo.errors import ConfigError
from deszoo.vector.base import DeszooVecEnv, step_seconds

__all__ = ["to_sb3"]


def _row(obs: Any, r: int) -> Any:
    if isinstance(obs, dict):
        return {k: v[r].copy() for k, v in obs.items()}
    return obs[r].copy()


def _zero_row(obs: Any, r: int, noop: np.ndarray) -> None:
    if isinstance(obs, dict):
        obs["observation"][r] = 0
        obs["action_mask"][r] = noop
    else:
        obs[r] = 0


def to_sb3(vec: DeszooVecEnv):
    """Wrap ``vec`` as an SB3 ``VecEnv`` (``vec`` must use ``autoreset_mode="SameStep"``)."""
    try:
        from stable_baselines3.common.vec_env import VecEnv
    except ImportError as exc:  # pragma: no cover - depends on the extra
        raise ImportError("to_sb3 needs stable-baselines3: pip install 'deszoo[sb3]'") from exc
    if not isinstance(vec, DeszooVecEnv):
        raise ConfigError(
            f"to_sb3 takes a deszoo vector env (make_vec's), got {type(vec).__name__}; wrap "
            "the SB3 VecEnv it returns instead (VecMonitor, VecNormalize, ...)"
        )
    if not vec.copy:
        raise ConfigError(
            "to_sb3 needs a vector env that returns copies: SB3 keeps the observations of "
            "one step while it takes the next (build it without copy=False)"
        )
    if vec.autoreset_mode.value != "SameStep":
        raise ConfigError(
            "to_sb3 needs a vector env with same-step autoreset (SB3's convention); build it "
            "with make_vec(..., autoreset_mode='SameStep')"
        )

    class DeszooSB3VecEnv(VecEnv):
        """A deszoo vector env seen through SB3's ``VecEnv`` interface."""

        def __init__(self, venv: DeszooVecEnv):
            self.venv = venv
            self._noop = venv.sim_spec.rows.noop_mask()
            self._mask = np.tile(self._noop, (venv.num_envs, 1))
            self._act_shape = (venv.num_envs, *venv.layout.act_shape)
            self._seed: int | None = None
            self._actions: np.ndarray | None = None
            self._clock = np.zeros(venv.num_envs)
            self.step_seconds = np.zeros(venv.num_envs)
            self.states: np.ndarray | None = None  # per row, with make_vec(state=True)
            super().__init__(venv.num_envs, venv.single_observation_space,
                             venv.single_action_space)

        def reset(self):
            obs, infos = self.venv.reset(seed=self._seed)
            self._seed = None
            self._mask = infos["action_mask"]
            self._clock = np.array(infos["sim_time"], dtype=np.float64)
            self.step_seconds = np.zeros(self.num_envs)
            self.states = infos.get("state")
            self.reset_infos = [{} for _ in range(self.num_envs)]
            return obs

        def seed(self, seed: int | None = None):
            self._seed = seed
            n = self.venv.agents_per_sim
            return [None if seed is None else seed + r // n for r in range(self.num_envs)]

        def step_async(self, actions: np.ndarray) -> None:
            self._actions = np.asarray(actions).reshape(self._act_shape)

        def step_wait(self):
            obs, rew, term, trunc, infos = self.venv.step(self._actions)
            self._mask = infos["action_mask"]
            reset = infos["_final_obs"]
            self.step_seconds = step_seconds(infos, self._clock)
            self._clock = np.array(infos["sim_time"], dtype=np.float64)
            self.states = infos.get("state")
            final_states = infos["final_info"].get("state")
            dones = term | trunc
            out: list[dict[str, Any]] = [{} for _ in range(self.num_envs)]
            for r in np.flatnonzero(dones):
                if reset[r]:
                    terminal = _row(infos["final_obs"], r)
                else:  # left mid-episode: its row is dead (zeros) from now on
                    terminal = _row(obs, r)
                    _zero_row(obs, r, self._noop)
                out[r] = {
                    "terminal_observation": terminal,
                    "TimeLimit.truncated": bool(trunc[r] and not term[r]),
                }
                if self.states is not None:
                    out[r]["terminal_state"] = (final_states if reset[r] else self.states)[r].copy()
            return obs, rew, dones, out

        def close(self) -> None:
            self.venv.close()

        def action_masks(self) -> np.ndarray:
            return self._mask.astype(bool)

        def _sims(self, indices) -> tuple[list[int], list[int]]:
            """Rows named by ``indices``, and their simulations (each once, in order)."""
            rows = list(self._get_indices(indices))
            n = self.venv.agents_per_sim
            for r in rows:
                if not 0 <= r < self.num_envs:
                    raise IndexError(f"row {r} out of range 0..{self.num_envs - 1}")
            return rows, sorted({r // n for r in rows})

        def _per_row(self, rows: list[int], sims: list[int], values: list) -> list[Any]:
            by_sim = dict(zip(sims, values, strict=True))
            n = self.venv.agents_per_sim
            return [by_sim[r // n] for r in rows]

        def get_attr(self, attr_name: str, indices=None) -> list[Any]:
            rows, sims = self._sims(indices)
            return self._per_row(rows, sims, self.venv.call_envs("get", attr_name, sims))

        def set_attr(self, attr_name: str, value: Any, indices=None) -> None:
            _, sims = self._sims(indices)
            self.venv.call_envs("set", attr_name, sims, values=[value] * len(sims))

        def env_method(self, method_name: str, *args, indices=None, **kwargs) -> list[Any]:
            rows, sims = self._sims(indices)
            if method_name == "action_masks":
                masks = self.action_masks()
                return [masks[r] for r in rows]
            values = self.venv.call_envs("call", method_name, sims, *args, **kwargs)
            return self._per_row(rows, sims, values)

        def has_attr(self, attr_name: str) -> bool:
            # sb3_contrib's MaskablePPO asks for "action_masks" before it trains.
            if attr_name == "action_masks":
                return True
            try:
                self.venv.call_envs("get", attr_name, [0])
            except AttributeError:
                return False
            return True

        def env_is_wrapped(self, wrapper_class, indices=None) -> list[bool]:
            rows, _ = self._sims(indices)
            return [False for _ in rows]

        def get_images(self) -> list[np.ndarray]:
            """One frame per row (each simulation's ``render()``, repeated for its rows)."""
            rows, sims = self._sims(None)
            return self._per_row(rows, sims, list(self.venv.call("render")))

    return DeszooSB3VecEnv(vec)
