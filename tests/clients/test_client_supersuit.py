"""Client matrix: SuperSuit used directly (``pettingzoo_env_to_vec_env_v1`` and
``concat_vec_envs_v1``) on every scenario, into Stable-Baselines3 PPO.

Every scenario on its defaults (ridehail_v0's drivers leave ``agents``, which SuperSuit's
vector env refuses: it runs with ``black_death=True``, v1's default; see
``test_client_departures.py``); masks reach a SuperSuit user through ``mask_in_obs=True``
(PPO with ``MultiInputPolicy``).
"""

from __future__ import annotations

import numpy as np
import pytest

import deszoo

ss = pytest.importorskip("supersuit")
sb3 = pytest.importorskip("stable_baselines3")
ENVS = deszoo.list_envs()


def supersuit_vec(name: str, num_envs: int = 2, **kwargs):
    if name == "ridehail_v0":
        kwargs["black_death"] = True
    env = deszoo.make(name, preset="small", **kwargs)
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


@pytest.mark.parametrize("name", ["jobshop_v0", "ridehail_v1"])
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
