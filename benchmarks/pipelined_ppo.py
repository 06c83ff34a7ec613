"""deszoo's PPO loop, synchronous against pipelined (issue 36 item 4), side by side.

The forms of ``deszoo.ppo.train(collect=...)`` alternate within each round (``sync``: one
vector env; ``halves``: two halves stepped one after the other, the sync form of the
pipeline; ``pipelined``: the two halves double-buffered with ``send``/``recv``); each
prints its timesteps/s and phase shares per round, then the best of the rounds and the
ratios. Load average and free cores before and after.

    python benchmarks/pipelined_ppo.py                      # jobshop_v0 default, 32 sims
    python benchmarks/pipelined_ppo.py --spin-us 0 --rounds 5
"""

from __future__ import annotations

import argparse

from deszoo import ppo
from deszoo.bench.machine import free_cores, load_average


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--env", default="jobshop_v0")
    p.add_argument("--preset", default="default")
    p.add_argument("--num-envs", type=int, default=32, help="simulations")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--backend", default="shm")
    p.add_argument("--timesteps", type=int, default=131_072, help="per run")
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--forms", default="sync,halves,pipelined")
    p.add_argument("--spin-us", type=int, default=None, help="shm's spin_us (default: its own)")
    p.add_argument("--n-steps", type=int, default=128)
    p.add_argument("--epochs", type=int, default=4)
    args = p.parse_args(argv)
    forms = args.forms.split(",")
    extra = {} if args.spin_us is None else {"spin_us": args.spin_us}
    print(f"load {load_average()} free cores {free_cores()}", flush=True)
    best: dict[str, tuple[float, dict]] = {}
    best_rollout: dict[str, float] = {}
    for r in range(args.rounds):
        for form in forms:
            phases = ppo.Phases()
            calls: list[int] = []
            ppo.train(args.env, timesteps=args.timesteps, num_envs=args.num_envs, seed=0,
                      n_steps=args.n_steps, epochs=args.epochs, backend=args.backend,
                      num_workers=args.workers, collect=form, phases=phases,
                      on_update=lambda n, _net, c=calls: c.append(n), preset=args.preset, **extra)
            rate = calls[-1] / phases.wall
            # The rollout alone (all but the update): what the overlap can speed up.
            rollout = calls[-1] / (phases.wall - phases.seconds["update"])
            best_rollout[form] = max(best_rollout.get(form, 0.0), rollout)
            shares = phases.shares()
            print(f"round {r} {form:9s} {rate:8,.0f} timesteps/s (rollout alone "
                  f"{rollout:8,.0f})  " + "  ".join(
                f"{k} {v:.0%}" for k, v in shares.items()), flush=True)
            if rate > best.get(form, (0.0, {}))[0]:
                best[form] = (rate, shares)
    print(f"load {load_average()} free cores {free_cores()}")
    for form, (rate, shares) in best.items():
        print(f"best {form:9s} {rate:8,.0f} (rollout alone {best_rollout[form]:8,.0f})  "
              + "  ".join(f"{k} {v:.0%}" for k, v in shares.items()))
    if "pipelined" in best:
        for ref in ("sync", "halves"):
            if ref in best:
                print(f"pipelined / {ref}: {best['pipelined'][0] / best[ref][0]:.2f}x "
                      f"(rollout alone {best_rollout['pipelined'] / best_rollout[ref]:.2f}x)")


if __name__ == "__main__":
    main()
