"""Client matrix: agents that leave (ridehail's drivers log off), on the defaults.

``ridehail_v1`` keeps a driver who logs off listed until the episode ends (``black_death=True``,
the bridge's default), so every trainer that expects a fixed set of agents runs it as it is:
TorchRL's ``PettingZooWrapper`` with its default ``done_on_any=True``, TorchRL's
``ParallelEnv``, SuperSuit's classic chain and SB3 through ``to_sb3``. ``ridehail_v0``
(``black_death=False``) is the control: the same tests fail on it, which is why v1 exists.
SuperSuit 3.11's own ``black_death_v3`` never reports the end of any episode; on top of
deszoo it fails loudly at the first step after the end, naming the wrapper.
"""

from __future__ import annotations

import functools
import warnings

import numpy as np
import pytest

import deszoo
from deszoo.errors import ResetNeededError
from deszoo.vector import make_vec, to_sb3

SMALL = {"preset": "small"}


def unwrapped_logoffs(name: str, seed: int = 0) -> tuple[int, int]:
    """Play ``name`` (small) with no-ops to its end: (step of the first log-off, last step)."""
    env = deszoo.make(name, **SMALL)
    env.reset(seed=seed)
    first, steps = None, 0
    while not env.episode_over:
        env.step_arrays(env.rows.zero_actions())
        steps += 1
        if first is None and not env.live.all():
            first = steps
    env.close()
    return first, steps


def test_drivers_do_log_off_before_the_end():
    """The premise of the tests below: a driver leaves well before the episode ends."""
    first, steps = unwrapped_logoffs("ridehail_v1")
    assert first is not None and first < steps - 10


@pytest.mark.parametrize("name", ["ridehail_v0", "ridehail_v1"])
def test_every_driver_stays_listed_on_v1(name):
    env = deszoo.make(name, **SMALL)
    env.reset(seed=0)
    alone = 0  # steps where a driver was terminated while others went on
    while env.agents:
        _, _, term, _, _ = env.step({a: 0 for a in env.agents})
        alone += any(term.values()) and bool(env.agents)
        assert len(env.agents) in (0, len(env.possible_agents)) or name == "ridehail_v0"
    assert (alone == 0) == (name == "ridehail_v1")
    env.close()


# ---- TorchRL ---------------------------------------------------------------------------
def torchrl_wrapped(name: str, **kwargs):
    pytest.importorskip("torch")
    pytest.importorskip("torchrl")
    from torchrl.envs.libs.pettingzoo import PettingZooWrapper

    with warnings.catch_warnings():  # "tested with PettingZoo 1.24.3 only"
        warnings.simplefilter("ignore")
        return PettingZooWrapper(deszoo.make(name, **SMALL), **kwargs)


@pytest.mark.parametrize("name", ["ridehail_v0", "ridehail_v1"])
def test_torchrl_default_wrapper_runs_the_whole_episode(name):
    """TorchRL's default (``done_on_any=True``) ended v0's episodes at the first log-off."""
    pytest.importorskip("torchrl")
    from torchrl.envs.utils import check_env_specs

    env = torchrl_wrapped(name, seed=0)
    try:
        check_env_specs(env, seed=0)
        env.set_seed(0)
        td = env.rollout(10_000, break_when_any_done=True)  # random actions
        assert td.batch_size[0] < 10_000
        # Where TorchRL stopped: v1 at the end of the simulation; v0 at the first log-off,
        # with the simulation still running (the biased, short episode of the issue).
        assert env._env.episode_over == (name == "ridehail_v1")
    finally:
        env.close()


def test_torchrl_parallel_env_on_default_ridehail():
    pytest.importorskip("torchrl")
    from torchrl.envs import ParallelEnv
    from torchrl.envs.utils import check_env_specs

    env = ParallelEnv(2, functools.partial(torchrl_wrapped, "ridehail_v1"))
    try:
        check_env_specs(env, seed=0)
        td = env.rollout(300, break_when_any_done=False)
        assert td.batch_size[:2] == (2, 300)
        assert td[("next", "done")].any(), "no episode ended in 300 steps"
    finally:
        env.close()


# ---- SuperSuit, the classic chain (PettingZoo's SB3 tutorial) ---------------------------
def supersuit_chain(name: str, black_death_v3: bool):
    ss = pytest.importorskip("supersuit")
    pytest.importorskip("stable_baselines3")
    env = deszoo.make(name, **SMALL)
    if black_death_v3:
        env = ss.black_death_v3(env)
    vec = ss.pettingzoo_env_to_vec_env_v1(env)
    return ss.concat_vec_envs_v1(vec, 1, num_cpus=0, base_class="stable_baselines3")


def run_episodes(venv, steps: int) -> int:
    venv.reset()
    ends = 0
    for _ in range(steps):
        _, _, dones, _ = venv.step(np.zeros(venv.num_envs, dtype=np.int64))
        ends += int(np.asarray(dones).all())
    return ends


def test_supersuit_classic_chain_on_default_ridehail():
    _, steps = unwrapped_logoffs("ridehail_v1")
    venv = supersuit_chain("ridehail_v1", black_death_v3=False)
    try:
        assert run_episodes(venv, 2 * steps + 5) >= 2  # SuperSuit resets ended episodes
    finally:
        venv.close()


def test_supersuit_classic_chain_refuses_v0():
    """The control: SuperSuit's vector env asserts on agents that leave."""
    venv = supersuit_chain("ridehail_v0", black_death_v3=False)
    try:
        with pytest.raises(AssertionError, match="varying numbers of active agents"):
            run_episodes(venv, 5000)
    finally:
        venv.close()


@pytest.mark.parametrize("name", ["ridehail_v1", "jobshop_v0"])
def test_supersuit_black_death_v3_fails_loudly_at_the_end(name):
    """SuperSuit 3.11's black_death_v3 ends no episode (it wants every agent terminated *and*
    truncated), on any env; deszoo's error at the first step past the end names it."""
    import supersuit

    venv = supersuit_chain(name, black_death_v3=True)
    try:
        try:
            run_episodes(venv, 5000)
        except ResetNeededError as err:
            assert "black_death_v3" in str(err) and "docs/compatibility.md" in str(err)
        else:  # SuperSuit fixed it (its PR #265): then the chain must simply work
            assert supersuit.__version__ != "3.11.0"
    finally:
        venv.close()


# ---- SB3 ------------------------------------------------------------------------------
def test_sb3_ppo_on_default_ridehail():
    sb3 = pytest.importorskip("stable_baselines3")
    from stable_baselines3.common.vec_env import VecMonitor

    venv = VecMonitor(to_sb3(make_vec("ridehail_v1", 2, backend="roundrobin", seed=0,
                                      autoreset_mode="SameStep", **SMALL)))
    try:
        model = sb3.PPO("MlpPolicy", venv, n_steps=64, batch_size=128, n_epochs=1,
                        device="cpu", seed=0)
        model.learn(256)
    finally:
        venv.close()
