"""Client matrix: SuperSuit used directly (``pettingzoo_env_to_vec_env_v1`` and
``concat_vec_envs_v1``) on every scenario, into Stable-Baselines3 PPO.

Agents that leave (ridehail) need ``black_death=True`` (SuperSuit's vector env requires a
fixed agent list, and its own ``black_death_v3`` never ends an episode in 3.11); masks
reach a SuperSuit user through ``mask_in_obs=True`` (PPO with ``MultiInputPolicy``).
"""

from __future__ import annotations

import numpy as np
import pytest

import deszoo

ss = pytest.importorskip("supersuit")
sb3 = pytest.importorskip("stable_baselines3")
ENVS = deszoo.list_envs()


def supersuit_vec(name: str, num_envs: int = 2, **kwargs):
    env = deszoo.make(name, preset="small", black_death=True, **kwargs)
    vec = ss.pettingzoo_env_to_vec_env_v1(env)
    return ss.concat_vec_envs_v1(vec, num_envs, num_cpus=0, base_class="stable_baselines3")


@pytest.mark.parametrize("name", ENVS)
def test_supersuit_direct_into_ppo(name):
    venv = supersuit_vec(name)
    try:
        # No seed=: SuperSuit 3.11's SB3 wrapper has no seed() (PPO(seed=0) fails there).
        model = sb3.PPO("MlpPolicy", venv, n_steps=64, batch_size=64, n_epochs=1, device="cpu")
        model.learn(256)
    finally:
        venv.close()


@pytest.mark.parametrize("name", ["jobshop_v0", "ridehail_v0"])
def test_supersuit_direct_with_masks_in_observations(name):
    venv = supersuit_vec(name, mask_in_obs=True)
    try:
        obs = venv.reset()
        assert set(obs) == {"observation", "action_mask"}
        assert obs["action_mask"].dtype == np.int8
        model = sb3.PPO("MultiInputPolicy", venv, n_steps=64, batch_size=64, n_epochs=1,
                        device="cpu")
        model.learn(128)
    finally:
        venv.close()


@pytest.mark.parametrize("name", ENVS)
def test_supersuit_direct_episodes_end(name):
    """Zero actions (masked out where an agent decides) still end episodes: SuperSuit's
    vector env resets them itself."""
    venv = supersuit_vec(name, num_envs=1, max_steps=30)
    try:
        venv.reset()
        ends = 0
        for _ in range(100):
            _, _, dones, _ = venv.step(np.zeros(venv.num_envs, dtype=np.int64))
            ends += int(np.asarray(dones).all())
        assert ends >= 2
    finally:
        venv.close()
