"""Tests every registered scenario: API, seeding, determinism, fuzz, pickling, bad input."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import deszoo
from deszoo.errors import (
    ConfigError,
    InvalidActionError,
    MaskedActionError,
    MissingActionError,
    ResetNeededError,
    UnknownAgentError,
)

ENVS = deszoo.list_envs()


def strict(name: str, **kwargs):
    """The scenario at its smallest preset in strict mode (bad actions raise)."""
    return deszoo.make(name, preset="small", invalid_action="raise", **kwargs)


def small(name: str, **kwargs):
    """The scenario at its smallest preset (every scenario ships one)."""
    return deszoo.make(name, preset="small", **kwargs)


def random_masked(rng: np.random.Generator, infos: dict) -> dict:
    """A uniformly random legal action for each agent, from its mask."""
    return {a: int(rng.choice(np.flatnonzero(i["action_mask"]))) for a, i in infos.items()}


def rollout(env, seed: int, action_seed: int, max_steps: int = 300) -> list:
    """Trajectory of (obs, rewards, terms, truncs, infos) under random masked actions."""
    rng = np.random.default_rng(action_seed)
    obs, infos = env.reset(seed=seed)
    traj = [(obs, infos)]
    for _ in range(max_steps):
        if not env.agents:
            break
        out = env.step(random_masked(rng, {a: infos[a] for a in env.agents}))
        obs, infos = out[0], out[4]
        traj.append(out)
    return traj


def same(a, b) -> bool:
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, np.ndarray):
        return a.dtype == b.dtype and np.array_equal(a, b)
    return type(a) is type(b) and a == b


@pytest.mark.parametrize("name", ENVS)
def test_registry_builds_every_preset(name):
    module = deszoo.env_module(name)
    for preset in module.parallel_env.presets:
        env = deszoo.make(name, preset=preset)
        assert env.metadata["name"] == name
        assert {"small", "default", "large"} <= set(module.parallel_env.presets)
        assert callable(module.heuristic)


@pytest.mark.parametrize("name", ENVS)
def test_spaces_cached_and_flat(name):
    env = small(name)
    for agent in env.possible_agents:
        assert env.observation_space(agent) is env.observation_space(agent)
        assert env.action_space(agent) is env.action_space(agent)
        space = env.observation_space(agent)
        assert space.dtype == np.float32 and len(space.shape) == 1


@pytest.mark.parametrize("name", ENVS)
def test_infos_carry_clock_mask_and_needs_action(name):
    env = small(name)
    obs, infos = env.reset(seed=3)
    rng = np.random.default_rng(0)
    last = 0.0
    for _ in range(50):
        if not env.agents:
            break
        for agent in env.agents:
            info = infos[agent]
            assert info["action_mask"].dtype == np.int8
            assert info["action_mask"].shape == (env.action_space(agent).n,)
            assert info["sim_time"] >= last
            if not info["needs_action"]:
                assert info["action_mask"].tolist() == [1] + [0] * (env.action_space(agent).n - 1)
        last = infos[env.agents[0]]["sim_time"]
        *_, infos = env.step(random_masked(rng, {a: infos[a] for a in env.agents}))


@pytest.mark.parametrize("name", ENVS)
def test_same_seed_same_trajectory(name):
    a = rollout(small(name), seed=11, action_seed=5)
    b = rollout(small(name), seed=11, action_seed=5)
    assert same(a, b)


@pytest.mark.parametrize("name", ENVS)
def test_different_seeds_differ(name):
    a = rollout(small(name), seed=1, action_seed=5, max_steps=40)
    b = rollout(small(name), seed=2, action_seed=5, max_steps=40)
    assert not same(a, b)


@pytest.mark.parametrize("name", ENVS)
def test_reset_seed_none_draws_fresh_entropy(name):
    a = rollout(small(name), seed=None, action_seed=5, max_steps=40)
    b = rollout(small(name), seed=None, action_seed=5, max_steps=40)
    assert not same(a, b)


@pytest.mark.parametrize("name", ENVS)
def test_unseeded_reset_after_seeded_is_reproducible(name):
    def two_episodes():
        env = small(name)
        rollout(env, seed=7, action_seed=1, max_steps=10_000)
        return rollout(env, seed=None, action_seed=2, max_steps=30)

    assert same(two_episodes(), two_episodes())


@pytest.mark.parametrize("name", ENVS)
def test_pickle_round_trip_gives_same_trajectory(name):
    env = small(name)
    rollout(env, seed=4, action_seed=0, max_steps=5)  # mid-episode state is not carried
    clone = pickle.loads(pickle.dumps(env))
    assert type(clone) is type(env) and clone.config == env.config
    with pytest.raises(ResetNeededError):
        clone.step({})
    assert same(rollout(env, seed=9, action_seed=3), rollout(clone, seed=9, action_seed=3))


@pytest.mark.parametrize("name", ENVS)
def test_episode_ends_with_no_agents(name):
    env = small(name)
    rollout(env, seed=0, action_seed=0, max_steps=100_000)
    assert env.agents == []
    with pytest.raises(ResetNeededError, match="reset"):
        env.step({})


@pytest.mark.parametrize("name", ENVS)
@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), action_seed=st.integers(0, 2**32 - 1))
def test_fuzz_random_masked_episodes(name, seed, action_seed):
    env = small(name)
    rng = np.random.default_rng(action_seed)
    obs, infos = env.reset(seed=seed)
    for _ in range(5000):
        for agent, o in obs.items():
            assert not np.isnan(o).any(), f"NaN in {agent}'s observation"
            assert env.observation_space(agent).contains(o), f"{agent}: {o} out of space"
        if not env.agents:
            break
        obs, rewards, _, _, infos = env.step(random_masked(rng, infos))
        assert all(np.isfinite(r) for r in rewards.values())
        infos = {a: infos[a] for a in env.agents}
    assert env.agents == [], "episode did not end within 5000 steps"


# ---- bad input -------------------------------------------------------------------------


def deciding(env, infos) -> tuple[str, list[str]]:
    """Step with random legal actions until an agent needs an action; return it."""
    rng = np.random.default_rng(0)
    for _ in range(1000):
        need = [a for a in env.agents if infos[a]["needs_action"]]
        if need:
            return need[0], need
        *_, infos = env.step(random_masked(rng, {a: infos[a] for a in env.agents}))
    raise AssertionError("no agent reached a decision point")


@pytest.mark.parametrize("name", ENVS)
def test_unknown_constructor_argument(name):
    with pytest.raises(ConfigError, match="no_such_arg"):
        deszoo.make(name, no_such_arg=1)
    with pytest.raises(ConfigError, match="preset"):
        deszoo.make(name, preset="gigantic")
    with pytest.raises(ConfigError, match="render_mode"):
        deszoo.make(name, render_mode="rgb_array_nope")


def test_unknown_scenario():
    with pytest.raises(ConfigError, match="registered"):
        deszoo.make("nope_v0")


@pytest.mark.parametrize("name", ENVS)
def test_action_for_unknown_agent(name):
    env = small(name)
    _, infos = env.reset(seed=0)
    actions = {a: int(np.flatnonzero(infos[a]["action_mask"])[0]) for a in env.agents}
    actions["nobody_42"] = 0
    with pytest.raises(UnknownAgentError, match="nobody_42"):
        env.step(actions)


@pytest.mark.parametrize("name", ENVS)
def test_missing_action_for_deciding_agent(name):
    env = strict(name)
    _, infos = env.reset(seed=0)
    agent, need = deciding(env, infos)
    with pytest.raises(MissingActionError, match=agent):
        env.step({})


@pytest.mark.parametrize("name", ENVS)
@pytest.mark.parametrize("mode", ["random", "raise"])
def test_action_outside_space(name, mode):
    env = small(name, invalid_action=mode)
    _, infos = env.reset(seed=0)
    agent, _ = deciding(env, infos)
    n = env.action_space(agent).n
    for bad in (n, -1, 1.5, "1", None, np.array([1, 2])):
        with pytest.raises(InvalidActionError, match=agent):
            env.step({agent: bad})


@pytest.mark.parametrize("name", ENVS)
def test_action_forbidden_by_mask_raises_in_strict_mode(name):
    env = strict(name)
    obs, infos = env.reset(seed=0)
    agent, _ = deciding(env, infos)
    state = rollout_state(env)
    legal = {a: int(np.flatnonzero(infos[a]["action_mask"])[0]) for a in env.agents}
    idle = [a for a in env.agents if not infos[a]["needs_action"]]
    if idle:
        with pytest.raises(MaskedActionError, match=rf"{idle[0]}.*valid actions"):
            env.step({**legal, idle[0]: 1})
    forbidden = np.flatnonzero(infos[agent]["action_mask"] == 0)
    if len(forbidden):
        with pytest.raises(MaskedActionError, match=rf"{agent}.*{forbidden[0]}"):
            env.step({**legal, agent: int(forbidden[0])})
    assert idle or len(forbidden), "scenario has no forbidden action to test"
    assert rollout_state(env) == state, "a rejected step must not change the simulation"


def rollout_state(env):
    return (env.now, env.num_steps, env.num_events, tuple(env.agents))


# ---- the invalid-action contract (default mode "random") --------------------------------


def masked_out_first(infos: dict) -> dict:
    """Mask-unaware greedy policy: a forbidden action wherever one exists, else action 0."""
    actions = {}
    for agent, info in infos.items():
        forbidden = np.flatnonzero(info["action_mask"] == 0)
        actions[agent] = int(forbidden[0]) if len(forbidden) else 0
    return actions


@pytest.mark.parametrize("name", ENVS)
def test_masked_out_actions_never_freeze_the_clock(name):
    # The repro: a deterministic policy that always sends a forbidden action.
    env = small(name)
    _, infos = env.reset(seed=0)
    flagged = 0
    for _ in range(20_000):
        if not env.agents:
            break
        acts = masked_out_first({a: infos[a] for a in env.agents})
        deciding_bad = [
            a for a in env.agents
            if infos[a]["needs_action"] and infos[a]["action_mask"][acts[a]] == 0
        ]
        before = env.now
        _, _, _, _, infos = env.step(acts)
        for a in deciding_bad:
            assert infos[a]["invalid_action"] is True, a
        flagged += len(deciding_bad)
        assert env.now >= before
    assert env.agents == [], "the episode did not end: the clock is frozen"
    assert flagged > 0, "the policy never sent a forbidden action to a deciding agent"


@pytest.mark.parametrize("name", ENVS)
def test_invalid_action_keys_on_every_step_with_fixed_types(name):
    env = small(name)
    _, infos = env.reset(seed=1)
    counts = {a: 0 for a in env.possible_agents}
    rng = np.random.default_rng(0)
    for _ in range(200):
        for a, info in infos.items():
            assert type(info["invalid_action"]) is bool and type(info["invalid_count"]) is int
            assert type(info["needs_action"]) is bool and type(info["sim_time"]) is float
            assert info["invalid_count"] == counts[a] + info["invalid_action"]
            counts[a] = info["invalid_count"]
        if not env.agents:
            break
        acts = {a: int(rng.integers(env.action_space(a).n)) for a in env.agents}
        *_, infos = env.step(acts)
    assert sum(counts.values()) > 0


@pytest.mark.parametrize("name", ENVS)
def test_fallback_is_a_legal_action_charged_the_penalty(name):
    def at_decision():
        env = small(name, invalid_penalty=5.0)
        _, infos = env.reset(seed=0)
        agent, _ = deciding(env, infos)
        first_legal = {a: int(np.flatnonzero(env.mask_buf[env.possible_agents.index(a)])[0])
                       for a in env.agents}
        return env, agent, first_legal

    env, agent, legal = at_decision()
    mask = env.mask_buf[env.possible_agents.index(agent)].copy()
    forbidden = np.flatnonzero(mask == 0)
    if not len(forbidden):
        pytest.skip("this decision has no forbidden action")
    _, rew, _, _, infos = env.step({**legal, agent: int(forbidden[0])})
    assert infos[agent]["invalid_action"] and infos[agent]["invalid_count"] == 1
    assert not any(infos[a]["invalid_action"] for a in infos if a != agent)
    # The same step with each legal action instead: one of them is what the env did.
    matches = 0
    for choice in np.flatnonzero(mask):
        probe, _, _ = at_decision()
        _, prew, _, _, _ = probe.step({**legal, agent: int(choice)})
        if np.array_equal(probe.obs_buf, env.obs_buf) and probe.now == env.now:
            matches += 1
            assert prew[agent] - 5.0 == pytest.approx(rew[agent], abs=1e-4)
    assert matches >= 1


@pytest.mark.parametrize("name", ENVS)
def test_legal_play_is_the_same_in_both_modes(name):
    assert same(rollout(small(name), 3, 4), rollout(strict(name), 3, 4))


@pytest.mark.parametrize("name", ENVS)
def test_fallback_is_reproducible(name):
    def run():
        env = small(name)
        rng = np.random.default_rng(9)
        obs, infos = env.reset(seed=5)
        out = []
        for _ in range(100):
            if not env.agents:
                break
            out.append(env.step({a: int(rng.integers(env.action_space(a).n))
                                 for a in env.agents}))
        return out

    assert same(run(), run())


@pytest.mark.parametrize("name", ENVS)
def test_actions_of_agents_not_deciding_are_ignored(name):
    env, ref = small(name), small(name)
    _, infos = env.reset(seed=2)
    ref.reset(seed=2)
    rng = np.random.default_rng(1)
    for _ in range(60):
        if not env.agents:
            break
        legal = random_masked(rng, {a: infos[a] for a in env.agents})
        noisy = {a: (act if infos[a]["needs_action"] else env.action_space(a).n - 1)
                 for a, act in legal.items()}
        out, ref_out = env.step(noisy), ref.step(legal)
        assert same(out, ref_out)
        infos = out[4]
        assert not any(i["invalid_action"] for i in infos.values())


@pytest.mark.parametrize("name", ENVS)
def test_missing_action_is_taken_as_invalid(name):
    env = small(name)
    _, infos = env.reset(seed=0)
    agent, need = deciding(env, infos)
    *_, infos = env.step({})
    for a in need:
        assert infos[a]["invalid_action"] is True


def test_noop_mode_is_gone_with_a_pointer():
    with pytest.raises(ConfigError, match="froze simulated time.*'random'"):
        deszoo.make("jobshop_v0", invalid_action="noop")
    with pytest.raises(ConfigError, match="invalid_penalty"):
        deszoo.make("jobshop_v0", invalid_penalty=-1.0)


@pytest.mark.parametrize("name", ENVS)
def test_render_ansi(name):
    env = deszoo.make(name, preset="small", render_mode="ansi")
    env.reset(seed=0)
    text = env.render()
    assert isinstance(text, str) and text.strip()
    assert deszoo.make(name, preset="small").render() is None


@pytest.mark.parametrize("name", ENVS)
def test_every_parameter_rejects_a_value_of_the_wrong_type(name):
    params = deszoo.env_module(name).parallel_env.all_params()
    for key, param in params.items():
        value = param.default
        if value is None or isinstance(value, str):
            continue
        with pytest.raises(ConfigError, match=key):
            deszoo.make(name, preset="small", **{key: "seven"})


def test_elevator_v1_rewards_sum_to_the_passengers_journey_time():
    """v1's shared reward: over an episode the cars' rewards sum to minus every passenger's
    wait + ride in minutes, and every car gets the same (v0: each car its own riders)."""
    for name in ("elevator_v0", "elevator_v1"):
        env = deszoo.make(name, preset="small")
        heuristic = deszoo.env_module(name).heuristic
        obs, infos = env.reset(seed=2)
        total = dict.fromkeys(env.possible_agents, 0.0)
        while env.agents:
            obs, rew, _, _, infos = env.step(
                {a: heuristic(obs[a], infos[a]["action_mask"]) for a in env.agents})
            for a, r in rew.items():
                total[a] += float(r)
        journey = env.model.total_journey / 60.0
        assert env.model.delivered == env.model.arrived > 0
        shared = len({round(v, 3) for v in total.values()}) == 1
        if name == "elevator_v1":
            assert shared and sum(total.values()) == pytest.approx(-journey, rel=1e-4)
        else:
            assert not shared
        env.close()


def test_warehouse_v1_waits_and_goes_as_two_actions():
    """v1: 0 waits keeping a partial batch (and decides again wait_time later), 1 goes
    (legal only with a partial batch); v0's no-op started a partial batch's tour."""
    env = deszoo.make("warehouse_v1", preset="small", invalid_action="raise")
    _, infos = env.reset(seed=1)
    mask = infos["robot_0"]["action_mask"]
    assert env.action_space("robot_0").n == env.p.order_slots + 2
    assert mask[0] == 1 and mask[1] == 0 and mask[2] == 1  # empty batch: no go
    with pytest.raises(InvalidActionError, match="robot_0"):
        env.step({"robot_0": 1, **{a: 0 for a in env.agents[1:]}})
    env.reset(seed=1)
    env.step({"robot_0": 2, **{a: 0 for a in env.agents[1:]}})  # one order into the batch
    model = env.model
    assert len(model.batch[0]) == 1
    _, _, _, _, infos = env.step({a: 0 for a in env.agents})  # robot_0 waits with it
    assert len(model.batch[0]) == 1 and not model.busy[0]
    while not infos["robot_0"]["needs_action"]:
        _, _, _, _, infos = env.step({a: 0 for a in env.agents})
    assert infos["robot_0"]["action_mask"][1] == 1 and len(model.batch[0]) == 1
    env.step({"robot_0": 1, **{a: 0 for a in env.agents[1:]}})  # go
    assert model.busy[0]
    env.close()


def test_elevator_warns_when_max_time_cuts_the_arrivals():
    """A horizon longer than max_time truncates every episode mid-arrivals: said, with the
    max_time to give (max_time's default is 3 x the default horizon, not 3 x the user's)."""
    import warnings

    import deszoo

    with pytest.warns(UserWarning, match=r"max_time=3600 is shorter than horizon=10000.*"
                                         r"give max_time=30000"):
        deszoo.make("elevator_v2", preset="small", horizon=10000.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        deszoo.make("elevator_v2", preset="small", horizon=10000.0, max_time=30000.0)


def test_warehouse_warns_when_the_orders_arrive_past_max_time():
    """More orders (or a lower utilization) than max_time has room for: every episode is
    truncated before the last order arrives. Said once per env, with a max_time to give."""
    import warnings

    import deszoo

    env = deszoo.make("warehouse_v2", preset="small", n_orders=600)
    with pytest.warns(UserWarning, match=r"orders arrive over about \d+ s .* longer than "
                                         r"max_time=1200: .* give max_time="):
        env.reset(seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        env.reset(seed=1)  # once per env
        deszoo.make("warehouse_v2", preset="small").reset(seed=0)
