"""Per-step discounting rewards a robot that waits in warehouse_v0 (default preset).

Every robot takes the first open order whenever it may (full batches, never the no-op),
except ``--lazy`` robots, which always take the no-op (wait ``wait_time`` s, decide again).
The script prints, per number of lazy robots, the mean over seeds of the shared return per
robot: undiscounted (minus the order-minutes, the task), discounted per env step with gamma
0.99 and 0.999, and discounted per simulated second (0.999 per s). A waiting robot makes a
decision point every 10 s, so it shortens every step; counted in steps, the future then
weighs less, and one lazy robot can *raise* the per-step discounted return while the task
gets worse (benchmarks/NOTES.md, the warehouse_v0 default study).

    python benchmarks/time_dilation.py --seeds 20
"""

from __future__ import annotations

import argparse

import numpy as np

import deszoo


def episode(seed: int, lazy: int, preset: str, cap: int) -> tuple[np.ndarray, np.ndarray]:
    """Each step's shared reward per robot, and the sim clock before each step."""
    env = deszoo.make("warehouse_v0", preset=preset)
    _, infos = env.reset(seed=seed)
    lazy_names = set(env.possible_agents[:lazy])
    rewards, clock = [], []
    while env.agents and len(rewards) < cap:
        actions = {a: 1 if a not in lazy_names and infos[a]["action_mask"][1:].any() else 0
                   for a in env.agents}
        clock.append(env.now)
        _, rew, _, _, infos = env.step(actions)
        rewards.append(sum(rew.values()) / len(env.possible_agents))
    return np.array(rewards), np.array(clock)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, default=20, help="seeds 5000.. (default 20)")
    ap.add_argument("--preset", default="default")
    ap.add_argument("--lazy", default="0,1,3", help="numbers of lazy robots (default 0,1,3)")
    ap.add_argument("--cap", type=int, default=3000, help="steps per episode at most")
    args = ap.parse_args(argv)
    print("| lazy robots | steps | undiscounted | 0.99 per step | 0.999 per step "
          "| 0.999 per second |")
    print("|---:|---:|---:|---:|---:|---:|")
    for lazy in (int(x) for x in args.lazy.split(",")):
        rows = []
        for seed in range(5000, 5000 + args.seeds):
            r, t = episode(seed, lazy, args.preset, args.cap)
            k = np.arange(len(r))
            rows.append([len(r), r.sum(), (0.99**k * r).sum(), (0.999**k * r).sum(),
                         (0.999**t * r).sum()])
        m = np.mean(rows, axis=0)
        print(f"| {lazy} | {m[0]:.0f} | " + " | ".join(f"{v:.1f}" for v in m[1:]) + " |")


if __name__ == "__main__":
    main()
