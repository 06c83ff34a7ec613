"""The Stable-Baselines3 adapter (runs only where the ``sb3`` extra is installed)."""

from __future__ import annotations

import numpy as np
import pytest

from deszoo.errors import ConfigError
from deszoo.rollouts import legal_last
from deszoo.vector import make_vec, to_sb3

sb3 = pytest.importorskip("stable_baselines3")
from stable_baselines3.common.vec_env import (  # noqa: E402
    VecCheckNan,
    VecEnv,
    VecMonitor,
    VecNormalize,
)


def test_to_sb3_needs_same_step_autoreset():
    vec = make_vec("jobshop_v0", 2, backend="roundrobin", preset="small")
    try:
        with pytest.raises(ConfigError, match="SameStep"):
            to_sb3(vec)
    finally:
        vec.close()


@pytest.mark.parametrize("backend", ["roundrobin", "shm"])
def test_sb3_interface(backend):
    """Reset, step, dones with terminal observations, masks through env_method."""
    workers = {} if backend == "roundrobin" else {"num_workers": 2}
    vec = make_vec("jobshop_v0", 3, backend=backend, preset="small", max_steps=15,
                   autoreset_mode="SameStep", **workers)
    venv = to_sb3(vec)
    try:
        assert isinstance(venv, VecEnv) and venv.num_envs == vec.num_envs
        venv.seed(3)
        obs = venv.reset()
        assert obs.shape == (vec.num_envs, vec.single_observation_space.shape[0])
        masks = np.stack(venv.env_method("action_masks"))
        assert masks.shape == (vec.num_envs, vec.n_actions) and masks.dtype == bool
        dones_seen = 0
        for _ in range(40):
            actions = legal_last(masks.astype(np.int8))
            obs, rew, dones, infos = venv.step(actions)
            assert dones.dtype == bool and len(infos) == vec.num_envs
            for r in np.flatnonzero(dones):
                assert infos[r]["terminal_observation"].shape == obs[r].shape
                assert "TimeLimit.truncated" in infos[r]
                dones_seen += 1
            masks = np.stack(venv.env_method("action_masks"))
        assert dones_seen > 0
        assert venv.get_attr("render_mode") == [None] * vec.num_envs
        assert venv.env_is_wrapped(object) == [False] * vec.num_envs
        # Attributes act on each row's simulation (issue 9: they acted on the parent).
        n = vec.agents_per_sim
        venv.set_attr("max_steps", 7, indices=[0])
        assert venv.get_attr("max_steps") == [7] * n + [15] * (vec.num_envs - n)
        assert venv.get_attr("max_steps", indices=[n, 0]) == [15, 7]
        assert vec.get_attr("max_steps") == (7, 15, 15)
        assert venv.env_method("render", indices=[0, 1]) == [None, None]
        assert venv.has_attr("possible_agents") and not venv.has_attr("no_such_thing")
    finally:
        venv.close()
    assert vec.closed


def test_sb3_reaches_the_state():
    """make_vec(state=True): venv.states per row, terminal_state where a row is done."""
    vec = make_vec("jobshop_v0", 2, backend="roundrobin", preset="small", max_steps=10,
                   autoreset_mode="SameStep", state=True)
    venv = to_sb3(vec)
    try:
        venv.reset()
        dim = vec.sim_spec.state_dim
        assert venv.states.shape == (vec.num_envs, dim)
        n, done = vec.agents_per_sim, 0
        for _ in range(25):
            masks = np.stack(venv.env_method("action_masks"))
            _, _, dones, infos = venv.step(legal_last(masks.astype(np.int8)))
            assert np.array_equal(venv.states[::n], np.stack(vec.call("state")))
            for r in np.flatnonzero(dones):
                assert infos[r]["terminal_state"].shape == (dim,)
                done += 1
        assert done > 0
    finally:
        venv.close()


def test_ppo_learns_through_sb3_wrappers():
    """SB3's own wrappers and PPO run on top of the adapter (shm backend)."""
    from stable_baselines3 import PPO

    vec = make_vec("jobshop_v0", 2, backend="shm", num_workers=2, preset="small",
                   autoreset_mode="SameStep")
    venv = VecCheckNan(VecNormalize(VecMonitor(to_sb3(vec))), raise_exception=True)
    try:
        model = PPO("MlpPolicy", venv, n_steps=32, batch_size=48, n_epochs=1, seed=0,
                    device="cpu")
        model.learn(96)
        assert model.num_timesteps >= 96
    finally:
        venv.close()


def test_maskable_ppo_accepts_the_adapter():
    """sb3_contrib's MaskablePPO checks ``has_attr("action_masks")`` before training."""
    contrib = pytest.importorskip("sb3_contrib")
    venv = to_sb3(make_vec("loadbalance_v0", 2, backend="roundrobin", preset="small",
                           autoreset_mode="SameStep"))
    try:
        assert venv.has_attr("action_masks")
        contrib.MaskablePPO("MlpPolicy", venv, n_steps=16, batch_size=16, device="cpu").learn(32)
    finally:
        venv.close()


@pytest.mark.parametrize("backend", ["roundrobin", "shm"])
def test_sb3_episodes_after_a_truncation(backend):
    """Issue 13: supplychain_v0's and traffic_v0's episodes all end by truncation. Before
    f36c005 the rows of every later episode reported trunc=True on each step, so to_sb3
    marked every row done on every step and zeroed its observation (a departed agent), and
    MaskablePPO trained on one-step episodes of zeros (supplychain got worse as it
    trained; traffic's greedy policy froze). Done only at each episode's end, as a
    truncation, and never a zero observation."""
    workers = {} if backend == "roundrobin" else {"num_workers": 2}
    vec = make_vec("supplychain_v0", 2, backend=backend, preset="small", max_steps=5,
                   autoreset_mode="SameStep", seed=0, **workers)
    venv = to_sb3(vec)
    try:
        venv.reset()
        for t in range(17):
            obs, _, dones, infos = venv.step(np.full(venv.num_envs, 4))
            ended = t % 5 == 4
            assert dones.all() == ended and (ended or not dones.any()), t
            assert np.abs(obs).sum(axis=1).min() > 0, t
            if ended:
                assert all(i["TimeLimit.truncated"] for i in infos), t
    finally:
        venv.close()


@pytest.mark.parametrize("kind", ["box", "multidiscrete"])
def test_ppo_trains_on_box_and_multidiscrete_actions(kind):
    """SB3 hands the adapter one action per row of the action space's shape; it reshaped
    every batch to one int per row, so PPO crashed on any Box or MultiDiscrete space
    (supplychain_v0 with continuous=True among them)."""
    from stable_baselines3 import PPO

    if kind == "box":
        vec = make_vec("supplychain_v0", 2, backend="roundrobin", preset="small",
                       continuous=True, autoreset_mode="SameStep")
    else:
        from test_core import Multi

        vec = make_vec(Multi, 2, backend="roundrobin", autoreset_mode="SameStep")
    venv = to_sb3(vec)
    try:
        model = PPO("MlpPolicy", venv, n_steps=8, batch_size=16, n_epochs=1, seed=0,
                    device="cpu")
        model.learn(32)
        assert model.num_timesteps >= 32
    finally:
        venv.close()


def test_to_sb3_refuses_what_sb3_cannot_use():
    """Views of the batch (copy=False) would be overwritten under SB3's stored
    observations; a Gymnasium-wrapped vector env has no deszoo surface to adapt."""
    from gymnasium.wrappers.vector import RecordEpisodeStatistics

    vec = make_vec("jobshop_v0", 2, backend="roundrobin", preset="small", copy=False,
                   autoreset_mode="SameStep")
    try:
        with pytest.raises(ConfigError, match="needs a vector env that returns copies"):
            to_sb3(vec)
        with pytest.raises(ConfigError, match="got RecordEpisodeStatistics; wrap the SB3"):
            to_sb3(RecordEpisodeStatistics(vec))
    finally:
        vec.close()
