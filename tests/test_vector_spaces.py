"""Agents of different kinds, Box actions and any PettingZoo ParallelEnv on every backend."""

from __future__ import annotations

import functools

import numpy as np
import pytest
from gymnasium import spaces
from pettingzoo.test import parallel_api_test
from test_vector import BACKENDS, vec_of

import deszoo
from deszoo.errors import ConfigError, InvalidActionError
from deszoo.rollouts import assert_same_rollouts, rollout
from deszoo.vector import make_vec
from devkit.plain_envs import Continuous, Kinds


@pytest.mark.parametrize("env", [Kinds, Continuous])
def test_the_plain_envs_pass_pettingzoo(env):
    parallel_api_test(env(), num_cycles=50)


CONTINUOUS_CHAIN = functools.partial(deszoo.make, "supplychain_v0", preset="small",
                                     continuous=True, max_steps=12)


@pytest.mark.parametrize("env", [Kinds, Continuous, CONTINUOUS_CHAIN],
                         ids=["kinds", "continuous", "supplychain-continuous"])
@pytest.mark.parametrize("mode", ["NextStep", "SameStep"])
def test_a_plain_parallel_env_is_bit_identical_on_every_backend(env, mode, backend_opts):
    runs = {}
    for name, opts in BACKENDS.items():
        vec = vec_of(env, 3, backend_opts(opts), seed=5, autoreset_mode=mode)
        try:
            runs[name] = rollout(vec, 25)
        finally:
            vec.close()
    ref = runs.pop("roundrobin")
    assert sum(int((s["term"] | s["trunc"]).any()) for s in ref[1:]) >= 2
    for name, run in runs.items():
        assert_same_rollouts(ref, run, f"{mode} roundrobin vs {name}")


def test_kinds_are_padded_rows_with_a_kind_id():
    vec = make_vec(Kinds, 2, backend="roundrobin", seed=0)
    try:
        assert vec.single_observation_space.shape == (5,)
        assert vec.single_action_space == spaces.Discrete(5)
        obs, infos = vec.reset()
        assert infos["kind"].tolist() == [0, 0, 1, 0, 0, 1]
        assert (obs[infos["kind"] == 0][:, 3:] == 0).all()  # scouts observe 3 values
        # A scout's action 4 is outside its Discrete(3): masked out, so replaced and flagged
        # only if it was deciding (in a plain env every live agent decides).
        assert (infos["action_mask"][0] == [1, 1, 1, 0, 0]).all()
        assert (infos["action_mask"][2] == [1, 0, 1, 0, 1]).all()  # the base, step 0
        obs, rew, term, trunc, infos = vec.step(np.array([0, 1, 4, 2, 2, 4]))
        assert infos["live"].all() and np.isfinite(rew).all()
        for _ in range(3):
            obs, rew, term, trunc, infos = vec.step(np.zeros(6, dtype=np.int64))
        assert term[1] and not infos["live"][1]  # scout 1 leaves at step 4
    finally:
        vec.close()


def test_box_actions_are_checked_never_clipped():
    vec = make_vec(Continuous, 2, backend="roundrobin", seed=0)
    try:
        assert isinstance(vec.single_action_space, spaces.Box)
        assert vec.single_action_space.shape == (2,)
        vec.reset()
        good = np.array([[0.5, 0.0], [1.0, 2.0]] * 2, dtype=np.float32)
        vec.step(good)
        for bad_value in (1.5, np.nan):  # agent one_0 acts in [-1, 1]
            bad = good.copy()
            bad[0, 0] = bad_value
            with pytest.raises(InvalidActionError, match="not clipped"):
                vec.step(bad)
        padded = good.copy()
        padded[0, 1] = 99.0  # one_0's second entry is padding: ignored
        vec.step(padded)
    finally:
        vec.close()


def test_spaces_that_cannot_be_batched_are_refused():
    class TupleObs(Kinds):
        def observation_space(self, agent):
            return spaces.Tuple((spaces.Discrete(2), spaces.Discrete(3)))

    with pytest.raises(ConfigError, match="cannot be batched"):
        make_vec(TupleObs, 2, backend="roundrobin")

    class ShiftedActions(Kinds):  # 0-based rows would reach it out of its space
        def action_space(self, agent):
            return spaces.MultiDiscrete([3, 2], start=[5, 10])

    with pytest.raises(ConfigError, match=r"MultiDiscrete actions must start at 0"):
        make_vec(ShiftedActions, 2, backend="roundrobin")


def test_discrete_observations_with_a_start_are_one_hot_from_it():
    class Shifted(Kinds):
        def observation_space(self, agent):
            return spaces.Discrete(3, start=-1)

        def _observe(self):
            return {a: i - 1 for i, a in enumerate(self.agents)}  # -1, 0, 1

    vec = make_vec(Shifted, 1, backend="roundrobin")
    try:
        obs, _ = vec.reset(seed=0)
        np.testing.assert_array_equal(obs, np.eye(3, dtype=np.float32))
    finally:
        vec.close()


@pytest.mark.parametrize("backend", ["roundrobin", "supersuit2", "shm2"])
def test_attribute_calls_reach_a_plain_envs_own_attributes(backend, backend_opts):
    """get_attr and set_attr act on the user's ParallelEnv, not on deszoo's adapter
    around it (get_attr("horizon") raised, and set_attr("horizon", 2) was kept by the
    adapter while the env went on to its old horizon)."""
    from test_vector import BACKENDS

    vec = vec_of(Kinds, 2, backend_opts(BACKENDS[backend]), seed=0)
    try:
        assert vec.get_attr("horizon") == (9, 9)
        vec.set_attr("horizon", 2)
        assert vec.get_attr("horizon") == (2, 2)
        _, infos = vec.reset(seed=0)
        _, _, term, _, infos = vec.step(np.zeros(vec.num_envs, dtype=np.int64))
        assert not term.any()
        _, _, term, _, _ = vec.step(np.zeros(vec.num_envs, dtype=np.int64))
        assert term.all(), "the env took the new horizon"
    finally:
        vec.close()


def test_multidiscrete_actions_reach_the_env_as_their_own_arrays():
    """An env that keeps the actions it got (a "last action" feature, a log) keeps what was
    sent: each is a copy, not a view of the batch's action buffer that the next step
    overwrites."""
    from pettingzoo import ParallelEnv

    class Kept(ParallelEnv):
        metadata = {"name": "kept_v0"}
        possible_agents = ["a", "b"]

        def __init__(self):
            self.agents, self.kept = [], []
            self._obs = spaces.Box(0, 1, (1,), np.float32)
            self._act = spaces.MultiDiscrete([3, 2])

        def observation_space(self, agent):
            return self._obs

        def action_space(self, agent):
            return self._act

        def reset(self, seed=None, options=None):
            self.agents = list(self.possible_agents)
            return {a: np.zeros(1, np.float32) for a in self.agents}, {}

        def step(self, actions):
            self.kept.append(actions["a"])
            obs = {a: np.zeros(1, np.float32) for a in self.agents}
            return obs, dict.fromkeys(self.agents, 0.0), dict.fromkeys(self.agents, False), \
                dict.fromkeys(self.agents, False), {}

    vec = make_vec(Kept, 1, backend="roundrobin")
    try:
        vec.reset(seed=0)
        sent = [[1, 0], [2, 1], [0, 1]]
        for a in sent:
            vec.step(np.array([a, [0, 0]]))
        assert [k.tolist() for k in vec.get_attr("kept")[0]] == sent
    finally:
        vec.close()


def test_a_plain_envs_masked_out_actions_are_replaced_and_flagged(backend_opts):
    """As deszoo's envs do by default: a masked-out action, or one past the agent's own
    Discrete space (scouts have 3 actions in a batch of Discrete(5)), becomes a random
    legal one, the same on every backend, flagged in invalid_action (they reached the env
    unflagged, the padded ones outside its space)."""
    from test_vector import BACKENDS

    got = {}
    for name in ("roundrobin", "shm2"):
        vec = vec_of(Kinds, 2, backend_opts(BACKENDS[name]), seed=3)
        try:
            _, infos = vec.reset()
            assert infos["action_mask"][2].tolist() == [1, 0, 1, 0, 1]  # base_0, step 0
            acts = np.array([4, 0, 1, 0, 1, 3])  # env 0: scout 4, base 1; env 1: base 3
            _, rew, _, _, infos = vec.step(acts)
            assert infos["invalid_action"].tolist() == [True, False, True, False, False, True]
            assert infos["invalid_count"].tolist() == [1, 0, 1, 0, 0, 1]
            got[name] = rew
        finally:
            vec.close()
    np.testing.assert_array_equal(got["roundrobin"], got["shm2"])


def test_a_row_with_no_legal_action_waits():
    """A turn-based game's waiting player (an all-zero mask, as PettingZoo's classic games
    give it) is not asked to act: its row has the no-op mask and needs_action False (it
    needed an action that no mask allowed)."""

    class Turns(Kinds):
        def _infos(self):
            infos = super()._infos()
            for a in infos:
                if a != "base_0":
                    infos[a] = {"action_mask": np.zeros(3, dtype=np.int8)}
            return infos

    vec = make_vec(Turns, 1, backend="roundrobin")
    try:
        _, infos = vec.reset(seed=0)
        assert infos["needs_action"].tolist() == [False, False, True]
        assert infos["action_mask"][:2, 0].tolist() == [1, 1]
        assert not infos["action_mask"][:2, 1:].any()
        _, _, _, _, infos = vec.step(np.zeros(3, dtype=np.int64))
        assert not infos["invalid_action"].any()
    finally:
        vec.close()


def test_a_plain_env_that_fails_every_reset_says_why():
    """An env whose reset never works (here PettingZoo's old API, observations only) ends
    the vector env with its own error, type and traceback, the first failure as the cause
    (the error said "'dict' object ..." with no type, traceback or cause)."""
    from deszoo.errors import SubEnvError, VectorEnvError

    class ObsOnly(Kinds):
        def reset(self, seed=None, options=None):
            return super().reset(seed, options)[0]

    vec = make_vec(ObsOnly, 2, backend="roundrobin")
    try:
        with pytest.raises(VectorEnvError, match=r"the new env failed too: TypeError: "
                           r"kinds_v0.reset\(\) returned a dict; .* returns \(observations, "
                           r"infos\)(.|\n)*worker traceback") as info:
            vec.reset(seed=0)
        assert isinstance(info.value.__cause__, SubEnvError)
        assert info.value.__cause__.error_type == "TypeError"
        assert vec.state.name == "FAILED"
    finally:
        vec.close()


def test_evaluate_takes_an_env_class():
    """examples/custom_model.py scores its class: evaluate(policy, ClinicEnv, seeds) raised
    "argument of type 'type' is not iterable"."""
    from deszoo.policies import evaluate, random_policy

    returns = evaluate(random_policy(0), Kinds, [0, 1])
    assert returns.shape == (2,) and np.isfinite(returns).all()
