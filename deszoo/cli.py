"""Command line: ``deszoo run NAME`` (one seeded episode of the scenario's heuristic),
``deszoo list``, ``deszoo bench`` (sampling speed) and ``deszoo leaderboard``."""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from deszoo.bench import cli as bench_cli
from deszoo.registry import env_module, list_envs

__all__ = ["main", "run_episode"]


def run_episode(name: str, seed: int = 0, preset: str = "default", policy: str = "heuristic"):
    """Play one episode; return a dict of summary figures."""
    module = env_module(name)
    env = module.parallel_env(preset=preset)
    rng = np.random.default_rng(seed)
    obs, infos = env.reset(seed=seed)
    returns = dict.fromkeys(env.possible_agents, 0.0)
    decisions = 0
    start = time.perf_counter()
    while env.agents:
        actions = {}
        for a in env.agents:
            mask = infos[a]["action_mask"]
            decisions += bool(infos[a]["needs_action"])
            if policy == "heuristic":
                actions[a] = module.heuristic(obs[a], mask)
            else:
                actions[a] = int(rng.choice(np.flatnonzero(mask)))
        obs, rewards, terms, truncs, infos = env.step(actions)
        for a, r in rewards.items():
            returns[a] += r
    wall = time.perf_counter() - start
    return {
        "scenario": name,
        "preset": preset,
        "seed": seed,
        "policy": policy,
        "steps": env.num_steps,
        "decisions": decisions,
        "sim_time": env.now,
        "sim_events": env.num_events,
        "events_per_step": env.num_events / max(env.num_steps, 1),
        "ended_by": "truncation" if any(truncs.values()) else "termination",
        "return_total": sum(returns.values()),
        "returns": returns,
        "wall_s": wall,
        "steps_per_s": env.num_steps / wall if wall > 0 else float("inf"),
    }


def _print_summary(s: dict) -> None:
    rows = [
        ("scenario", f"{s['scenario']} (preset {s['preset']}, seed {s['seed']})"),
        ("policy", s["policy"]),
        ("env steps", s["steps"]),
        ("agent decisions", s["decisions"]),
        ("simulated time", f"{s['sim_time']:.2f}"),
        ("SimPy events", f"{s['sim_events']} ({s['events_per_step']:.1f} per step)"),
        ("episode ended by", s["ended_by"]),
        ("total return", f"{s['return_total']:.3f}"),
        ("wall time", f"{s['wall_s'] * 1e3:.1f} ms ({s['steps_per_s']:.0f} env-steps/s)"),
    ]
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        print(f"{key:<{width}}  {value}")
    print()
    print(f"{'agent':<{width}}  return")
    for agent, ret in s["returns"].items():
        print(f"{agent:<{width}}  {ret:.3f}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="deszoo", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="play one seeded episode of a scenario's heuristic policy")
    run.add_argument("name", choices=list_envs(), metavar="NAME", help=", ".join(list_envs()))
    run.add_argument("--seed", type=int, default=0)
    run.add_argument("--preset", default="default")
    run.add_argument("--policy", choices=["heuristic", "random"], default="heuristic")
    sub.add_parser("list", help="list the registered scenarios")
    bench_cli.add_commands(sub)
    args = parser.parse_args(argv)
    if args.command == "list":
        print("\n".join(list_envs()))
    elif args.command == "run":
        _print_summary(run_episode(args.name, args.seed, args.preset, args.policy))
    elif args.command == "bench":
        return bench_cli.run_bench(args, argv)
    elif args.command == "leaderboard":
        return bench_cli.run_leaderboard(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
