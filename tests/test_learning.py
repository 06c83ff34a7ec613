"""deszoo.learning: sim-time discounting and the entity policy (needs the ``sb3`` extra)."""

from __future__ import annotations

import numpy as np
import pytest

import deszoo
from deszoo.errors import ConfigError
from deszoo.vector import make_vec, to_sb3

pytest.importorskip("sb3_contrib")
import torch  # noqa: E402
from gymnasium import spaces  # noqa: E402
from sb3_contrib import MaskablePPO  # noqa: E402
from sb3_contrib.common.maskable.buffers import MaskableRolloutBuffer  # noqa: E402

from deszoo.learning import EntityPolicy, SimTimeCallback, SimTimeRolloutBuffer  # noqa: E402


def _legal(rng, mask):
    return (rng.random(mask.shape) * mask).argmax(axis=1)


def test_step_seconds_follow_the_sim_clock_across_resets():
    def build():
        return make_vec("warehouse_v0", 2, backend="roundrobin", preset="small", max_steps=12,
                        autoreset_mode="SameStep", seed=5)
    venv, twin = to_sb3(build()), build()  # the twin, stepped alike, shows the sim clocks
    rng = np.random.default_rng(0)
    try:
        venv.reset()
        _, infos = twin.reset()
        assert (venv.step_seconds == 0).all()
        clock, ended, timed = infos["sim_time"], 0, 0
        for _ in range(40):
            actions = _legal(rng, venv.action_masks())
            venv.step_async(actions)
            _, _, dones, _ = venv.step_wait()
            _, _, _, _, infos = twin.step(actions)
            reset = infos["_final_obs"]
            end = np.where(reset, infos["final_info"]["sim_time"], infos["sim_time"])
            np.testing.assert_allclose(venv.step_seconds, end - clock)
            timed += (venv.step_seconds > 0).any()
            ended += reset.any()
            clock = infos["sim_time"]
        assert ended >= 2 and timed >= 10
    finally:
        venv.close()
        twin.close()


def _buffers(gamma=0.9, lam=0.8, n=6, envs=3, seed=0):
    obs_space = spaces.Box(0, 1, (2,), np.float32)
    act_space = spaces.Discrete(3)
    kw = dict(gamma=gamma, gae_lambda=lam, n_envs=envs, device="cpu")
    plain = MaskableRolloutBuffer(n, obs_space, act_space, **kw)
    timed = SimTimeRolloutBuffer(n, obs_space, act_space, time_scale=2.0, **kw)
    rng = np.random.default_rng(seed)
    rewards = rng.normal(size=(n, envs)).astype(np.float32)
    values = rng.normal(size=(n, envs)).astype(np.float32)
    starts = (rng.random((n, envs)) < 0.2).astype(np.float32)
    for b in (plain, timed):
        b.reset()
        b.rewards[:], b.values[:], b.episode_starts[:] = rewards, values, starts
    return plain, timed, rewards, values, starts


def test_sim_time_gae_is_step_gae_when_every_step_lasts_time_scale():
    plain, timed, *_ = _buffers()
    timed.dts[:] = 2.0
    last, dones = torch.tensor([0.5, -1.0, 2.0]), np.array([0.0, 1.0, 0.0])
    plain.compute_returns_and_advantage(last, dones)
    timed.compute_returns_and_advantage(last, dones)
    np.testing.assert_allclose(timed.advantages, plain.advantages, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(timed.returns, plain.returns, rtol=1e-5, atol=1e-6)


def test_sim_time_gae_discounts_by_simulated_time():
    gamma, lam = 0.9, 0.8
    _, timed, rewards, values, starts = _buffers(gamma, lam)
    rng = np.random.default_rng(1)
    dts = rng.choice([0.0, 1.0, 2.0, 7.5], size=rewards.shape).astype(np.float32)
    timed.dts[:] = dts
    last, dones = np.array([0.5, -1.0, 2.0]), np.array([0.0, 1.0, 0.0])
    timed.compute_returns_and_advantage(torch.tensor(last), dones)
    n = len(rewards)
    want = np.zeros_like(rewards)
    for e in range(rewards.shape[1]):
        acc = 0.0
        for t in reversed(range(n)):
            nv, nd = (last[e], 1 - dones[e]) if t == n - 1 else (values[t + 1, e],
                                                                  1 - starts[t + 1, e])
            g = gamma ** (dts[t, e] / 2.0)  # a step of no simulated time is not discounted
            acc = rewards[t, e] + g * nv * nd - values[t, e] + g * lam * nd * acc
            want[t, e] = acc
    np.testing.assert_allclose(timed.advantages, want, rtol=1e-5, atol=1e-6)


def test_sim_time_buffer_without_the_callback_says_so():
    _, timed, *_ = _buffers()
    with pytest.raises(ConfigError, match="SimTimeCallback"):
        timed.compute_returns_and_advantage(torch.zeros(3), np.zeros(3))
    with pytest.raises(ConfigError, match="time_scale"):
        SimTimeRolloutBuffer(4, spaces.Box(0, 1, (2,)), spaces.Discrete(2), time_scale=0)


def _sb3_env(name="warehouse_v0", sims=2, **kw):
    return to_sb3(make_vec(name, sims, backend="roundrobin", preset="small",
                           autoreset_mode="SameStep", seed=0, **kw))


def test_sim_time_callback_needs_the_sim_time_buffer():
    env = _sb3_env()
    try:
        model = MaskablePPO("MlpPolicy", env, n_steps=8, batch_size=16, seed=0, device="cpu")
        with pytest.raises(ConfigError, match="SimTimeRolloutBuffer"):
            model.learn(16, callback=SimTimeCallback())
    finally:
        env.close()


def test_entity_policy_trains_saves_and_masks(tmp_path):
    env = _sb3_env(max_steps=30)
    head = 9 + 4 + 2  # warehouse_v0: 9 robot features, one per aisle (4), per station (2)
    try:
        model = MaskablePPO(EntityPolicy, env, n_steps=16, batch_size=32, seed=0, device="cpu",
                            policy_kwargs={"entity": (head, 8)},
                            rollout_buffer_class=SimTimeRolloutBuffer,
                            rollout_buffer_kwargs={"time_scale": 10.0})
        model.learn(64, callback=SimTimeCallback())
        assert np.isfinite(model.rollout_buffer.dts).all()
        assert (model.rollout_buffer.dts > 0).any()
        model.save(tmp_path / "m.zip")
    finally:
        env.close()
    loaded = MaskablePPO.load(tmp_path / "m.zip", device="cpu")
    assert isinstance(loaded.policy, EntityPolicy) and loaded.policy.entity == (head, 8)
    rng = np.random.default_rng(0)
    obs = rng.random((64, head + 8 * 7)).astype(np.float32)
    mask = rng.random((64, 9)) < 0.4
    mask[:, 0] = True
    for det in (True, False):
        act = loaded.predict(obs, action_masks=mask, deterministic=det)[0]
        assert mask[np.arange(64), act].all()


def test_entity_policy_reads_the_home_block():
    env = _sb3_env("elevator_v0")  # 6 floors: 8 car features, then 7 per floor
    try:
        model = MaskablePPO(EntityPolicy, env, n_steps=8, batch_size=16, seed=0, device="cpu",
                            policy_kwargs={"entity": (8, 6), "home": 0})
    finally:
        env.close()
    net = model.policy.mlp_extractor
    obs = torch.zeros(3, 8 + 6 * 7)
    obs[:, 0] = torch.tensor([0.0, 0.6, 1.0])  # cars on floors 0, 3 and 5
    blocks = obs[:, 8:].reshape(3, 6, 7)
    for floor in range(6):
        blocks[:, floor] = floor + 1  # mark each floor's block
    g = net.global_input(torch.cat([obs[:, :8], blocks.reshape(3, -1)], 1))
    assert g.shape == (3, 8 + 7)
    assert g[:, 8:].tolist() == [[1.0] * 7, [4.0] * 7, [6.0] * 7]
    with torch.no_grad():
        assert net.forward_actor(g.new_zeros(3, 8 + 42)).shape == (3, 7)


@pytest.mark.parametrize("entity, home, match", [
    ((16, 8), None, "equal blocks"),
    ((15, 7), None, "9 actions"),
    ((15, 8), 20, "home"),
])
def test_entity_policy_rejects_a_wrong_layout(entity, home, match):
    env = _sb3_env()
    try:
        with pytest.raises(ConfigError, match=match):
            MaskablePPO(EntityPolicy, env, n_steps=8, batch_size=16, device="cpu",
                        policy_kwargs={"entity": entity, "home": home})
    finally:
        env.close()


def test_entity_layouts_match_the_scenarios():
    """The layouts train_baselines uses: warehouse (order slots), elevator (floors)."""
    for name, preset, entity in [("warehouse_v0", "default", (19, 8)),
                                 ("warehouse_v1", "default", (19, 8, 2)),
                                 ("elevator_v0", "default", (8, 12))]:
        env = deszoo.make(name, preset=preset)
        dim = env.observation_space(env.possible_agents[0]).shape[0]
        assert entity[0] + entity[1] * 7 == dim
        noops = entity[2] if len(entity) == 3 else 1
        assert env.action_space(env.possible_agents[0]).n == entity[1] + noops


def test_entity_policy_with_two_actions_outside_the_entities():
    """warehouse_v1: 0 wait and 1 go, then the order slots; (G, E) is (G, E, 1)."""
    env = _sb3_env("warehouse_v1", max_steps=30)
    head = 9 + 4 + 2
    try:
        model = MaskablePPO(EntityPolicy, env, n_steps=16, batch_size=32, seed=0, device="cpu",
                            policy_kwargs={"entity": (head, 8, 2)})
        model.learn(32)
        net = model.policy.mlp_extractor
        obs = torch.rand(5, head + 8 * 7)
        with torch.no_grad():
            logits = net.forward_actor(obs)
            slots = net.score(net.pair(torch.cat([
                net.glob(net.global_input(obs)).unsqueeze(1).expand(-1, 8, -1),
                net.ent(torch.cat([obs[:, head:].reshape(5, 8, 7),
                                   net.pos.expand(5, -1, -1)], 2))], 2))).squeeze(2)
        assert logits.shape == (5, 10)
        torch.testing.assert_close(logits[:, 2:], slots)  # action k >= 2 is slot k - 2
        rng = np.random.default_rng(0)
        mask = rng.random((64, 10)) < 0.4
        mask[:, 0] = True
        o = rng.random((64, head + 8 * 7)).astype(np.float32)
        for det in (True, False):
            act = model.predict(o, action_masks=mask, deterministic=det)[0]
            assert mask[np.arange(64), act].all()
        with pytest.raises(ConfigError, match="2 outside the entities"):
            MaskablePPO(EntityPolicy, env, n_steps=8, batch_size=16, device="cpu",
                        policy_kwargs={"entity": (head, 7, 2)})
        with pytest.raises(ConfigError, match="1 outside"):
            MaskablePPO(EntityPolicy, env, n_steps=8, batch_size=16, device="cpu",
                        policy_kwargs={"entity": (head, 8)})
    finally:
        env.close()
    v0 = _sb3_env()
    try:
        nets = []
        for entity in ((head, 8), (head, 8, 1)):
            nets.append(MaskablePPO(EntityPolicy, v0, n_steps=8, batch_size=16, seed=0,
                                    device="cpu", policy_kwargs={"entity": entity}).policy)
    finally:
        v0.close()
    a, b = (n.state_dict() for n in nets)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
