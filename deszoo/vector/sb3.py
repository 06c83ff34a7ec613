"""Stable-Baselines3 ``VecEnv`` adapter (optional extra ``deszoo[sb3]``).

SB3 expects same-step autoreset: when ``dones[i]`` is set, ``obs[i]`` already belongs to the
next episode and ``infos[i]["terminal_observation"]`` holds the final one. So the vector
env must be built with ``autoreset_mode="SameStep"``. Every row of an env that reset is
done (also rows of agents that had left), ``TimeLimit.truncated`` marks truncations, and
``env_method("action_masks")`` returns the masks (as ``sb3_contrib``'s MaskablePPO asks).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from deszoo.errors import ConfigError
from deszoo.vector.base import DeszooVecEnv

__all__ = ["to_sb3"]


def to_sb3(vec: DeszooVecEnv):
    """Wrap ``vec`` as an SB3 ``VecEnv`` (``vec`` must use ``autoreset_mode="SameStep"``)."""
    try:
        from stable_baselines3.common.vec_env import VecEnv
    except ImportError as exc:  # pragma: no cover - depends on the extra
        raise ImportError("to_sb3 needs stable-baselines3: pip install 'deszoo[sb3]'") from exc
    if vec.autoreset_mode.value != "SameStep":
        raise ConfigError(
            "to_sb3 needs a vector env with same-step autoreset (SB3's convention); build it "
            "with make_vec(..., autoreset_mode='SameStep')"
        )

    class DeszooSB3VecEnv(VecEnv):
        """A deszoo vector env seen through SB3's ``VecEnv`` interface."""

        def __init__(self, venv: DeszooVecEnv):
            self.venv = venv
            self._mask = np.zeros((venv.num_envs, venv.n_actions), dtype=np.int8)
            self._mask[:, 0] = 1
            self._seed: int | None = None
            self._actions: np.ndarray | None = None
            super().__init__(venv.num_envs, venv.single_observation_space,
                             venv.single_action_space)

        def reset(self):
            obs, infos = self.venv.reset(seed=self._seed)
            self._seed = None
            self._mask = infos["action_mask"]
            self.reset_infos = [{} for _ in range(self.num_envs)]
            return obs

        def seed(self, seed: int | None = None):
            self._seed = seed
            n = self.venv.agents_per_sim
            return [None if seed is None else seed + r // n for r in range(self.num_envs)]

        def step_async(self, actions: np.ndarray) -> None:
            self._actions = np.asarray(actions).reshape(self.num_envs)

        def step_wait(self):
            obs, rew, term, trunc, infos = self.venv.step(self._actions)
            self._mask = infos["action_mask"]
            final = infos["_final_obs"]
            dones = term | trunc | final
            out: list[dict[str, Any]] = [{} for _ in range(self.num_envs)]
            for r in np.flatnonzero(dones):
                out[r] = {
                    "terminal_observation": infos["final_obs"][r],
                    "TimeLimit.truncated": bool(trunc[r] and not term[r]),
                }
            return obs, rew, dones, out

        def close(self) -> None:
            self.venv.close()

        def action_masks(self) -> np.ndarray:
            return self._mask.astype(bool)

        def _rows(self, indices) -> list[int]:
            return list(self._get_indices(indices))

        def get_attr(self, attr_name: str, indices=None) -> list[Any]:
            if attr_name == "render_mode":
                value = None
            else:
                value = getattr(self.venv, attr_name)
            return [value for _ in self._rows(indices)]

        def set_attr(self, attr_name: str, value: Any, indices=None) -> None:
            setattr(self.venv, attr_name, value)

        def env_method(self, method_name: str, *args, indices=None, **kwargs) -> list[Any]:
            rows = self._rows(indices)
            if method_name == "action_masks":
                masks = self.action_masks()
                return [masks[r] for r in rows]
            result = getattr(self.venv, method_name)(*args, **kwargs)
            return [result for _ in rows]

        def has_attr(self, attr_name: str) -> bool:
            # sb3_contrib's MaskablePPO asks for "action_masks" before it trains.
            return attr_name == "action_masks" or hasattr(self.venv, attr_name)

        def env_is_wrapped(self, wrapper_class, indices=None) -> list[bool]:
            return [False for _ in self._rows(indices)]

    return DeszooSB3VecEnv(vec)
