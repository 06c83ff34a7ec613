"""Client matrix: Stable-Baselines3 and sb3-contrib through ``to_sb3`` on every scenario,
on default settings: PPO (mask-unaware) and MaskablePPO with ``VecMonitor`` and
``VecNormalize``, and ``evaluate_policy`` (deterministic and not) in bounded time."""

from __future__ import annotations

import numpy as np
import pytest

import deszoo
from deszoo.vector import make_vec, to_sb3

sb3 = pytest.importorskip("stable_baselines3")
contrib = pytest.importorskip("sb3_contrib")
from sb3_contrib.common.maskable.evaluation import evaluate_policy as maskable_evaluate  # noqa: E402
from stable_baselines3.common.evaluation import evaluate_policy  # noqa: E402
from stable_baselines3.common.vec_env import VecEnvWrapper, VecMonitor, VecNormalize  # noqa: E402

ENVS = deszoo.list_envs()


class StepBudget(VecEnvWrapper):
    """Fails the test if a loop takes more than ``budget`` vector steps (a frozen clock or
    episodes that never end would loop for ever)."""

    def __init__(self, venv, budget: int):
        super().__init__(venv)
        self.budget = budget
        self.steps = 0

    def reset(self):
        return self.venv.reset()

    def step_wait(self):
        self.steps += 1
        assert self.steps <= self.budget, f"no end after {self.budget} vector steps"
        return self.venv.step_wait()


def sb3_env(name: str, num_envs: int = 2, **kwargs):
    vec = make_vec(name, num_envs, backend="shm", num_workers=2, seed=0,
                   autoreset_mode="SameStep", preset="small", **kwargs)
    return to_sb3(vec)


@pytest.mark.parametrize("name", ENVS)
def test_ppo_without_masks_trains_and_evaluates(name):
    venv = VecNormalize(VecMonitor(sb3_env(name)), norm_reward=True)
    try:
        model = sb3.PPO("MlpPolicy", venv, n_steps=256 // venv.num_envs * 2, batch_size=64,
                        n_epochs=1, seed=0, device="cpu")
        model.learn(1024)
        for deterministic in (True, False):
            guard = StepBudget(venv, 20_000)
            mean, _ = evaluate_policy(model, guard, n_eval_episodes=2,
                                      deterministic=deterministic, warn=False)
            assert np.isfinite(mean)
    finally:
        venv.close()


@pytest.mark.parametrize("name", ENVS)
def test_maskable_ppo_trains_and_evaluates(name):
    venv = VecMonitor(sb3_env(name))
    try:
        model = contrib.MaskablePPO("MlpPolicy", venv, n_steps=256 // venv.num_envs * 2,
                                    batch_size=64, n_epochs=1, seed=0, device="cpu")
        model.learn(1024)
        for deterministic in (True, False):
            guard = StepBudget(venv, 20_000)
            mean, _ = maskable_evaluate(model, guard, n_eval_episodes=2,
                                        deterministic=deterministic, warn=False)
            assert np.isfinite(mean)
    finally:
        venv.close()


def test_ridehail_padding_rows_do_not_inflate_episode_counts():
    """One VecMonitor episode per agent episode: a driver that logged off is not done again
    when its simulation resets (issue 9)."""
    vec = make_vec("ridehail_v0", 2, backend="roundrobin", seed=0, autoreset_mode="SameStep",
                   preset="small")
    resets = []
    step = vec.step

    def counting_step(actions):
        out = step(actions)
        resets.append(out[4]["_final_obs"].reshape(2, -1)[:, 0])
        return out

    vec.step = counting_step
    venv = VecMonitor(to_sb3(vec))
    try:
        venv.reset()
        agent_episodes = monitored = 0
        for _ in range(700):
            masks = np.stack(venv.env_method("action_masks"))
            actions = masks.shape[1] - 1 - masks[:, ::-1].argmax(axis=1)
            _, _, dones, infos = venv.step(actions)
            agent_episodes += int(dones.sum())
            monitored += sum("episode" in info for info in infos)
        assert monitored == agent_episodes
        # Each driver's episode ends once per simulation episode (when it logs off or the
        # simulation ends): 8 per completed episode, plus those of the episodes under way.
        completed = int(np.sum(resets))
        drivers = vec.agents_per_sim
        assert completed >= 2
        assert completed * drivers <= agent_episodes <= (completed + 2) * drivers
    finally:
        venv.close()
