"""CPU per env step of every scenario and preset, serial, on both APIs; two trees side by side.

A first pass plays each scenario-preset with the seeded random legal policy (a uniform legal
action per deciding agent) and records every action; the timed passes replay those actions
from a fresh ``reset(seed)``, autoresets included, so the figures hold the env's work and
nothing of the policy's. ``arrays`` replays through ``step_arrays``, ``dict`` through
PettingZoo's ``step`` (the action dicts are built before the clock starts). Trajectories
are bit-identical across trees (``tests/test_golden.py``), so every tree does the same work::

    python benchmarks/step_cost.py                                   # this tree
    python benchmarks/step_cost.py --rev 6a88602 --rev . --rounds 5  # two trees, alternating
    python benchmarks/step_cost.py --presets default --scenarios jobshop_v0,traffic_v0

Figures are CPU microseconds per step (``time.process_time``), the best of ``--repeats``
replays within a run and of ``--rounds`` runs per tree. With two trees the table adds the
speed-up of the last over the first, and the geometric mean of each preset's speed-ups.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

SCENARIOS = ("elevator_v0", "jobshop_v0", "loadbalance_v0", "ridehail_v0", "supplychain_v0",
             "traffic_v0", "warehouse_v0")
STEPS = {"small": 3000, "default": 3000, "large": 300}


def record(name: str, preset: str, steps: int, seed: int):
    """Play ``steps`` steps with the random legal policy; return the actions and resets."""
    import numpy as np

    import deszoo

    env = deszoo.make(name, preset=preset)
    rng = np.random.default_rng(seed)
    env.reset_arrays(seed)
    plan = []  # per step: None (a reset) or (padded actions, {agent: action})
    for _ in range(steps):
        if env.episode_over:
            env.reset_arrays(None)
            plan.append(None)
            continue
        mask = env.mask_buf
        acts = env.rows.zero_actions()
        if acts.ndim == 1:  # Discrete: a uniform legal action per row
            acts[:] = (rng.random(mask.shape) * mask).argmax(axis=1)
        else:  # MultiDiscrete / Box: a legal fallback draw per row
            for i in range(len(acts)):
                acts[i] = env.rows.fallback(i, mask[i], rng)
        given = {a: _own(env, env._index[a], acts) for a in env.agents}
        plan.append((acts.copy(), given))
        env.step_arrays(acts)
    env.close()
    return plan


def _own(env, i, acts):
    value = env.rows.unpad(i, acts[i])
    return int(value) if getattr(value, "ndim", 0) == 0 else value


def replay(name: str, preset: str, seed: int, plan, api: str) -> float:
    """CPU seconds to replay ``plan`` (``api``: ``"arrays"`` or ``"dict"``)."""
    import deszoo

    env = deszoo.make(name, preset=preset)
    env.reset_arrays(seed)
    reset = env.reset_arrays
    if api == "arrays":
        step = env.step_arrays
        t0 = time.process_time()
        for item in plan:
            if item is None:
                reset(None)
            else:
                step(item[0])
    else:
        step = env.step
        t0 = time.process_time()
        for item in plan:
            if item is None:
                env.reset()
            else:
                step(item[1])
    spent = time.process_time() - t0
    env.close()
    return spent


def measure(cases: list[tuple[str, str]], repeats: int, seed: int) -> dict[str, float]:
    out = {}
    for name, preset in cases:
        plan = record(name, preset, STEPS[preset], seed)
        for api in ("arrays", "dict"):
            best = min(replay(name, preset, seed, plan, api) for _ in range(repeats))
            out[f"{name}/{preset}/{api}"] = best / len(plan) * 1e6
    return out


def table(results: dict[str, dict[str, float]]) -> str:
    revs = list(results)
    keys = list(results[revs[0]])
    head = "| scenario/preset | api | " + " | ".join(f"{r} us" for r in revs)
    rule = "|---|---|" + "---:|" * len(revs)
    if len(revs) > 1:
        head += f" | {revs[-1]} vs {revs[0]}"
        rule += "---:|"
    lines = [head + " |", rule]
    gains: dict[tuple[str, str], list[float]] = {}
    for key in keys:
        case, api = key.rsplit("/", 1)
        row = f"| {case} | {api} | " + " | ".join(f"{results[r][key]:.1f}" for r in revs)
        if len(revs) > 1:
            gain = results[revs[0]][key] / results[revs[-1]][key]
            gains.setdefault((case.split("/")[1], api), []).append(gain)
            row += f" | {gain:.2f}x"
        lines.append(row + " |")
    for (preset, api), g in gains.items():
        geo = math.exp(sum(math.log(x) for x in g) / len(g))
        lines.append(f"| geometric mean, {preset} ({len(g)}) | {api} | "
                     + " | " * (len(revs) - 1) + f" | {geo:.2f}x |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenarios", default=",".join(SCENARIOS))
    parser.add_argument("--presets", default="small,default,large")
    parser.add_argument("--repeats", type=int, default=3, help="replays per run (best kept)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--rev", action="append", default=[],
                        help="git revision to measure ('.': the working tree); repeat to "
                             "compare, alternating; default: this tree in this process")
    parser.add_argument("--rounds", type=int, default=3, help="with --rev: runs per tree")
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    cases = [(s, p) for s in args.scenarios.split(",") for p in args.presets.split(",")]
    if args.one:
        print(json.dumps(measure(cases, args.repeats, args.seed)))
        return
    if args.rev:
        from revisions import run_revisions

        passed = ["--scenarios", args.scenarios, "--presets", args.presets,
                  "--repeats", str(args.repeats), "--seed", str(args.seed)]
        results = run_revisions(Path(__file__), args.rev, args.rounds, passed,
                                progress=lambda s: print(s, file=sys.stderr))
    else:
        results = {"this tree": measure(cases, args.repeats, args.seed)}
    print(table(results))
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    main()
