"""Every newest scenario version ends its episodes in bounded simulated time on every policy.

Policies built to loop (always the no-op, always the lowest or the highest legal action, a
ping-pong between the two) must end each episode: by the scenario's documented ``max_time``
where it has one, else (a model that cannot loop: jobs, requests and shifts run out, or
``max_steps`` periods) within twice the heuristic's episode on the same seed. The heuristic
itself must still terminate, never be truncated, where a ``max_time`` exists.
"""

from __future__ import annotations

import numpy as np
import pytest

import deszoo
from deszoo.registry import env_module, latest_versions

NEWEST = latest_versions()
STEP_CAP = 100_000  # far more than any bounded episode here takes; reaching it is a failure


def _lowest(mask: np.ndarray) -> np.ndarray:
    """The lowest legal action other than the no-op (the no-op if it is the only one)."""
    other = mask[:, 1:]
    return np.where(other.any(axis=1), other.argmax(axis=1) + 1, 0)


def _highest(mask: np.ndarray) -> np.ndarray:
    return mask.shape[1] - 1 - mask[:, ::-1].argmax(axis=1)


def act(policy: str, env, step: int) -> np.ndarray:
    mask = env.mask_buf > 0
    if policy == "noop":  # the no-op where allowed, else the lowest legal action
        return np.where(mask[:, 0], 0, mask.argmax(axis=1))
    if policy == "lowest":
        return _lowest(mask)
    if policy == "highest":
        return _highest(mask)
    if policy == "pingpong":  # lowest and highest in turn (an elevator car shuttling)
        return _lowest(mask) if step % 2 else _highest(mask)
    h = env_module(env.metadata["name"]).heuristic
    return np.array([h(o, m) for o, m in zip(env.obs_buf, env.mask_buf, strict=True)])


def episode(name: str, preset: str, policy: str, seed: int, **kw) -> tuple[float, int, bool]:
    """(simulated time at the end, env steps, truncated) of one episode."""
    env = deszoo.make(name, preset=preset, **kw)
    env.reset_arrays(seed)
    steps = 0
    while not env.episode_over and steps < STEP_CAP:
        env.step_arrays(act(policy, env, steps).astype(np.int64))
        steps += 1
    assert env.episode_over, f"{name} {preset} {policy}: no end after {STEP_CAP} steps"
    return env.now, steps, bool(env.trunc_buf.any())


@pytest.mark.parametrize("preset", ["small", "default"])
@pytest.mark.parametrize("name", NEWEST)
def test_a_looping_policy_ends_within_the_documented_limit(name, preset):
    env = deszoo.make(name, preset=preset)
    seed = 7
    heuristic_time, _, _ = episode(name, preset, "heuristic", seed)
    limit = env.max_time if env.max_time is not None else 2 * heuristic_time
    for policy in ("noop", "lowest", "highest", "pingpong"):
        now, steps, _ = episode(name, preset, policy, seed)
        assert now <= limit, (
            f"{name} {preset} {policy}: ran to t={now:.0f} in {steps} steps; limit {limit:.0f} "
            f"(heuristic: {heuristic_time:.0f})"
        )


# The scenarios whose max_time is a safety limit (traffic never terminates: its max_time is
# the task's length).
SAFETY_LIMITED = [n for n in NEWEST
                  if deszoo.make(n).max_time is not None and not n.startswith("traffic")]


@pytest.mark.parametrize("preset", ["small", "default"])
@pytest.mark.parametrize("name", SAFETY_LIMITED)
def test_the_heuristic_ends_well_before_max_time(name, preset):
    """Truncation is for bad policies: the heuristic's episodes terminate, with room left."""
    max_time = deszoo.make(name, preset=preset).max_time
    for seed in range(3):
        now, _, truncated = episode(name, preset, "heuristic", seed)
        assert not truncated and now < max_time / 2, (name, preset, seed, now, max_time)


def test_the_safety_limited_scenarios_are_the_v2_ones():
    assert SAFETY_LIMITED == ["elevator_v2", "warehouse_v2"]


@pytest.mark.parametrize("old, new, limit", [("elevator_v1", "elevator_v2", 3600.0),
                                             ("warehouse_v1", "warehouse_v2", 1200.0)])
def test_v1_loops_where_v2_truncates(old, new, limit):
    """The control: the same no-op policy runs v1's small episode far past v2's limit (to
    max_steps), and v2's to exactly its ``max_time``, truncated."""
    t_old, steps_old, _ = episode(old, "small", "noop", 7)
    t_new, _, truncated = episode(new, "small", "noop", 7)
    assert t_old > 5 * limit and steps_old == deszoo.make(old, preset="small").max_steps
    assert truncated and t_new == limit


def test_the_time_limit_can_be_lifted_or_moved():
    """``max_time=None`` gives v1's unbounded episode back; another value moves the limit."""
    assert episode("elevator_v2", "small", "noop", 7, max_time=None)[:2] == \
        episode("elevator_v1", "small", "noop", 7)[:2]
    now, _, truncated = episode("warehouse_v2", "small", "noop", 7, max_time=600.0)
    assert truncated and now == 600.0
