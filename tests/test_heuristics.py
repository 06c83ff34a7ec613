"""Each scenario's heuristic beats a uniformly random masked policy (a check of the model)."""

from __future__ import annotations

import numpy as np
import pytest

import deszoo
from deszoo.cli import run_episode
from deszoo.policies import evaluate, heuristic_policy

HELD_OUT = range(50_000, 50_020)  # seeds no heuristic was tuned on


def episode_return(name: str, seed: int, policy: str) -> float:
    return run_episode(name, seed, preset="small", policy=policy)["return_total"]


@pytest.mark.parametrize("name", deszoo.list_envs())
def test_heuristic_beats_random_masked_policy(name):
    heuristic = np.mean([episode_return(name, s, "heuristic") for s in HELD_OUT])
    random = np.mean([episode_return(name, s, "random") for s in HELD_OUT])
    # A clear margin, not a tie: at least 5% of the random policy's return magnitude.
    assert heuristic > random + 0.05 * abs(random), (name, heuristic, random)


@pytest.mark.parametrize("name", deszoo.list_envs())
def test_vector_evaluation_matches_the_pettingzoo_loop(name):
    """deszoo.policies.evaluate over a vector env replays the dict-API episodes exactly."""
    seeds = list(HELD_OUT)[:3]
    batched = evaluate(heuristic_policy(name), name, seeds, preset="small")
    single = [episode_return(name, s, "heuristic") for s in seeds]
    np.testing.assert_allclose(batched, single, rtol=1e-5)
