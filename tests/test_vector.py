"""Shared suite of the vector backends: interface, seeding, autoreset, dead agents, async."""

from __future__ import annotations

import collections
import functools
import re
import sys

import numpy as np
import pytest
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, VectorEnv

import deszoo
from conftest import HAS_RAY
from deszoo.errors import ConfigError, InvalidActionError, ResetNeededError, SubEnvError
from deszoo.rollouts import assert_same_rollouts, legal_last, legal_random, rollout
from deszoo.vector import make_vec
from deszoo.vector.base import State
from devkit.toyenv import ToyEnv

# name, make_vec arguments: every backend, uneven splits, both start methods.
BACKENDS = {
    "roundrobin": dict(backend="roundrobin"),
    "supersuit0": dict(backend="supersuit", num_workers=0),
    "supersuit2": dict(backend="supersuit", num_workers=2),
    "shm1": dict(backend="shm", num_workers=1),
    "shm2": dict(backend="shm", num_workers=2),
    "shm3": dict(backend="shm", num_workers=3),
}
if HAS_RAY:
    BACKENDS["ray2"] = dict(backend="ray", num_workers=2)
SPAWN = {
    "shm-spawn": dict(backend="shm", num_workers=2, start_method="spawn"),
    "supersuit-spawn": dict(backend="supersuit", num_workers=2, start_method="spawn"),
}


def scenario_kwargs(name: str) -> dict:
    """Small and short: ``preset="small"`` where it exists, episodes of 25 steps at most."""
    module = deszoo.env_module(name)
    kwargs = {"max_steps": 25}
    if "small" in module.parallel_env.presets:
        kwargs["preset"] = "small"
    return kwargs


def toy(**kwargs):
    return functools.partial(ToyEnv, **kwargs)


def vec_of(env, num_envs: int, backend: dict, **kwargs):
    """make_vec with a backend's options, its workers capped at one per env."""
    opts = dict(backend)
    if opts.get("num_workers", 0) > num_envs:
        opts["num_workers"] = num_envs
    return make_vec(env, num_envs, **opts, **kwargs)


@pytest.fixture(params=sorted(BACKENDS))
def backend(request, backend_opts):
    return backend_opts(BACKENDS[request.param])


@pytest.mark.parametrize("scenario", deszoo.list_envs())
@pytest.mark.parametrize("mode", ["NextStep", "SameStep"])
def test_backends_bit_identical(scenario, mode, backend_opts):
    """Same seed, same actions: every backend gives the same bytes, across autoresets."""
    kwargs = scenario_kwargs(scenario)
    runs = {}
    for name, opts in BACKENDS.items():
        vec = make_vec(scenario, 5, seed=11, autoreset_mode=mode, **backend_opts(opts),
                       **kwargs)
        try:
            runs[name] = rollout(vec, 60)
        finally:
            vec.close()
    ref = runs.pop("roundrobin")
    ends = sum(int((s["term"] | s["trunc"]).any()) for s in ref[1:])
    assert ends > 0, "the rollout should cross at least one autoreset"
    for name, run in runs.items():
        assert_same_rollouts(ref, run, f"{scenario} {mode} roundrobin vs {name}")


class RebindingToy(ToyEnv):
    """A ToyEnv that hands back new reward and observation arrays after each step instead
    of writing in place (allowed: a group copies a rebound buffer back into its rows)."""

    def step_arrays(self, *args):
        super().step_arrays(*args)
        self.rew_buf = self.rew_buf.copy()
        self.obs_buf = self.obs_buf.copy()


def test_a_rebound_buffer_still_reaches_the_batch(backend):
    """An env that rebinds its arrays gives the same rollouts as one that writes in place."""
    ref = make_vec(toy(), 4, backend="roundrobin", seed=3)
    vec = vec_of(RebindingToy, 4, backend, seed=3)
    try:
        assert_same_rollouts(rollout(ref, 30), rollout(vec, 30), "rebinding vs in place")
    finally:
        vec.close()
        ref.close()


@pytest.mark.parametrize("name", sorted(SPAWN))
def test_spawn_matches_fork(name):
    """Under spawn the workers rebuild the envs from pickles and agree with fork."""
    ref_vec = make_vec("jobshop_v0", 3, backend="roundrobin", seed=5, preset="small")
    vec = make_vec("jobshop_v0", 3, seed=5, preset="small", **SPAWN[name])
    try:
        assert_same_rollouts(rollout(ref_vec, 40), rollout(vec, 40), name)
    finally:
        vec.close()
        ref_vec.close()


def test_spawn_with_lambda_factory():
    """A lambda factory works under spawn (pickled with cloudpickle)."""
    vec = make_vec(lambda: ToyEnv(horizon=3.0), 2, backend="shm", num_workers=2,
                   start_method="spawn")
    try:
        obs, _ = vec.reset()
        assert obs.shape == (6, 3)
    finally:
        vec.close()


def test_interface(backend):
    """Gymnasium VectorEnv over flattened agents: spaces, shapes, dtypes, infos."""
    vec = vec_of("jobshop_v0", 3, backend, seed=0, preset="small")
    try:
        n = len(deszoo.make("jobshop_v0", preset="small").possible_agents)
        assert isinstance(vec, VectorEnv)
        assert vec.num_envs == 3 * n and vec.num_sims == 3 and vec.agents_per_sim == n
        assert isinstance(vec.single_observation_space, spaces.Box)
        assert isinstance(vec.single_action_space, spaces.Discrete)
        assert vec.observation_space.shape == (3 * n, vec.single_observation_space.shape[0])
        assert vec.metadata["autoreset_mode"] is AutoresetMode.NEXT_STEP
        obs, infos = vec.reset()
        assert obs.shape == vec.observation_space.shape and obs.dtype == np.float32
        mask = infos["action_mask"]
        assert mask.shape == (3 * n, vec.single_action_space.n) and mask.dtype == np.int8
        assert infos["needs_action"].dtype == bool and infos["needs_action"].shape == (3 * n,)
        assert infos["needs_action"].any()
        assert infos["live"].all()
        obs, rew, term, trunc, infos = vec.step(legal_last(mask))
        assert rew.shape == (3 * n,) and rew.dtype == np.float32
        assert term.dtype == bool and trunc.dtype == bool
        assert infos["sim_time"].shape == (3 * n,)
        assert not infos["restarted"].any()
        assert (vec.num_events() > 0).all()
        assert vec.observation_space.contains(obs)
    finally:
        vec.close()


def test_env_i_gets_seed_plus_i(backend):
    """Env ``i`` of ``reset(seed=s)`` runs exactly as a lone env seeded ``s + i``."""
    vec = vec_of(toy(), 4, backend)
    single = [make_vec(toy(), 1, backend="roundrobin") for _ in range(4)]
    try:
        got = rollout(vec, 20, seed=100, policy="last")
        for i, one in enumerate(single):
            alone = rollout(one, 20, seed=100 + i, policy="last")
            rows = slice(3 * i, 3 * i + 3)
            mine = [{k: v[rows] for k, v in step.items()} for step in got]
            assert_same_rollouts(alone, mine, f"env {i}")
    finally:
        vec.close()
        for one in single:
            one.close()


def test_supersuit_upstream_seed_bug_is_fixed():
    """Regression: SuperSuit 3.11 seeds 4 envs on 2 CPUs 100, 101, 101, 102; we give 100..103.

    The raw ``concat_vec_envs_v1`` is run alongside to show the bug is real (skipped once
    SuperSuit fixes it upstream).
    """
    from supersuit import concat_vec_envs_v1

    from deszoo.vector.supersuit_backend import AgentVecEnv

    lone = []
    for s in range(100, 104):
        env = ToyEnv()
        env.reset_arrays(s)
        lone.append(env.obs_buf.copy())
    assert not np.array_equal(lone[1], lone[2])
    ours = make_vec(toy(), 4, backend="supersuit", num_workers=2)
    try:
        obs, _ = ours.reset(seed=100)
        for i in range(4):
            np.testing.assert_array_equal(obs[3 * i : 3 * i + 3], lone[i])
    finally:
        ours.close()
    spec_vec = make_vec(toy(), 1, backend="roundrobin")
    raw = concat_vec_envs_v1(
        AgentVecEnv(spec_vec.sim_spec.factory, 0, spec_vec.layout, False), 4, num_cpus=2,
        base_class="gymnasium",
    )
    try:
        raw_obs, _ = raw.reset(seed=100)
    finally:
        raw.close()  # SuperSuit's own close, which waits out its join timeout
        spec_vec.close()
    if not np.array_equal(raw_obs[3:6], raw_obs[6:9]):
        pytest.skip("SuperSuit no longer seeds two envs alike; the workaround can go")
    np.testing.assert_array_equal(raw_obs[6:9], lone[1])  # env 2 got seed 101, as env 1


def test_reset_seeds_and_reproducible_autoresets(backend):
    """make_vec(seed=s) seeds the first reset; later episodes follow each env's own stream."""
    a = vec_of(toy(), 3, backend, seed=7)
    b = vec_of(toy(), 3, backend, seed=None)
    try:
        first = rollout(a, 40)
        again = rollout(b, 40, seed=7)
        assert_same_rollouts(first, again, "seed=7 at make_vec vs at reset")
        # reset() without a seed continues the envs' seed sequences: a new episode, but
        # the same one every time.
        nxt_a = rollout(a, 5)
        nxt_b = rollout(b, 5)
        assert_same_rollouts(nxt_a, nxt_b, "unseeded reset after a seeded one")
        assert nxt_a[0]["obs"].tobytes() != first[0]["obs"].tobytes()
    finally:
        a.close()
        b.close()


def test_next_step_autoreset(backend):
    """The step after term/trunc resets the env: reward 0, no flags, fresh obs, action ignored."""
    vec = vec_of(toy(), 2, backend, seed=3)
    lone = ToyEnv()
    try:
        obs, infos = vec.reset()
        lone.reset_arrays(3)
        done_step = None
        for t in range(100):
            acts = legal_last(infos["action_mask"])
            obs, rew, term, trunc, infos = vec.step(acts)
            lone.step_arrays(acts[:3])
            if (term[:3] | trunc[:3]).any() and not infos["live"][:3].any():
                done_step = t  # env 0's episode is over (not just one agent leaving)
                break
        assert done_step is not None
        assert lone.episode_over
        assert (infos["action_mask"][:3] == [1, 0, 0]).all()
        # The reset step: any in-range actions are ignored for the finished env.
        acts = legal_last(infos["action_mask"])
        acts[:3] = 2
        obs, rew, term, trunc, infos = vec.step(acts)
        lone.reset_arrays(None)
        np.testing.assert_array_equal(obs[:3], lone.obs_buf)
        np.testing.assert_array_equal(infos["action_mask"][:3], lone.mask_buf)
        assert (rew[:3] == 0).all() and not term[:3].any() and not trunc[:3].any()
        assert infos["live"][:3].all()
    finally:
        vec.close()


def test_same_step_autoreset_matches_next_step(backend):
    """SameStep returns the next episode's first obs at once and the final obs in infos."""
    nxt = vec_of(toy(), 2, backend, seed=4)
    same = vec_of(toy(), 2, backend, seed=4, autoreset_mode="SameStep")
    try:
        assert same.metadata["autoreset_mode"] is AutoresetMode.SAME_STEP
        o1, i1 = nxt.reset()
        o2, i2 = same.reset()
        seen_final = False
        for _ in range(40):
            a1, a2 = legal_last(i1["action_mask"]), legal_last(i2["action_mask"])
            np.testing.assert_array_equal(a1[:3], a2[:3])
            o1, r1, t1, u1, i1 = nxt.step(a1)
            o2, r2, t2, u2, i2 = same.step(a2)
            np.testing.assert_array_equal(r1[:3], r2[:3])
            if i2["_final_obs"][:3].all():
                seen_final = True
                np.testing.assert_array_equal(i2["final_obs"][:3], o1[:3])
                assert (t1[:3] | u1[:3]).any()
                o1, _, _, _, i1 = nxt.step(legal_last(i1["action_mask"]))  # its reset step
                np.testing.assert_array_equal(o1[:3], o2[:3])
                break
            np.testing.assert_array_equal(o1[:3], o2[:3])
        assert seen_final
    finally:
        nxt.close()
        same.close()


def test_dead_agents_keep_the_batch_shape(backend):
    """An agent that leaves: term once, then zero obs, no-op mask, live False, no reward."""
    vec = vec_of(toy(black_death=False), 2, backend, seed=1)  # PettingZoo's native leaving
    try:
        obs, infos = vec.reset()
        left, checked = False, 0
        for _ in range(60):
            obs, rew, term, trunc, infos = vec.step(legal_last(infos["action_mask"]))
            assert obs.shape == (6, 3)
            if term[2] and infos["live"][:2].any():
                left = True  # agent toy_2 of env 0 left while the others go on
                assert not infos["live"][2]
                continue
            if not infos["live"][:3].any():  # env 0's episode is over
                if left:
                    break
                continue
            if left:
                assert not infos["live"][2] and not infos["needs_action"][2]
                assert (obs[2] == 0).all() and rew[2] == 0 and not term[2] and not trunc[2]
                np.testing.assert_array_equal(infos["action_mask"][2], [1, 0, 0])
                checked += 1
        assert left and checked
    finally:
        vec.close()


def test_async_shm_matches_sync():
    """send/recv with batch_size < num_envs: each env's own trajectory is unchanged."""
    ref = make_vec(toy(), 4, backend="roundrobin", seed=9)
    vec = make_vec(toy(), 4, backend="shm", num_workers=2, batch_size=2, seed=9)
    try:
        per_env = {i: [] for i in range(4)}
        obs, infos = ref.reset()
        ref_steps = [(obs.copy(), None)]
        for _ in range(15):
            obs, rew, *_, infos = ref.step(legal_last(infos["action_mask"]))
            ref_steps.append((obs.copy(), rew.copy()))
        vec.async_reset()
        for _ in range(400):  # whichever worker is ready first: some envs run ahead
            if min(len(v) for v in per_env.values()) >= 16:
                break
            obs, rew, term, trunc, infos = vec.recv()
            rows = infos["env_id"]
            assert obs.shape == (6, 3) and rows.shape == (6,)
            for j in range(0, 6, 3):
                per_env[rows[j] // 3].append(obs[j : j + 3].copy())
            vec.send(legal_last(infos["action_mask"]), rows)
        for i in range(4):
            got = per_env[i][:16]
            assert len(got) == 16
            for t, o in enumerate(got):
                np.testing.assert_array_equal(o, ref_steps[t][0][3 * i : 3 * i + 3])
    finally:
        vec.close()
        ref.close()


def test_async_api_misuse():
    vec = make_vec(toy(), 4, backend="shm", num_workers=2, batch_size=2)
    try:
        with pytest.raises(ConfigError):
            vec.reset()
            vec.step(np.ones(12, dtype=np.int64))
        vec.async_reset()
        _, _, _, _, infos = vec.recv()
        with pytest.raises(deszoo.errors.VectorEnvError):
            vec.recv()
        with pytest.raises(InvalidActionError):
            vec.send(np.ones(12, dtype=np.int64))
        vec.send(legal_last(infos["action_mask"]))
    finally:
        vec.close()
    with pytest.raises(ConfigError):
        make_vec(toy(), 5, backend="shm", num_workers=2, batch_size=2)


@pytest.mark.parametrize("backend", ["roundrobin", "shm"])
def test_sync_step_between_async_reset_recv_and_send_is_refused(backend):
    """Sync mode takes send/recv too; a step() while a reset or step is in flight (SENT) or
    a recv()'s batch waits for its send() (RECEIVED) is refused, as Gymnasium refuses a
    step with a call pending. It was accepted: after async_reset() shm returned the reset as
    the step (its actions dropped); after recv() the batch's replies stayed in the pool, so
    the next get_attr() returned None per env and left the workers busy, and the step after
    it was lost (shm: a divergent trajectory)."""
    opts = {"num_workers": 2} if backend == "shm" else {}
    vec = make_vec("jobshop_v0", 4, backend=backend, seed=0, preset="small", **opts)
    ref = make_vec("jobshop_v0", 4, backend="roundrobin", seed=0, preset="small")
    try:
        vec.async_reset()
        _, infos = ref.reset()
        acts = legal_last(infos["action_mask"])
        with pytest.raises(deszoo.errors.AlreadyPendingCallError, match="recv"):
            vec.step(acts)
        assert vec.state is State.SENT
        _, _, _, _, infos = vec.recv()
        with pytest.raises(deszoo.errors.AlreadyPendingCallError, match="send"):
            vec.step(acts)
        assert vec.state is State.RECEIVED
        vec.send(acts)
        obs, *_ = vec.recv()
        ref_obs, *_, infos = ref.step(acts)
        np.testing.assert_array_equal(obs, ref_obs)
        vec.send(legal_last(infos["action_mask"]))
        vec.reset(seed=0)  # drops the step in flight: READY, step() as usual
        assert vec.get_attr("possible_agents") == ref.get_attr("possible_agents")
        assert not any(w.busy for w in vec.pool.workers) and not vec.pool.replies
        _, infos = ref.reset(seed=0)
        acts = legal_last(infos["action_mask"])
        np.testing.assert_array_equal(vec.step(acts)[0], ref.step(acts)[0])
    finally:
        vec.close()
        ref.close()


def test_send_names_the_row_and_env_of_a_bad_action():
    """An out-of-range action given to send() names its row in the full batch and its env
    (infos["env_id"]), not its index in the recv()'s batch (row 11, env 3 was "row 5 (env
    1)")."""
    vec = make_vec("jobshop_v0", 4, backend="shm", num_workers=2, batch_size=2, seed=0,
                   preset="small")
    n = vec.agents_per_sim
    try:
        vec.async_reset()
        for _ in range(20):
            _, _, _, _, infos = vec.recv()
            if infos["env_id"][0] == 2 * n:  # worker 1's batch: envs 2 and 3
                break
            vec.send(legal_last(infos["action_mask"]))
        assert infos["env_id"][0] == 2 * n
        acts = legal_last(infos["action_mask"])
        acts[-1] = 99
        with pytest.raises(InvalidActionError, match=rf"^row {4 * n - 1} \(env 3, agent "):
            vec.send(acts)
    finally:
        vec.close()


def test_messages_name_num_sims():
    """num_workers and batch_size are checked against num_sims (simulations), not the rows
    that num_envs counts; their messages said num_envs."""
    with pytest.raises(ConfigError, match=r"num_workers=3 is more than num_sims=2"):
        make_vec(toy(), 2, backend="shm", num_workers=3)
    vec = make_vec(toy(), 4, backend="shm", num_workers=2, batch_size=2)
    try:
        vec.reset()
        with pytest.raises(ConfigError, match=r"batch_size == num_sims"):
            vec.step(np.ones(vec.num_envs, dtype=np.int64))
    finally:
        vec.close()


def test_disabled_autoreset_needs_sync_mode():
    """autoreset_mode="Disabled" with async mode is refused: send() stepped ended envs and
    the workers reset them at once (NextStep, silently), and a partial reset() drops every
    step in flight, leaving only async_reset(), which resets every env."""
    with pytest.raises(ConfigError, match="Disabled.*batch_size"):
        make_vec(toy(), 4, backend="shm", num_workers=2, batch_size=2,
                 autoreset_mode="Disabled")
    make_vec(toy(), 4, backend="roundrobin", batch_size=4, autoreset_mode="Disabled").close()


@pytest.mark.parametrize("backend", ["supersuit", "shm"])
def test_async_call_drops_steps_in_flight(backend):
    """A call in async mode finishes the steps in flight: READY, and recv() says why."""
    vec = make_vec(toy(), 4, backend=backend, batch_size=2, num_workers=2)
    try:
        vec.async_reset(seed=0)
        _, _, _, _, infos = vec.recv()
        vec.send(legal_last(infos["action_mask"]), infos["env_id"])
        assert vec.state is State.SENT
        assert len(vec.get_attr("possible_agents")) == 4
        assert vec.state is State.READY and not any(w.busy for w in vec.pool.workers)
        with pytest.raises(deszoo.errors.NoAsyncCallError):
            vec.recv()
        vec.async_reset(seed=0)
        assert vec.recv()[0].shape == (6, 3)
    finally:
        vec.close()


@pytest.mark.parametrize(
    "bad",
    [
        np.ones(5, dtype=np.int64),  # wrong length
        np.ones((6, 1), dtype=np.int64),  # wrong shape
        np.ones(6, dtype=np.float32),  # wrong dtype
        np.ones(6, dtype=bool),
        np.full(6, 3, dtype=np.int64),  # out of range
        np.full(6, -1, dtype=np.int64),
        [1.5] * 6,
    ],
    ids=["len", "shape", "float", "bool", "high", "negative", "list"],
)
def test_bad_actions_raise_before_sending(backend, bad):
    """Wrong shape, dtype or range: InvalidActionError, and the envs did not move."""
    vec = vec_of(toy(), 2, backend, seed=2)
    ref = make_vec(toy(), 2, seed=2, backend="roundrobin")
    try:
        obs, infos = vec.reset()
        ref.reset()
        with pytest.raises(InvalidActionError):
            vec.step(bad)
        acts = legal_random(infos["action_mask"], np.random.default_rng(0))
        assert_same_rollouts([{"o": vec.step(acts)[0]}], [{"o": ref.step(acts)[0]}], "after")
    finally:
        vec.close()
        ref.close()


def test_masked_action_is_flagged_and_replaced(backend):
    """Default contract: a forbidden action becomes a legal one, flagged in that row only."""
    vec = vec_of(toy(), 2, backend, seed=2)
    try:
        obs, infos = vec.reset()
        assert infos["invalid_action"].dtype == bool and not infos["invalid_action"].any()
        acts = legal_last(infos["action_mask"])
        acts[4] = 0  # env 1, agent 1 is deciding: 0 is masked out
        assert infos["needs_action"][4]
        acts[0] = 2  # env 0, agent 0 is not deciding here (or is): either way no error
        obs, rew, term, trunc, infos = vec.step(acts)
        flagged = np.flatnonzero(infos["invalid_action"])
        assert 4 in flagged and set(flagged) <= {0, 4}
        assert infos["invalid_count"][4] == 1 and infos["invalid_count"].dtype == np.int32
        vec.step(legal_last(infos["action_mask"]))
    finally:
        vec.close()


def test_masked_action_is_a_sub_env_error_in_strict_mode(backend):
    """invalid_action="raise": SubEnvError naming the env, which did not move; every other
    env stepped and its results come with the error; the run goes on (issue 11, F7)."""
    vec = vec_of(toy(invalid_action="raise"), 2, backend, seed=2)
    ref = make_vec(toy(invalid_action="raise"), 2, seed=2, backend="roundrobin")
    try:
        obs, infos = vec.reset()
        ref.reset()
        acts = legal_last(infos["action_mask"])
        bad = acts.copy()
        bad[4] = 0  # env 1, agent 1 is deciding: 0 is masked out
        assert infos["needs_action"][4]
        with pytest.raises(SubEnvError) as err:
            vec.step(bad)
        assert err.value.env_index == 1 and err.value.error_type == "MaskedActionError"
        assert "step_arrays" in err.value.worker_traceback
        got_obs, got_rew, got_term, got_trunc, got_infos = err.value.results
        # Env 1 is where it was (nothing happened there); env 0 stepped as the reference.
        np.testing.assert_array_equal(got_obs[3:], obs[3:])
        assert (got_rew[3:] == 0).all() and not got_term[3:].any() and not got_trunc[3:].any()
        ref_acts = acts.copy()
        ref_obs, *_ = ref.step(ref_acts)
        np.testing.assert_array_equal(got_obs[:3], ref_obs[:3])
        # Env 1 takes its (now legal) actions one step late; env 0 goes on.
        acts2 = legal_last(got_infos["action_mask"])
        out = vec.step(acts2)
        assert np.isfinite(out[1]).all()
    finally:
        vec.close()
        ref.close()


def test_make_vec_rejects_bad_arguments():
    with pytest.raises(ConfigError, match="unknown backend"):
        make_vec("jobshop_v0", 2, backend="nope")
    with pytest.raises(ConfigError, match="unknown scenario"):
        make_vec("nope_v0", 2)
    with pytest.raises(ConfigError, match="factory"):
        make_vec(toy(), 2, preset="small")
    with pytest.raises(ConfigError):
        make_vec("jobshop_v0", 0)
    with pytest.raises(ConfigError):
        make_vec("jobshop_v0", 2, backend="roundrobin", not_an_arg=1)
    with pytest.raises(ConfigError, match="'NextStep', 'SameStep', 'Disabled'"):
        make_vec("jobshop_v0", 2, backend="roundrobin", autoreset_mode="next")
    with pytest.raises(ConfigError, match="fork"):
        make_vec("jobshop_v0", 2, backend="shm", start_method="fok")
    with pytest.raises(ConfigError, match="start_method='spawn' is not an option of this "
                                          "backend .*'shm'"):
        make_vec("jobshop_v0", 2, backend="roundrobin", start_method="spawn")
    with pytest.raises(ConfigError, match="runs every env in the calling process"):
        make_vec("jobshop_v0", 2, backend="roundrobin", num_workers=2)
    for workers in (0, 1):  # SuperSuit in this process: no start method to use
        with pytest.raises(ConfigError, match=f"start_method='spawn' with num_workers={workers}"):
            make_vec("jobshop_v0", 2, backend="supersuit", num_workers=workers,
                     start_method="spawn")
    with pytest.raises(ConfigError, match="num_workers=0 must be None or a positive int"):
        make_vec("jobshop_v0", 2, backend="shm", num_workers=0)
    with pytest.raises(ConfigError, match="num_workers=3 is more than num_sims=2"):
        make_vec("jobshop_v0", 2, backend="shm", num_workers=3)
    with pytest.raises(ConfigError, match="on_error"):
        make_vec("jobshop_v0", 2, backend="roundrobin", on_error="ignore")
    with pytest.raises(ConfigError, match="timeout"):
        make_vec("jobshop_v0", 2, backend="roundrobin", timeout=0)
    for bad in (-1, 1.5, "a", True):
        with pytest.raises(ConfigError, match=r"int in \[0, 2\*\*32 - 1\]"):
            make_vec("jobshop_v0", 2, backend="roundrobin", seed=bad)
    with pytest.raises(ConfigError, match="batch_size"):
        make_vec("jobshop_v0", 4, backend="shm", num_workers=2, batch_size=3)


def test_a_first_seed_that_leaves_no_seed_for_the_last_env_is_refused_up_front():
    """Env i gets seed + i: a first seed past 2**32 - num_sims is a ConfigError that names
    the seed given and its bound, at make_vec and at reset (it was accepted by make_vec,
    and the first reset failed on seed=4294967296, a seed nobody gave)."""
    with pytest.raises(ConfigError, match=r"seed=4294967295 is too large for 2 envs.*"
                                          r"at most 2\*\*32 - 2 \(4294967294\)"):
        make_vec(toy(), 2, backend="roundrobin", seed=2**32 - 1)

    def never_built():
        raise AssertionError("make_vec built an env before refusing the seed")

    with pytest.raises(ConfigError, match="seed=4294967295 is too large"):
        make_vec(never_built, 2, backend="roundrobin", seed=2**32 - 1)
    vec = make_vec(toy(), 2, backend="roundrobin", seed=2**32 - 2)
    try:
        vec.reset()
        with pytest.raises(ConfigError, match=r"reset: seed=4294967295 is too large"):
            vec.reset(seed=2**32 - 1)
        vec.reset(seed=[2**32 - 1, 0])  # a list of one seed per env is taken as it is
    finally:
        vec.close()


def test_a_factory_that_is_not_one_is_a_config_error():
    """A factory that needs arguments, or returns no env, is a ConfigError saying so (they
    were a TypeError from the call and an AttributeError 'int' object has no 'close')."""
    with pytest.raises(ConfigError, match="cannot be called with no arguments.*"
                                          "functools.partial"):
        make_vec(lambda preset: toy()(), 2, backend="roundrobin")
    with pytest.raises(ConfigError, match="int is not a PettingZoo ParallelEnv"):
        make_vec(lambda: 5, 2, backend="roundrobin")


# option, a wrong value, what the message says is expected (issue 19: these were accepted;
# issue 37: numbers out of range, which hung or overflowed later)
SECONDS = "a finite number x with 0.001 <= x <= 1,000,000"
WRONG_TYPES = [
    ("timeout", True, SECONDS),
    ("timeout", "5", SECONDS),
    ("timeout", float("inf"), SECONDS),
    ("timeout", 5e-324, SECONDS),  # every reset failed: "failed to restart 3 times"
    ("timeout", 1e300, SECONDS),
    ("timeout", 0, SECONDS),
    ("copy", "x", "True or False"),
    ("copy", 1, "True or False"),
    ("on_error", True, "one of 'raise', 'restart'"),
    ("batch_size", 2.0, "None or a positive int"),
    ("num_workers", True, "None or a positive int"),
    ("num_workers", 1.0, "None or a positive int"),
    ("spin_us", "10", "None or a finite number x with 0 <= x <= 1,000,000"),
    ("spin_us", 1e7, "None or a finite number x with 0 <= x <= 1,000,000"),
    ("close_timeout", None, "a finite number x with 0 <= x <= 1,000,000"),
    ("close_timeout", 2**63, "a finite number x with 0 <= x <= 1,000,000"),  # close() overflowed
    ("close_timeout", 1e300, "a finite number x with 0 <= x <= 1,000,000"),
    ("close_timeout", -1, "a finite number x with 0 <= x <= 1,000,000"),
    ("start_method", 3, "None or one of 'fork', 'spawn', 'forkserver'"),
    # was refused only when the workers started, after an env was built, without the call
    ("start_method", "thread", "None or one of 'fork', 'spawn', 'forkserver'"),
]


@pytest.mark.parametrize("name, value, expects", WRONG_TYPES,
                         ids=[f"{n}={v!r}" for n, v, _ in WRONG_TYPES])
def test_make_vec_checks_option_types(name, value, expects):
    """A value of the wrong type is a ConfigError naming the option, before any env is
    built; every local backend checks the options it shares with the others alike."""
    backends = [b for b in ("roundrobin", "supersuit", "shm")
                if name in {o.name for o in deszoo.vector.BACKENDS[b].declared()}]
    assert "shm" in backends
    for backend in backends:
        said = re.escape(f"{name}={value!r} must be ")
        if backend == "shm":  # the others may accept other values (num_workers)
            said += re.escape(expects)
        with pytest.raises(ConfigError, match=said):
            make_vec(toy(), 2, backend=backend, **{name: value})


def test_option_bounds_and_numpy_scalars():
    """Every number option is bounded on both sides (the edges are accepted), and NumPy
    scalars are accepted and made plain Python values, as scenario parameters are."""
    from deszoo.vector.options import check_options
    from deszoo.vector.shm import ShmVecEnv

    edges = {"timeout": 1e-3, "close_timeout": 0, "spin_us": 1e6}
    assert check_options(ShmVecEnv.declared(), edges, "w")["spin_us"] == 1e6
    edges = {"timeout": 1e6, "close_timeout": 1e6, "spin_us": 0}
    assert check_options(ShmVecEnv.declared(), edges, "w")["timeout"] == 1e6
    numpy = {"timeout": np.float32(1.5), "close_timeout": np.float64(0.5),
             "spin_us": np.int64(0), "copy": np.bool_(False), "batch_size": np.int32(1)}
    opts = check_options(ShmVecEnv.declared(), numpy, "w")
    for name, value in numpy.items():
        assert opts[name] == value.item() and type(opts[name]) is type(value.item()), name
    vec = make_vec(toy(), np.int64(2), backend="shm", num_workers=np.int64(2),
                   timeout=np.float32(1.0), close_timeout=np.float32(1.0), seed=0)
    try:
        assert vec.num_sims == 2 and vec.num_workers == 2 and vec.timeout == 1.0
        assert vec.reset(seed=1)[0].shape == (6, 3)
    finally:
        vec.close()


def test_env_kwargs_apart_from_backend_options():
    """Scenario arguments go in env_kwargs, backend options in **options; the mixed form of
    earlier versions still works (undeclared names are scenario arguments) and gives the
    same env."""
    a = make_vec("jobshop_v0", 2, backend="roundrobin", env_kwargs={"preset": "small"},
                 timeout=5)
    b = make_vec("jobshop_v0", 2, backend="roundrobin", preset="small", timeout=5)
    try:
        assert a.timeout == b.timeout == 5.0
        assert_same_rollouts(rollout(a, 20, seed=3), rollout(b, 20, seed=3), "env_kwargs")
    finally:
        a.close()
        b.close()
    with pytest.raises(ConfigError, match=r"preset='small' is not a backend option; scenario "
                                          r"arguments go in env_kwargs"):
        make_vec("jobshop_v0", 2, backend="roundrobin", env_kwargs={}, preset="small")
    with pytest.raises(ConfigError, match="env_kwargs=.* must be a dict"):
        make_vec("jobshop_v0", 2, backend="roundrobin", env_kwargs=[("preset", "small")])
    with pytest.raises(ConfigError, match="unknown argument"):
        make_vec("jobshop_v0", 2, backend="roundrobin", env_kwargs={"timeout": 5})
    with pytest.raises(ConfigError, match="factory"):
        make_vec(toy(), 2, backend="roundrobin", env_kwargs={"preset": "small"})


def test_num_sims_and_the_deprecated_num_envs():
    """The count of simulations is num_sims (vec.num_envs counts rows); num_envs= still
    works for one version, with a DeprecationWarning."""
    vec = make_vec(toy(), num_sims=2, backend="roundrobin")
    assert (vec.num_sims, vec.num_envs) == (2, 6)
    vec.close()
    with pytest.warns(DeprecationWarning, match="num_envs=.* is deprecated: use num_sims="):
        vec = make_vec(toy(), num_envs=2, backend="roundrobin")
    assert vec.num_sims == 2
    vec.close()
    with pytest.raises(ConfigError, match="two names of one count"):
        make_vec(toy(), 2, num_envs=2, backend="roundrobin")
    with pytest.raises(ConfigError, match="needs num_sims"):
        make_vec(toy(), backend="roundrobin")
    with pytest.raises(ConfigError, match="num_sims=0 must be a positive int"):
        make_vec(toy(), 0, backend="roundrobin")


def test_options_are_params_with_their_rules_beside_them():
    """Backend options are declared with the type scenario parameters are (Param, with the
    same checks); a check that spans options is a Rule on the option it belongs to."""
    from deszoo.core.params import Param, Rule
    from deszoo.vector import BACKENDS
    from deszoo.vector.base import COMMON_OPTIONS

    for cls in BACKENDS.values():
        assert all(isinstance(o, Param) and o.name for o in cls.declared()), cls
    rules = {o.name: o.rules for o in COMMON_OPTIONS}
    assert [r.uses for r in rules["batch_size"]] == [("batch_size", "num_workers", "num_sims")]
    assert all(isinstance(r, Rule) and r.words for r in rules["batch_size"])
    with pytest.raises(ConfigError, match=r"make_vec\(backend='shm'\): batch_size=5 must be an "
                                          r"int in 1\.\.num_sims \(4\)"):
        make_vec(toy(), 4, backend="shm", num_workers=2, batch_size=5)


def test_options_are_declared_once_and_documented():
    """Each backend declares its options (name, default, what is accepted); make_vec reads
    them from there, and docs/vector.md documents every one of them."""
    from pathlib import Path

    from deszoo.vector import BACKENDS, option_names

    doc = (Path(__file__).resolve().parents[1] / "docs" / "vector.md").read_text()
    # The option table: | `name` | backends | `default` | accepts | meaning |; num_workers
    # is an argument of make_vec, in the arguments table.
    table = dict(re.findall(r"^\| `(\w+)` \| [^|]+ \| `([^`]+)` \|", doc, re.MULTILINE))
    assert "| `num_workers` |" in doc
    table["num_workers"] = "None"
    for name, backends in option_names().items():
        assert name in table, f"option {name!r} ({backends}) is not in docs/vector.md's table"
    for cls in BACKENDS.values():
        names = [o.name for o in cls.declared()]
        assert len(names) == len(set(names)), cls
        for o in cls.declared():
            assert o.expects and o.doc and (o.default is None or o.accepts(o.default)), o
            said = f'"{o.default}"' if isinstance(o.default, str) else repr(o.default)
            assert table[o.name] == said, f"docs/vector.md: {o.name} defaults to {said}"


def test_a_registered_backend_needs_no_change_to_make_vec(monkeypatch):
    """A new backend declares its own option; make_vec accepts and checks it as declared."""
    from deszoo.core.params import integer
    from deszoo.vector import BACKENDS, register_backend
    from deszoo.vector.options import option
    from deszoo.vector.roundrobin import RoundRobinVecEnv

    class Loud(RoundRobinVecEnv):
        backend = "loud"
        options = (*RoundRobinVecEnv.options, option("volume", 3, integer(0), "how loud"))

        def make_transport(self, opts):
            self.volume = opts["volume"]
            return super().make_transport(opts)

    monkeypatch.setitem(BACKENDS, "loud", BACKENDS["roundrobin"])
    register_backend("loud", Loud)
    vec = make_vec(toy(), 2, backend="loud", volume=7)
    try:
        assert vec.volume == 7 and vec.reset()[0].shape == (6, 3)
    finally:
        vec.close()
    with pytest.raises(ConfigError, match="volume=-1 must be an int >= 0"):
        make_vec(toy(), 2, backend="loud", volume=-1)
    with pytest.raises(ConfigError, match="volume=1 is not an option of this backend .*'loud'"):
        make_vec(toy(), 2, backend="shm", volume=1)
    with pytest.raises(ConfigError, match="not a DeszooVecEnv"):
        register_backend("bad", object)


def test_num_workers_default_and_uneven_split():
    vec = make_vec(toy(), 5, backend="shm")
    try:
        assert vec.num_workers == min(5, deszoo.vector.usable_cores())
        counts = [w.count for w in vec.workers]
        assert sum(counts) == 5 and max(counts) - min(counts) <= 1
    finally:
        vec.close()


def test_shm_spinning_workers_give_the_same_results():
    """spin_us only changes how idle workers wait, never what they compute."""
    runs = []
    for spin in (0, 300):
        vec = make_vec("jobshop_v0", 4, backend="shm", num_workers=2, spin_us=spin,
                       preset="small")
        try:
            assert vec.spin_us == spin
            runs.append(rollout(vec, 60, seed=5))
        finally:
            vec.close()
    assert_same_rollouts(runs[0], runs[1], "spin_us 0 vs 300")
    with pytest.raises(ConfigError, match="spin_us"):
        make_vec("jobshop_v0", 2, backend="roundrobin", spin_us=10)
    with pytest.raises(ConfigError, match="spin_us"):
        make_vec("jobshop_v0", 2, backend="shm", spin_us=-1)


# ---- Gymnasium VectorEnv API: call, get_attr, set_attr, reset_mask, final_info ----------


def test_get_set_call_act_per_simulation(backend):
    """get_attr/set_attr/call reach each simulation; set values stick across a rebuild."""
    vec = vec_of(toy(max_steps=50), 3, backend, seed=1)
    try:
        vec.reset()
        assert vec.get_attr("max_steps") == (50, 50, 50)
        vec.set_attr("max_steps", [4, 5, 6])
        assert vec.get_attr("max_steps") == (4, 5, 6)
        vec.set_attr("max_steps", 9)
        assert vec.get_attr("max_steps") == (9, 9, 9)
        assert vec.call("needs_action", 0) == vec.call("needs_action", 0)
        assert vec.get_attr("possible_agents") == (["toy_0", "toy_1", "toy_2"],) * 3
        assert vec.call_envs("get", "max_steps", [2]) == [9]
        with pytest.raises(ConfigError, match="1 values for 2 envs; 'set' takes one value"):
            vec.call_envs("set", "max_steps", [0, 2], values=[7])
        with pytest.raises(ConfigError, match="0 values for 1 envs"):
            vec.call_envs("set", "max_steps", [2])
        with pytest.raises(ConfigError, match="'get', 'max_steps'.*the others none"):
            vec.call_envs("get", "max_steps", [2], values=[7])
        assert vec.call_envs("set", "max_steps", [2], values=[9]) == [None]
        with pytest.raises(AttributeError, match="no_such_attribute"):
            vec.get_attr("no_such_attribute")
        with pytest.raises(ConfigError, match="one value per env"):
            vec.set_attr("max_steps", [1, 2])
        with pytest.raises(ConfigError, match=r"max_steps=-3 must be None or an int in 1\.\."):
            vec.set_attr("max_steps", -3)  # the env's own check, raised in the parent
        # The limit works where it was set: env 1 truncates after 2 steps.
        vec.set_attr("max_steps", [100, 2, 100])
        _, infos = vec.reset(seed=1)
        for _ in range(2):
            obs, rew, term, trunc, infos = vec.step(legal_last(infos["action_mask"]))
        assert trunc[3:6].any() and not trunc[:3].any() and not trunc[6:].any()
    finally:
        vec.close()


def test_call_envs_answers_in_the_order_asked(backend):
    """call_envs with envs out of order, or one env twice, answers as roundrobin does: one
    value per env asked, in that order (SuperSuit answered a worker's envs in its order)."""
    runs = []
    for opts in (dict(backend="roundrobin"), backend):
        vec = vec_of(toy(), 4, opts, seed=1)
        try:
            vec.reset()
            vec.set_attr("max_steps", [10, 11, 12, 13])
            got = [vec.call_envs("get", "max_steps", [3, 1, 0])]
            got.append(vec.call_envs("set", "max_steps", [2, 2], values=[7, 8]))
            got.append(vec.get_attr("max_steps"))
            got.append(vec.call_envs("get", "max_steps", [1, 1, 2]))
            runs.append(got)
        finally:
            vec.close()
    assert runs[0] == [[13, 11, 10], [None, None], (10, 11, 8, 13), [11, 11, 8]]
    assert runs[1] == runs[0]


def test_reset_mask_resets_only_the_selected_envs(backend):
    """Gymnasium's reset(options={"reset_mask": m}) resets those envs alone."""
    vec = vec_of(toy(), 3, backend, seed=5)
    ref = make_vec(toy(), 3, seed=5, backend="roundrobin")
    try:
        _, infos = vec.reset()
        ref.reset()
        for _ in range(3):
            acts = legal_last(infos["action_mask"])
            *_, infos = vec.step(acts)
            ref.step(acts)
        mask = np.zeros(9, dtype=bool)
        mask[3:6] = True
        options = {"reset_mask": mask}
        obs, infos = vec.reset(seed=100, options=options)
        assert "reset_mask" in options  # read, not popped (RecordEpisodeStatistics reads it)
        fresh, _ = make_vec(toy(), 3, seed=100, backend="roundrobin").reset()
        np.testing.assert_array_equal(obs[3:6], fresh[3:6])  # env 1: seed 100 + 1
        # Envs 0 and 2 go on where they were: the next step equals the reference's.
        acts = legal_last(infos["action_mask"])
        out = vec.step(acts)
        ref_out = ref.step(acts)
        for rows in (slice(0, 3), slice(6, 9)):
            np.testing.assert_array_equal(out[0][rows], ref_out[0][rows])
        with pytest.raises(ConfigError, match="some rows of env"):
            bad = np.zeros(9, dtype=bool)
            bad[4] = True
            vec.reset(options={"reset_mask": bad})
        with pytest.raises(ConfigError, match="shape"):
            vec.reset(options={"reset_mask": np.ones(3, dtype=bool)})
        with pytest.raises(ConfigError, match="bool"):
            vec.reset(options={"reset_mask": np.ones(9, dtype=np.int8)})
        # Other options would not reach the envs: said, not dropped silently.
        with pytest.raises(ConfigError, match=r"\['level'\] would not reach the envs"):
            vec.reset(options={"level": 3})
    finally:
        vec.close()
        ref.close()


def test_same_step_final_info(backend):
    """SameStep mode: final_info carries the ended episodes' clock and invalid count."""
    vec = vec_of(toy(), 2, backend, seed=3, autoreset_mode="SameStep")
    try:
        _, infos = vec.reset()
        seen = 0
        for _ in range(40):
            acts = np.zeros(6, dtype=np.int64)  # 0 is masked out for deciding agents
            obs, rew, term, trunc, infos = vec.step(acts)
            final = infos["_final_info"]
            assert final.dtype == bool and (final == infos["_final_obs"]).all()
            if final.any():
                seen += 1
                fi = infos["final_info"]
                assert (fi["sim_time"][final] >= 6.0).all()  # the toy's horizon
                assert (fi["invalid_count"][final] >= 0).all()
                assert fi["invalid_count"][final].sum() > 0
        assert seen > 0
    finally:
        vec.close()


def test_disabled_autoreset_needs_a_masked_reset(backend):
    """autoreset_mode="Disabled": an ended env must be reset (reset_mask) before a step."""
    vec = vec_of(toy(horizon=2.0), 2, backend, seed=3, autoreset_mode="Disabled")
    try:
        _, infos = vec.reset()
        for _ in range(30):
            obs, rew, term, trunc, infos = vec.step(legal_last(infos["action_mask"]))
            ended = (term | trunc).reshape(2, 3).any(axis=1) & ~infos["live"].reshape(2, 3).any(1)
            if ended.any():
                break
        assert ended.any()
        with pytest.raises(ResetNeededError, match="reset_mask"):
            vec.step(legal_last(infos["action_mask"]))
        _, infos = vec.reset(options={"reset_mask": np.repeat(ended, 3)})
        vec.step(legal_last(infos["action_mask"]))
    finally:
        vec.close()


def test_large_values_through_set_and_get_attr(backend):
    """Values larger than a pipe's buffer go both ways (a deadlock once in shm)."""
    vec = vec_of(toy(), 2, backend, seed=0)
    try:
        vec.reset()
        blob = np.arange(300_000, dtype=np.float64)  # 2.4 MB
        vec.set_attr("blob", blob)
        got = vec.get_attr("blob")
        assert len(got) == 2 and all(np.array_equal(g, blob) for g in got)
    finally:
        vec.close()


def test_the_young_gc_threshold_is_raised_while_envs_are_held(monkeypatch):
    """GC policy: while a vector env holds envs in this process, young collections are rarer;
    the caller's threshold comes back when the last one closes, or is dropped unclosed."""
    import gc

    from deszoo.vector import _host

    # Count only this test's holders (vector envs other tests leaked may still be alive).
    monkeypatch.setattr(_host, "GC_HOLD", _host.GcHold())
    raised = (_host.GC_YOUNG, 10, 10)
    saved = gc.get_threshold()
    gc.set_threshold(700, 10, 10)
    try:
        a = make_vec("jobshop_v0", 2, backend="roundrobin", preset="small")
        assert gc.get_threshold() == raised
        b = make_vec("jobshop_v0", 2, backend="roundrobin", preset="small")
        a.close()
        assert gc.get_threshold() == raised, "b still holds envs"
        b.close()
        assert gc.get_threshold() == (700, 10, 10)
        c = make_vec("jobshop_v0", 2, backend="roundrobin", preset="small")
        gc.set_threshold(500, 10, 10)  # the caller lowers it while c is open
        d = make_vec("jobshop_v0", 2, backend="roundrobin", preset="small")
        assert gc.get_threshold() == raised
        c.close()
        del d  # never closed: its envs are released when it is collected
        gc.collect()
        assert gc.get_threshold() == (500, 10, 10)
        assert _host.GC_HOLD.holders == 0
    finally:
        gc.set_threshold(*saved)


def serial_states(factory, seeds: list, actions: list, same_step: bool) -> tuple[list, list]:
    """Each env replayed alone through the array API, as a vector env steps it: its state
    after every call, and (same-step mode) its final state where an episode ended."""
    envs = [factory() for _ in seeds]
    n = len(envs[0].possible_agents)
    for env, seed in zip(envs, seeds, strict=True):
        env.reset_arrays(seed)
    states, finals = [[env.state() for env in envs]], [None]
    for acts in actions:
        row, final = [], []
        for k, env in enumerate(envs):
            end = None
            if env.episode_over:  # next-step mode: this step resets it
                env.reset_arrays(None)
            else:
                env.step_arrays(acts[k * n : (k + 1) * n])
                if same_step and env.episode_over:
                    end = env.state()
                    env.reset_arrays(None)
            row.append(env.state())
            final.append(end)
        states.append(row)
        finals.append(final)
    return states, finals


def assert_state_replays(factory, vec, steps: int, same_step: bool) -> None:
    """``infos["state"]`` (and ``final_info["state"]``) of ``vec`` equal the states of
    serial envs replaying its seeds and actions, bit for bit."""
    n, rng = vec.agents_per_sim, np.random.default_rng(0)
    _, infos = vec.reset(seed=21)
    got, got_final, actions = [infos["state"]], [None], []
    for _ in range(steps):
        actions.append(legal_random(infos["action_mask"], rng))
        *_, infos = vec.step(actions[-1])
        got.append(infos["state"])
        got_final.append(infos["final_info"] if same_step else None)
    want, want_final = serial_states(factory, [21 + i for i in range(vec.num_sims)], actions,
                                     same_step)
    ended = 0
    for t, (rows, states) in enumerate(zip(got, want, strict=True)):
        assert rows.shape == (vec.num_envs, len(states[0])) and rows.dtype == np.float32
        np.testing.assert_array_equal(rows, np.repeat(states, n, axis=0), err_msg=f"step {t}")
        for k, end in enumerate(want_final[t] if same_step and t else []):
            assert bool(got_final[t]["_state"][k * n]) == (end is not None), f"step {t}"
            if end is not None:
                ended += 1
                np.testing.assert_array_equal(got_final[t]["state"][k * n], end)
    assert ended or not same_step, "the rollout should cross an autoreset"


@pytest.mark.parametrize("scenario", deszoo.list_envs())
@pytest.mark.parametrize("mode", ["NextStep", "SameStep"])
def test_state_equals_a_serial_replay(scenario, mode):
    """make_vec(state=True): infos["state"] is each env's state(), on every scenario."""
    kwargs = scenario_kwargs(scenario)
    vec = make_vec(scenario, 2, backend="roundrobin", state=True, autoreset_mode=mode,
                   **kwargs)
    try:
        assert_state_replays(functools.partial(deszoo.make, scenario, **kwargs), vec, 40,
                             mode == "SameStep")
    finally:
        vec.close()


def test_state_on_every_backend(backend):
    """Every backend carries the state it was asked for, equal to a serial replay (ridehail:
    agents leave, episodes end at different steps)."""
    kwargs = {"preset": "small", "max_steps": 20}
    vec = vec_of("ridehail_v0", 3, backend, state=True, autoreset_mode="SameStep", **kwargs)
    try:
        assert_state_replays(functools.partial(deszoo.make, "ridehail_v0", **kwargs), vec, 45,
                             True)
    finally:
        vec.close()


def test_no_state_unless_asked_and_refused_without_one():
    """Without state=True nothing is carried; an env with no state is refused by name."""
    from devkit.plain_envs import Kinds

    vec = make_vec("jobshop_v0", 2, backend="roundrobin", preset="small")
    try:
        _, infos = vec.reset()
        assert "state" not in infos and vec.layout.state_dim == 0
    finally:
        vec.close()
    with pytest.raises(ConfigError, match="kinds_v0 has no global state"):
        make_vec(Kinds, 2, backend="roundrobin", state=True)


def test_state_of_a_plain_parallel_env():
    """A plain PettingZoo env with a Box state_space has its state() batched, flattened."""
    from devkit.plain_envs import Kinds

    class Stateful(Kinds):
        state_space = spaces.Box(0.0, 100.0, (1, 2), dtype=np.float32)

        def state(self):
            return np.array([[self.t, len(self.agents)]], dtype=np.float32)

    vec = make_vec(Stateful, 2, backend="roundrobin", state=True)
    try:
        _, infos = vec.reset()
        assert infos["state"].tolist() == [[0.0, 3.0]] * 6
        *_, infos = vec.step(np.ones(6, dtype=np.int64))
        assert infos["state"][0].tolist() == [1.0, 3.0]
    finally:
        vec.close()


def _step_frames(backend: str, n: int, **kw) -> collections.Counter:
    """The deszoo, ``signal`` and ``threading`` Python frames of one sync step, outside the
    envs' own ``step_arrays`` (counted with ``sys.setprofile``)."""
    vec = make_vec("jobshop_v0", n, backend=backend, env_kwargs={"preset": "small"}, **kw)
    try:
        _, infos = vec.reset(seed=0)
        for _ in range(3):
            _, _, _, _, infos = vec.step(infos["action_mask"].argmax(axis=1))
        act = infos["action_mask"].argmax(axis=1)
        calls: collections.Counter = collections.Counter()
        inside = [0]

        def prof(frame, event, arg):
            if event == "call":
                code = frame.f_code
                if inside[0]:
                    inside[0] += 1
                elif code.co_name == "step_arrays":
                    inside[0] = 1
                elif any(p in code.co_filename for p in ("deszoo", "/signal.py", "/threading.py")):
                    calls[(code.co_filename.rsplit("/", 1)[-1], code.co_name)] += 1
            elif event == "return" and inside[0]:
                inside[0] -= 1

        sys.setprofile(prof)
        try:
            vec.step(act)
        finally:
            sys.setprofile(None)
        return calls
    finally:
        vec.close()


def test_sync_steps_run_few_python_frames():
    """A sync shm step runs at most 4 deszoo functions in the parent; a roundrobin step at
    most 6 fixed deszoo frames plus 2 per env besides the envs' step_arrays, and no Python
    frame of signal or threading (issue 32's bounds)."""
    shm = _step_frames("shm", 8, num_workers=2)
    assert sum(shm.values()) <= 4, shm
    for n in (2, 4):
        rr = _step_frames("roundrobin", n)
        assert sum(rr.values()) <= 6 + 2 * n, rr
        assert not any(f in ("signal.py", "threading.py") for f, _ in rr), rr


def test_no_class_in_the_package_is_over_400_lines():
    """Issue 32's bound on class size (DeszooVecEnv was 912 lines, then 409)."""
    import ast
    import pathlib

    root = pathlib.Path(deszoo.__file__).parent
    big = []
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and node.end_lineno - node.lineno >= 400:
                big.append(f"{path.relative_to(root)}:{node.name} "
                           f"({node.end_lineno - node.lineno + 1} lines)")
    assert not big, big


def test_tests_patch_no_private_name():
    """Issue 32: a rename inside the package must not break tests that should not care."""
    import pathlib

    pattern = re.compile(r"""(?:setattr|patch(?:\.object)?)\([^)]*["']_(?!_)\w+["']""")
    here = pathlib.Path(__file__).parent
    found = [f"{p.name}:{n}" for p in here.rglob("*.py")
             for n, line in enumerate(p.read_text().splitlines(), 1) if pattern.search(line)]
    assert not found, found
