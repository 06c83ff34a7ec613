"""A long fuzz of scenario parameters (see ``devkit/fuzz_params.py``).

First every parameter of every scenario alone at each edge value (what
``tests/test_fuzz_params.py`` runs), then random combinations of several values that each
ran alone (the smallest positive float with the largest horizon, NumPy integers together,
...): a combination must be refused with a ConfigError that names every argument, or step
with finite observations, rewards and state within the events budget and the watchdog.
Prints the failures and a count per outcome; exit status 1 if any case failed.

    python benchmarks/fuzz_params.py                         # singles + 2,000 combinations
    python benchmarks/fuzz_params.py --combos 20000 --seed 3 --most 5
    python benchmarks/fuzz_params.py --scenarios ridehail_v1 --no-singles --policy heuristic
"""

from __future__ import annotations

import argparse
import random
import sys
import time
import warnings
from collections import Counter

# The fuzz is the tests' own machinery, next to them (not in the package).
import deszoo
from devkit.fuzz_params import WATCHDOG, params_of, run_case, values_for


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--scenarios", default=",".join(deszoo.list_envs()),
                   help="comma-separated scenarios (default: every registered one)")
    p.add_argument("--combos", type=int, default=2000, help="random combinations to run")
    p.add_argument("--most", type=int, default=4, help="most arguments in a combination")
    p.add_argument("--seed", type=int, default=0, help="seed of the combinations' draw")
    p.add_argument("--steps", type=int, default=50, help="steps per case")
    p.add_argument("--policy", default="random", choices=("random", "heuristic"))
    p.add_argument("--watchdog", type=float, default=WATCHDOG,
                   help="seconds one case may take before it counts as a hang")
    p.add_argument("--no-singles", action="store_true",
                   help="skip the one-value cases (combinations still use what runs alone)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    warnings.simplefilter("ignore", RuntimeWarning)  # the outcome says what matters
    names = [n for n in args.scenarios.split(",") if n]
    counts: Counter = Counter()
    failures: list[str] = []
    slowest = (0.0, "")
    most_events = (0, "")
    runs_alone: dict[str, list[tuple[str, object]]] = {n: [] for n in names}

    def record(name: str, kwargs: dict, out) -> None:
        nonlocal slowest, most_events
        counts[out.kind] += 1
        if not out.ok:
            failures.append(f"{name} {kwargs!r}: {out.kind}: {out.detail}")
            print(f"FAIL {failures[-1]}", flush=True)
        slowest = max(slowest, (out.seconds, f"{name} {kwargs!r}"))
        most_events = max(most_events, (out.max_events, f"{name} {kwargs!r}"))

    start = time.perf_counter()
    for name in names:
        for key, param in params_of(name).items():
            for value in values_for(param):
                if args.no_singles:  # only learn what runs alone, cheaply
                    try:
                        deszoo.make(name, **{key: value}).close()
                    except Exception:  # noqa: BLE001 - refused (or broken) alone
                        continue
                    runs_alone[name].append((key, value))
                    continue
                out = run_case(name, {key: value}, args.steps, args.policy,
                               watchdog=args.watchdog)
                record(name, {key: value}, out)
                if out.kind == "ran":
                    runs_alone[name].append((key, value))
    singles = sum(counts.values())
    print(f"single values: {singles} cases in {time.perf_counter() - start:.0f} s: "
          f"{dict(counts)}", flush=True)

    rng = random.Random(args.seed)
    for i in range(args.combos):
        name = rng.choice(names)
        pool = runs_alone[name]
        kwargs: dict = {}
        for key, value in rng.sample(pool, min(len(pool), rng.randint(2, args.most))):
            kwargs.setdefault(key, value)
        out = run_case(name, kwargs, args.steps, args.policy, seed=i, watchdog=args.watchdog)
        record(name, kwargs, out)
        if (i + 1) % 500 == 0:
            print(f"  {i + 1} combinations, {time.perf_counter() - start:.0f} s", flush=True)
    print(f"\n{sum(counts.values())} cases ({singles} single values, {args.combos} "
          f"combinations) in {time.perf_counter() - start:.0f} s: {dict(counts)}")
    print(f"slowest case: {slowest[0]:.2f} s, {slowest[1]}")
    print(f"most SimPy events in one step: {most_events[0]:,}, {most_events[1]}")
    if failures:
        print(f"{len(failures)} failures:\n" + "\n".join(failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
