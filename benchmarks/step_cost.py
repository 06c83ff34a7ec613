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

``--instructions`` counts instead of timing: machine instructions per step under valgrind's
callgrind (the first ``--ir-steps`` steps of the plan replayed, minus a replay of none, in
fresh interpreters with ``PYTHONHASHSEED=0``). The count does not depend on the machine's
load, so it settles small differences that CPU time on a shared machine cannot; it does not
see cache misses. Needs ``valgrind``; about a minute per scenario-preset and tree::

    python benchmarks/step_cost.py --instructions --presets default --rev 6a88602 --rev . --rounds 1
"""

from __future__ import annotations

import argparse
import math
import os
import pickle
import subprocess
import sys
import tempfile
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
        given = {a: _own(env, env.possible_agents.index(a), acts) for a in env.agents}
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


def instructions(cases: list[tuple[str, str]], steps: int, seed: int) -> dict[str, float]:
    """Instructions per step (``arrays`` and ``dict``) under callgrind; see the docstring."""
    out = {}
    env = dict(os.environ, PYTHONHASHSEED="0")
    with tempfile.TemporaryDirectory(prefix="deszoo-ir-") as tmp:
        for name, preset in cases:
            plan = record(name, preset, STEPS[preset], seed)[:steps]
            saved = Path(tmp) / "plan.pkl"
            saved.write_bytes(pickle.dumps((name, preset, seed, plan)))
            for api in ("arrays", "dict"):
                counts = []
                for k in (0, len(plan)):
                    log = Path(tmp) / f"cg.{k}"
                    subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={log}",
                                    sys.executable, __file__, "--replay", str(saved),
                                    "--api", api, "--count", str(k)],
                                   env=env, check=True, capture_output=True)
                    line = next(x for x in log.read_text().splitlines()
                                if x.startswith("summary:"))
                    counts.append(int(line.split()[1]))
                out[f"{name}/{preset}/{api}"] = (counts[1] - counts[0]) / len(plan)
    return out


def _replay_saved(path: Path, api: str, count: int) -> None:
    import gc

    name, preset, seed, plan = pickle.loads(path.read_bytes())
    # What the imports left on the heap is no step's work, and its size differs between
    # trees: frozen, the cyclic GC's collections do not walk it. The same jobshop_v0 code
    # counted 309k and 333k instructions per step in two checkouts unfrozen, 310k and 320k
    # frozen: read differences of a few percent between trees as noise.
    gc.collect()
    gc.freeze()
    replay(name, preset, seed, plan[:count], api)


def table(results: dict[str, dict[str, float]], unit: str = "us") -> str:
    revs = list(results)
    keys = list(results[revs[0]])
    fmt = "{:,.0f}" if unit == "instructions" else "{:.1f}"
    head = "| scenario/preset | api | " + " | ".join(f"{r} {unit}" for r in revs)
    rule = "|---|---|" + "---:|" * len(revs)
    if len(revs) > 1:
        head += f" | {revs[-1]} vs {revs[0]}"
        rule += "---:|"
    lines = [head + " |", rule]
    gains: dict[tuple[str, str], list[float]] = {}
    for key in keys:
        case, api = key.rsplit("/", 1)
        row = f"| {case} | {api} | " + " | ".join(fmt.format(results[r][key]) for r in revs)
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
    from revisions import add_options, report

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenarios", default=",".join(SCENARIOS))
    parser.add_argument("--presets", default="small,default,large")
    parser.add_argument("--repeats", type=int, default=3, help="replays per run (best kept)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--instructions", action="store_true",
                        help="count instructions per step under callgrind instead of timing")
    parser.add_argument("--ir-steps", type=int, default=300,
                        help="with --instructions: steps replayed (default 300)")
    add_options(parser)
    parser.add_argument("--replay", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--api", default="arrays", help=argparse.SUPPRESS)
    parser.add_argument("--count", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.replay:
        _replay_saved(args.replay, args.api, args.count)
        return
    cases = [(s, p) for s in args.scenarios.split(",") for p in args.presets.split(",")]
    passed = ["--scenarios", args.scenarios, "--presets", args.presets,
              "--repeats", str(args.repeats), "--seed", str(args.seed),
              "--ir-steps", str(args.ir_steps)] + ["--instructions"] * args.instructions
    if args.instructions:
        report(Path(__file__), args, passed,
               lambda: instructions(cases, args.ir_steps, args.seed),
               lambda results: table(results, "instructions"))
    else:
        report(Path(__file__), args, passed, lambda: measure(cases, args.repeats, args.seed),
               lambda results: table(results, "us"))


if __name__ == "__main__":
    main()
