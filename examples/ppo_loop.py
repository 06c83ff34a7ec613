"""Train the hand-written masked PPO loop of :mod:`deszoo.ppo` (torch) on a deszoo vector
env, parameter-shared; ``--centralised`` makes it MAPPO (the critic reads the global
state), ``--collect pipelined`` double-buffers the rollout (the policy acts on one half of
the simulations while the other half steps).

    python examples/ppo_loop.py --timesteps 100000
    python examples/ppo_loop.py --timesteps 100000 --centralised
    python examples/ppo_loop.py --env jobshop_v0 --preset default --num-envs 32 --collect pipelined

See docs/training.md; the loop itself is ``deszoo/ppo.py``.
"""

from __future__ import annotations

import argparse
import functools
import time

import deszoo
from deszoo.policies import evaluate
from deszoo.ppo import COLLECT, ActorCritic, train

__all__ = ["ActorCritic", "evaluate", "main", "train"]


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--env", default="loadbalance_v0", choices=deszoo.list_envs())
    p.add_argument("--preset", default="small")
    p.add_argument("--timesteps", type=int, default=100_000, help="rows stepped")
    p.add_argument("--num-envs", type=int, default=16, help="simulations in the batch")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--centralised", action="store_true",
                   help="MAPPO: the critic reads the global state too")
    p.add_argument("--collect", choices=COLLECT, default="sync",
                   help="one vector env stepped in sync, or two halves (pipelined: "
                   "double-buffered; halves: its synchronous form)")
    args = p.parse_args(argv)
    start = time.perf_counter()
    net = train(args.env, args.timesteps, args.num_envs, args.seed, preset=args.preset,
                centralised=args.centralised, collect=args.collect)
    greedy = evaluate(functools.partial(net.act, greedy=True), args.env, preset=args.preset)
    print(f"trained in {time.perf_counter() - start:.1f} s; greedy mean return "
          f"{greedy.mean():.1f} over 20 held-out seeds")


if __name__ == "__main__":
    main()
