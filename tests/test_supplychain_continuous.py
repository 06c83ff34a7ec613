"""supplychain_v0 with ``continuous=True``: Box order sizes, strict bounds, same chain."""

from __future__ import annotations

import numpy as np
import pytest
from pettingzoo.test import parallel_api_test

import deszoo
from deszoo.errors import ConfigError, InvalidActionError, MissingActionError

NAME = "supplychain_v0"


def continuous(**kwargs):
    return deszoo.make(NAME, continuous=True, **kwargs)


def rollout(env, seed: int, action_seed: int, steps: int = 40) -> list:
    """(obs, rewards, infos) per step under uniformly random Box actions."""
    rng = np.random.default_rng(action_seed)
    obs, infos = env.reset(seed=seed)
    out = [(obs, infos)]
    for _ in range(steps):
        if not env.agents:
            break
        acts = {a: env.action_space(a).high * rng.random(1, dtype=np.float32)
                for a in env.agents}
        obs, rew, _, _, infos = env.step(acts)
        out.append((obs, rew, infos))
    return out


def flat(traj: list) -> list:
    """Every array and number of a trajectory, in order (for exact comparison)."""
    items = []
    for step in traj:
        for part in step:
            for agent in sorted(part):
                v = part[agent]
                items.extend(v.values() if isinstance(v, dict) else [v])
    return [np.asarray(v) for v in items]


def test_spaces_are_boxes():
    """Each node orders from Box(0, max_order, (1,)); no mask in the infos."""
    env = continuous(max_order=3.0)
    space = env.action_space("retailer_0")
    assert space.shape == (1,) and space.dtype == np.float32
    assert space.low[0] == 0.0 and space.high[0] == 3.0
    assert env.observation_space("factory_0") == deszoo.make(NAME).observation_space("factory_0")
    _, infos = env.reset(seed=0)
    assert all(i["needs_action"] and "action_mask" not in i for i in infos.values())


def test_passes_pettingzoo_parallel_api_test():
    parallel_api_test(continuous(preset="small"), num_cycles=150)


def test_same_seed_same_trajectory_other_seed_differs():
    a = flat(rollout(continuous(), seed=7, action_seed=1))
    b = flat(rollout(continuous(), seed=7, action_seed=1))
    c = flat(rollout(continuous(), seed=8, action_seed=1))
    assert len(a) == len(b) and all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    assert len(a) != len(c) or not all(
        np.array_equal(x, y) for x, y in zip(a, c, strict=True)
    )


@pytest.mark.parametrize("mode", ["random", "raise"])
@pytest.mark.parametrize("bad", [[-0.01], [2.01], [np.nan], [np.inf], [1.0, 1.0], 1.0,
                                 [True], "1"])
def test_bad_actions_raise_and_are_never_clipped(mode, bad):
    env = continuous(preset="small", invalid_action=mode)
    env.reset(seed=0)
    actions = {a: np.array([0.5], np.float32) for a in env.agents}
    actions["wholesaler_0"] = bad
    with pytest.raises(InvalidActionError, match="wholesaler_0"):
        env.step(actions)
    assert env.model.period == 0 and env.model.last_order == [0, 0, 0, 0]  # nothing happened


def test_missing_action_is_random_and_flagged_or_raises():
    env = continuous(preset="small")
    env.reset(seed=0)
    _, _, _, _, infos = env.step({"retailer_0": np.array([1.0], np.float32)})
    assert infos["retailer_0"]["invalid_action"] is False
    assert infos["factory_0"]["invalid_action"] is True
    assert 0 <= env.model.last_order[3] <= round(2.0 * env.model.mean[3])
    env = continuous(preset="small", invalid_action="raise")
    env.reset(seed=0)
    with pytest.raises(MissingActionError):
        env.step({"retailer_0": np.array([1.0], np.float32)})


def test_mask_in_obs_is_refused():
    with pytest.raises(ConfigError, match="mask_in_obs"):
        continuous(mask_in_obs=True)


@pytest.mark.parametrize("level", [0, 1, 3, 8])
@pytest.mark.parametrize("preset", ["small", "default"])
def test_constant_policy_orders_as_the_discrete_level(preset, level):
    """Continuous a = level * max_order / (order_levels - 1) replays the discrete level."""
    kw = {"preset": preset, "position_cap": 1e6}  # a cap that never binds: no masked actions
    disc, cont = deszoo.make(NAME, **kw), continuous(**kw)
    a = np.array([level * 2.0 / 8], dtype=np.float32)  # max_order 2, 9 levels: exact
    disc.reset(seed=5)
    cont.reset(seed=5)
    while disc.agents:
        d = disc.step({x: level for x in disc.agents})
        c = cont.step({x: a for x in cont.agents})
        assert not any(i["invalid_action"] for i in d[4].values())
        for x in d[0]:
            assert np.array_equal(d[0][x], c[0][x]) and d[1][x] == c[1][x]
            assert d[2][x] == c[2][x] and d[3][x] == c[3][x]
    assert not cont.agents
    assert disc.model.orders_log == cont.model.orders_log
    assert any(any(log) for log in cont.model.orders_log) == (level > 0)


def test_discrete_default_is_unchanged():
    """continuous=False is the default, and its spaces are the Discrete ones."""
    env = deszoo.make(NAME)
    assert env.config["continuous"] is False
    assert env.action_space("retailer_0").n == 9


def test_box_actions_pass_pettingzoos_aec_tests():
    """No action_mask in a Box env's infos: PettingZoo's AEC tests handed [1] to Box.sample,
    which takes no mask, and failed."""
    from pettingzoo.test import api_test, seed_test

    from deszoo.envs import supplychain_v0

    api_test(supplychain_v0.env(preset="small", continuous=True), num_cycles=30)
    seed_test(lambda: supplychain_v0.env(preset="small", continuous=True), num_cycles=10)
    env = continuous(preset="small")
    _, infos = env.reset(seed=0)
    assert "action_mask" not in infos["retailer_0"]


def test_the_bound_of_the_box_is_an_action():
    """0.7 (a float64) is in Box(0, 0.7) as Box.contains says: it was refused, compared with
    the float32 bound 0.69999999 (dict API and vector env alike)."""
    from deszoo.vector import make_vec

    env = continuous(preset="small", max_order=0.7)
    env.reset(seed=0)
    assert env.action_space("retailer_0").contains([0.7])
    env.step({a: np.array([0.7]) for a in env.agents})
    vec = make_vec(NAME, 1, backend="roundrobin", preset="small", continuous=True,
                   max_order=0.7)
    try:
        vec.reset(seed=0)
        vec.step(np.full((vec.num_envs, 1), 0.7))
    finally:
        vec.close()


def test_evaluate_plays_box_actions_as_they_are():
    """deszoo.policies.evaluate (and so deszoo scores) sent Box actions cast to int: a
    constant 0.9 scored as 0.0."""
    from deszoo.policies import evaluate

    def const(x):
        return lambda obs, mask: np.full((len(obs), 1), x, dtype=np.float32)

    kw = dict(preset="small", continuous=True)
    low, mid = (evaluate(const(x), NAME, [10000, 10001], **kw) for x in (0.0, 0.9))
    assert not np.array_equal(low, mid)
    env = continuous(preset="small")  # the dict API gives the same return for 0.9
    env.reset(seed=10000)
    total = 0.0
    while env.agents:
        _, rew, _, _, _ = env.step({a: np.array([0.9], np.float32) for a in env.agents})
        total += sum(rew.values())
    assert mid[0] == pytest.approx(total)
