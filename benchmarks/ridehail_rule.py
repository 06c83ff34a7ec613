"""Which ridehail score entries are the one-line rule "accept the nearest request, else stay"?

Plays the rule on each entry's held-out seeds (its scenario and preset at their defaults) and
prints, per entry of ``benchmarks/scores``, its mean, the rule's mean and whether the two are
equal seed for seed (to 1e-3). Every greedy learned entry of ridehail_v0 and ridehail_v1 was
(2026-12-07): the learners never reposition a driver, and the rule beats the heuristic on
the default preset.

    python benchmarks/ridehail_rule.py
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

import deszoo

SCORES = Path(__file__).resolve().parent / "scores"


def nearest_or_stay(mask: np.ndarray) -> int:
    """Action 1 (the nearest open request within reach) if it is legal, else 0 (stay)."""
    return 1 if mask[1] else 0


def rule_returns(name: str, preset: str, seeds: list[int]) -> np.ndarray:
    """The rule's episode return (summed over drivers) on each seed."""
    out = []
    for seed in seeds:
        env = deszoo.make(name, preset=preset)
        _, infos = env.reset(seed=seed)
        total = 0.0
        while env.agents:
            actions = {a: nearest_or_stay(infos[a]["action_mask"]) for a in env.agents}
            _, rew, _, _, infos = env.step(actions)
            total += sum(rew.values())
        env.close()
        out.append(total)
    return np.array(out)


def main() -> None:
    rules: dict[tuple[str, str, tuple[int, ...]], np.ndarray] = {}
    for path in sorted(SCORES.glob("ridehail_*.json")):
        entry = json.loads(path.read_text())
        key = (entry["scenario"], entry["preset"], tuple(entry["seeds"]))
        if key not in rules:
            rules[key] = rule_returns(key[0], key[1], list(key[2]))
        rule = rules[key]
        same = bool(np.allclose(np.array(entry["returns"]), rule, rtol=0.0, atol=1e-3))
        print(f"{path.stem:40s} mean {entry['mean']:8.1f}  rule {rule.mean():8.1f}  "
              f"seed for seed: {'same' if same else 'different'}")


if __name__ == "__main__":
    main()
