"""Client matrix: Gymnasium's vector wrappers on ``make_vec`` (every scenario, default
settings, the ``shm`` backend): episode statistics, observation and reward normalisation,
reward clipping, infos as a list, partial resets."""

from __future__ import annotations

import numpy as np
import pytest
from gymnasium.wrappers import vector as wrappers

import deszoo
from deszoo.vector import make_vec

ENVS = deszoo.list_envs()


def vec_env(name: str, **kwargs):
    return make_vec(name, 2, backend="shm", num_workers=2, seed=0, preset="small",
                    max_steps=40, **kwargs)


def masked_random(infos, rng):
    mask = infos["action_mask"]
    return (rng.random(mask.shape) * mask).argmax(axis=1)


@pytest.mark.parametrize("name", ENVS)
def test_wrapper_stack_runs_and_counts_episodes(name):
    env = wrappers.RecordEpisodeStatistics(vec_env(name))
    env = wrappers.NormalizeObservation(env)
    env = wrappers.NormalizeReward(env)
    env = wrappers.ClipReward(env, -10.0, 10.0)
    try:
        rng = np.random.default_rng(0)
        obs, infos = env.reset(seed=0)
        episodes = 0
        for _ in range(90):  # episodes of 40 steps: two autoresets per env
            obs, rew, term, trunc, infos = env.step(masked_random(infos, rng))
            assert np.isfinite(obs).all() and (np.abs(rew) <= 10).all()
            if "episode" in infos:
                episodes += int(infos["_episode"].sum())
        assert episodes >= 2 * env.num_envs
    finally:
        env.close()


@pytest.mark.parametrize("mode", ["NextStep", "SameStep"])
def test_infos_as_a_list(mode):
    env = wrappers.DictInfoToList(vec_env("jobshop_v0", autoreset_mode=mode))
    try:
        _, infos = env.reset(seed=0)
        assert isinstance(infos, list) and len(infos) == env.num_envs
        assert set(infos[0]) >= {"action_mask", "needs_action", "invalid_action"}
        for _ in range(45):
            acts = np.array([np.flatnonzero(i["action_mask"])[0] for i in infos])
            _, _, _, _, infos = env.step(acts)
        assert len(infos) == env.num_envs
    finally:
        env.close()


def test_episode_statistics_survive_a_partial_reset():
    """RecordEpisodeStatistics reads reset_mask after the inner reset: deszoo reads the
    option without popping it, so only the selected envs' statistics restart."""
    vec = vec_env("loadbalance_v0")
    env = wrappers.RecordEpisodeStatistics(vec)
    try:
        _, infos = env.reset(seed=0)
        for _ in range(5):
            _, _, _, _, infos = env.step(masked_random(infos, np.random.default_rng(1)))
        mask = np.zeros(env.num_envs, dtype=bool)
        mask[: vec.agents_per_sim] = True
        env.reset(options={"reset_mask": mask})
        assert (env.episode_lengths[mask] == 0).all()
        assert (env.episode_lengths[~mask] == 5).all()
    finally:
        env.close()


def test_render_frames_one_per_simulation():
    vec = make_vec("jobshop_v0", 2, backend="shm", num_workers=2, preset="small",
                   render_mode="rgb_array")
    try:
        vec.reset(seed=0)
        frames = vec.render()
        assert len(frames) == 2 and frames[0].ndim == 3 and frames[0].dtype == np.uint8
    finally:
        vec.close()
