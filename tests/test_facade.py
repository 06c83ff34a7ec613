"""The dict API is a view of the arrays: the same values, handed out as copies."""

from __future__ import annotations

import numpy as np
import pytest

import deszoo

CASES = [(name, {}) for name in deszoo.list_envs()] + [
    ("ridehail_v0", {"black_death": True}),  # agents leave: listed until the end
    ("jobshop_v0", {"mask_in_obs": True}),
    ("supplychain_v0", {"mask_in_obs": True}),
]


def _legal(env, rng, infos):
    actions = {}
    for a in env.agents:
        i = env.possible_agents.index(a)
        action = env.rows.fallback(i, env.mask_buf[i], rng)
        actions[a] = int(action) if np.ndim(action) == 0 else env.rows.unpad(i, action)
    return actions


def _check(env, names, obs, infos, rew=None, term=None, trunc=None):
    assert list(obs) == names and list(infos) == names
    for a in names:
        i = env.possible_agents.index(a)
        d = env.rows.obs_dims[i]
        o = obs[a]["observation"] if env.mask_in_obs else obs[a]
        np.testing.assert_array_equal(o, env.obs_buf[i, :d])
        assert o.dtype == np.float32 and not np.shares_memory(o, env.obs_buf)
        mask = infos[a]["action_mask"]
        np.testing.assert_array_equal(mask, env.mask_buf[i, : mask.shape[0]])
        assert mask.dtype == np.int8 and not np.shares_memory(mask, env.mask_buf)
        if env.mask_in_obs:
            np.testing.assert_array_equal(obs[a]["action_mask"], mask)
            assert not np.shares_memory(obs[a]["action_mask"], mask)
        assert infos[a]["needs_action"] == bool(env.needs_buf[i]) == env.needs_action(i)
        assert infos[a]["invalid_count"] == int(env.invalid_count[i])
        assert infos[a]["sim_time"] == env.now
        if rew is not None:
            assert rew[a] == float(env.rew_buf[i]) and type(rew[a]) is float
            assert term[a] is bool(env.term_buf[i]) and trunc[a] is bool(env.trunc_buf[i])


@pytest.mark.parametrize("name,kwargs", CASES, ids=lambda c: str(c))
def test_dict_results_are_the_arrays_copied(name, kwargs):
    env = deszoo.make(name, preset="small", **kwargs)
    rng = np.random.default_rng(0)
    obs, infos = env.reset(seed=1)
    _check(env, env.agents, obs, infos)
    kept = None
    for _ in range(120):
        if not env.agents:
            obs, infos = env.reset()
            _check(env, env.agents, obs, infos)
        before = list(env.agents)
        out = env.step(_legal(env, rng, infos))
        obs, rew, term, trunc, infos = out
        _check(env, before, obs, infos, rew, term, trunc)
        if kept is None:
            a = before[0]
            kept = (a, out, {k: np.copy(v) if isinstance(v, np.ndarray) else v
                             for k, v in infos[a].items()})
            first = obs[a]["observation"] if env.mask_in_obs else obs[a]
            kept_obs = first.copy()
            first += 1.0  # a caller writing into what it got changes nothing in the env
            infos[a]["action_mask"][:] = 0
    a, out, info = kept
    first = out[0][a]["observation"] if env.mask_in_obs else out[0][a]
    np.testing.assert_array_equal(first, kept_obs + 1.0)  # later steps left it alone
    assert not out[4][a]["action_mask"].any()
    assert info["sim_time"] <= env.now
