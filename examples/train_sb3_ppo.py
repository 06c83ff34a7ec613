"""Parameter-shared MaskablePPO (sb3-contrib) on a deszoo scenario, over the ``shm`` vector env.

Every agent of every simulation is one row of the vector env, so one policy acts for all
agents (parameter sharing). ``to_sb3`` exposes each row's action mask through
``env_method("action_masks")``, which MaskablePPO reads before every action. Non-deciding
agents have the mask ``[1, 0, ..., 0]`` and so always send the no-op.

    pip install -e ".[sb3]"
    python examples/train_sb3_ppo.py                      # loadbalance_v0 small, 100k steps
    python examples/train_sb3_ppo.py --eval-every 20000   # prints a learning curve

See docs/training.md.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

try:
    import torch
    from sb3_contrib import MaskablePPO
    from stable_baselines3.common.vec_env import VecMonitor
except ImportError as exc:
    raise ImportError("this example needs torch and sb3-contrib: pip install torch "
                      "--index-url https://download.pytorch.org/whl/cpu; then pip install "
                      "'deszoo[sb3]'") from exc

import deszoo
from deszoo.policies import Policy, evaluate, heuristic_policy, random_policy
from deszoo.vector import make_vec, to_sb3


def make_sb3_env(name: str, num_envs: int, seed: int, num_workers: int | None = None, **kw):
    """``num_envs`` simulations of ``name`` as one SB3 VecEnv (rows: env-major, agent-minor)."""
    vec = make_vec(name, num_envs, backend="shm", num_workers=num_workers, seed=seed,
                   autoreset_mode="SameStep", **kw)
    return VecMonitor(to_sb3(vec))  # SB3 logs episode returns (ep_rew_mean) through a monitor


def train(name: str = "loadbalance_v0", timesteps: int = 100_000, num_envs: int = 16,
          seed: int = 0, num_workers: int | None = None, eval_every: int = 0,
          log: Callable[[str], None] = print, **kw) -> tuple[MaskablePPO, list[tuple]]:
    """Train a shared MaskablePPO policy; returns it and the curve ``[(steps, mean return)]``.

    ``timesteps`` counts rows (agent decisions offered), as SB3 does. With ``eval_every``
    the policy is evaluated on the held-out seeds every that many timesteps.
    """
    torch.set_num_threads(1)  # the cores are better spent on the simulation workers
    env = make_sb3_env(name, num_envs, seed, num_workers, **kw)
    model = MaskablePPO("MlpPolicy", env, n_steps=128, batch_size=512, n_epochs=4,
                        learning_rate=3e-4, gamma=0.99, seed=seed, device="cpu")
    curve = []
    try:
        chunk = eval_every or timesteps
        while model.num_timesteps < timesteps:
            model.learn(min(chunk, timesteps - model.num_timesteps), reset_num_timesteps=False)
            if eval_every:
                curve.append((model.num_timesteps, evaluate(sb3_policy(model), name, **kw).mean()))
                log(f"{model.num_timesteps:>8} timesteps: mean return {curve[-1][1]:8.1f}")
    finally:
        env.close()
    return model, curve


def sb3_policy(model: MaskablePPO, deterministic: bool = True) -> Policy:
    return lambda obs, mask: model.predict(obs, action_masks=mask,
                                           deterministic=deterministic)[0]


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--env", default="loadbalance_v0", choices=deszoo.list_envs())
    p.add_argument("--preset", default="small")
    p.add_argument("--timesteps", type=int, default=100_000, help="rows stepped (SB3 count)")
    p.add_argument("--num-envs", type=int, default=16, help="simulations in the batch")
    p.add_argument("--num-workers", type=int, default=None, help="shm worker processes")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--eval-every", type=int, default=0, help="timesteps between evaluations")
    p.add_argument("--save", default=None, help="path to save the trained model")
    args = p.parse_args(argv)
    for flag, value, low in (("--timesteps", args.timesteps, 1), ("--num-envs", args.num_envs, 1),
                             ("--eval-every", args.eval_every, 0)):
        if value < low:  # (a negative --eval-every trained 0 steps per round, for ever)
            p.error(f"argument {flag}: must be at least {low}, got {value}")

    kw = {"preset": args.preset}
    for label, policy in [("random", random_policy()), ("heuristic", heuristic_policy(args.env))]:
        print(f"{label:>9}: mean return {evaluate(policy, args.env, **kw).mean():8.1f}")
    start = time.perf_counter()
    model, _ = train(args.env, args.timesteps, args.num_envs, args.seed, args.num_workers,
                     args.eval_every, **kw)
    print(f"trained {model.num_timesteps} timesteps in {time.perf_counter() - start:.1f} s")
    print(f"  trained: mean return {evaluate(sb3_policy(model), args.env, **kw).mean():8.1f}")
    if args.save:
        model.save(args.save)


if __name__ == "__main__":
    main()
