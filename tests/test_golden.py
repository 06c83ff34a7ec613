"""Every scenario still produces its recorded trajectories (``tests/golden.py``)."""

from __future__ import annotations

import json

import pytest
from golden import PATH, RUNS, trajectory_hash

import deszoo

GOLDEN = json.loads(PATH.read_text())


@pytest.mark.parametrize("name", deszoo.list_envs())
def test_trajectories_match_the_recorded_ones(name):
    assert name in GOLDEN, f"{name}: no recorded trajectories; run python tests/golden.py"
    for preset, seed, policy, steps in RUNS:
        key = f"{preset}/{seed}/{policy}/{steps}"
        assert trajectory_hash(name, preset, seed, policy, steps) == GOLDEN[name][key], (
            f"{name} {key}: the trajectory changed; bump the scenario's version (with a "
            "Version History line) and rerun python tests/golden.py"
        )
