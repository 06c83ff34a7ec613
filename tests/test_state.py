"""Tests the global state (``state()``, ``state_space``) of every registered scenario."""

from __future__ import annotations

import numpy as np
import pytest

import deszoo

ENVS = deszoo.list_envs()
STEPS = 300


def play(env, seed: int, call_state: bool = True) -> tuple[list, list]:
    """``STEPS`` random legal steps from ``reset(seed)`` (resetting when an episode ends):
    the states seen (if ``call_state``) and the observations and rewards."""
    rng = np.random.default_rng(seed)
    states, trace = [], []
    _, infos = env.reset(seed=seed)
    for _ in range(STEPS):
        if not env.agents:
            _, infos = env.reset()
        if call_state:
            state = env.state()
            assert env.state_space.contains(state), np.flatnonzero(
                (state < env.state_space.low) | (state > env.state_space.high))
            states.append(state)
        actions = {}
        for a, info in infos.items():
            if env.rows.type.__name__ == "Box":
                actions[a] = env.action_space(a).sample()
            else:
                actions[a] = int(rng.choice(np.flatnonzero(info["action_mask"])))
        obs, rew, *_, infos = env.step(actions)
        trace.append((obs, rew))
    return states, trace


@pytest.mark.parametrize("name", ENVS)
def test_state_is_in_its_space_and_deterministic(name):
    env = deszoo.make(name, preset="small")
    assert env.state_space.shape[0] != len(env.possible_agents) * env.rows.obs_dim  # its own
    first, _ = play(env, seed=3)
    again, _ = play(deszoo.make(name, preset="small"), seed=3)
    np.testing.assert_array_equal(np.array(first), np.array(again))
    assert np.ptp(np.array(first), axis=0).any()  # it moves


@pytest.mark.parametrize("name", ENVS)
def test_asking_for_the_state_changes_no_trajectory(name):
    _, watched = play(deszoo.make(name, preset="small"), seed=5)
    _, alone = play(deszoo.make(name, preset="small"), seed=5, call_state=False)
    assert len(watched) == len(alone)
    for (obs, rew), (obs2, rew2) in zip(watched, alone, strict=True):
        assert list(obs) == list(obs2) and rew == rew2
        for a in obs:
            np.testing.assert_array_equal(obs[a], obs2[a])


def test_continuous_supplychain_state():
    env = deszoo.make("supplychain_v0", preset="small", continuous=True)
    states, _ = play(env, seed=1)
    assert len(states) == STEPS
