"""RLlib PPO on a deszoo scenario via ``ParallelPettingZooEnv``, one policy shared by all agents.

RLlib's action-masking module (``ActionMaskingTorchRLModule``, shipped with RLlib's
examples) reads the mask from the observation, so a small PettingZoo wrapper moves
``infos[agent]["action_mask"]`` into a ``Dict`` observation ``{"observations",
"action_mask"}``. Every agent maps to the policy ``"shared"`` (parameter sharing).

    pip install -e ".[rllib]"
    python examples/train_rllib.py --iterations 10

See docs/training.md.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from gymnasium import spaces
from pettingzoo.utils.wrappers import BaseParallelWrapper

import deszoo

try:
    import torch
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.core.rl_module.multi_rl_module import MultiRLModuleSpec
    from ray.rllib.core.rl_module.rl_module import RLModuleSpec
    from ray.rllib.env.wrappers.pettingzoo_env import ParallelPettingZooEnv
    from ray.rllib.examples.rl_modules.classes.action_masking_rlm import (
        ActionMaskingTorchRLModule,
    )
    from ray.tune.registry import register_env
except ImportError as exc:  # the extra is missing
    raise SystemExit(
        f"train_rllib.py needs RLlib and torch ({exc}); install them in their own venv: "
        "pip install torch==2.13.0 -e '.[rllib]' (see docs/training.md)"
    ) from exc


class MaskInObs(BaseParallelWrapper):
    """Observations become ``{"observations": obs, "action_mask": float32 mask}``."""

    def __init__(self, env):
        super().__init__(env)
        agent = env.possible_agents[0]
        n = env.action_space(agent).n
        self._space = spaces.Dict({
            "observations": env.observation_space(agent),
            "action_mask": spaces.Box(0.0, 1.0, (n,), np.float32),
        })

    def observation_space(self, agent):
        return self._space

    def reset(self, seed=None, options=None):
        obs, infos = self.env.reset(seed=seed, options=options)
        return self._wrap(obs, infos), infos

    def step(self, actions):
        obs, rew, term, trunc, infos = self.env.step(actions)
        return self._wrap(obs, infos), rew, term, trunc, infos

    @staticmethod
    def _wrap(obs, infos):
        return {a: {"observations": o, "action_mask": infos[a]["action_mask"].astype(np.float32)}
                for a, o in obs.items()}


def make_env(config: dict) -> ParallelPettingZooEnv:
    """RLlib env creator: ``config`` holds the scenario name and its arguments."""
    config = dict(config)
    return ParallelPettingZooEnv(MaskInObs(deszoo.make(config.pop("name"), **config)))


def build(name: str = "loadbalance_v0", seed: int = 0, batch: int = 4000, **kw):
    """A PPO algorithm with one shared, masked policy for every agent of ``name``."""
    register_env("deszoo", make_env)
    config = (
        PPOConfig()
        # RLlib's env check steps unmasked random actions, which deszoo rejects.
        .environment("deszoo", env_config={"name": name, **kw}, disable_env_checking=True)
        .env_runners(num_env_runners=1)
        .multi_agent(policies={"shared"}, policy_mapping_fn=lambda agent_id, *a, **k: "shared")
        .rl_module(rl_module_spec=MultiRLModuleSpec(rl_module_specs={
            "shared": RLModuleSpec(module_class=ActionMaskingTorchRLModule,
                                   model_config={"fcnet_hiddens": [64, 64]}),
        }))
        # GAE lambda 0.95 and no value clipping (returns here are in the hundreds).
        .training(train_batch_size_per_learner=batch, minibatch_size=512, num_epochs=4, lr=3e-4,
                  lambda_=0.95, vf_clip_param=float("inf"))
        .debugging(seed=seed)
    )
    return config.build_algo()


def evaluate(algo, name: str, seeds=range(10_000, 10_020), **kw) -> np.ndarray:
    """Greedy shared policy, one episode per held-out seed; returns summed over agents."""
    module = algo.get_module("shared")
    returns = []
    for seed in seeds:
        env = MaskInObs(deszoo.make(name, **kw))
        obs, _ = env.reset(seed=seed)
        total = 0.0
        while env.agents:
            agents = list(obs)
            batch = {k: torch.as_tensor(np.stack([obs[a][k] for a in agents]))
                     for k in ("observations", "action_mask")}
            with torch.no_grad():
                logits = module.forward_inference({"obs": batch})["action_dist_inputs"]
            actions = dict(zip(agents, logits.argmax(-1).tolist(), strict=True))
            obs, rew, _, _, _ = env.step(actions)
            total += sum(rew.values())
        returns.append(total)
    return np.array(returns)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--env", default="loadbalance_v0", choices=deszoo.list_envs())
    p.add_argument("--preset", default="small")
    p.add_argument("--iterations", type=int, default=10, help="PPO iterations")
    p.add_argument("--batch", type=int, default=4000, help="env steps per iteration")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)

    import ray

    ray.init(num_cpus=2, include_dashboard=False)
    algo = build(args.env, args.seed, args.batch, preset=args.preset)
    start = time.perf_counter()
    for i in range(args.iterations):
        result = algo.train()
        ret = result["env_runners"].get("episode_return_mean", float("nan"))
        print(f"iteration {i + 1}: training episode return {ret:8.1f}  "
              f"({time.perf_counter() - start:.0f} s)")
    print(f"greedy mean return over 20 held-out seeds: "
          f"{evaluate(algo, args.env, preset=args.preset).mean():.1f}")
    algo.stop()
    ray.shutdown()


if __name__ == "__main__":
    main()
