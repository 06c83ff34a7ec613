"""Client matrix: PettingZoo's own test set on every scenario, on default settings.

Each scenario is built as a user would build it (``preset="small"`` only, to keep CI short;
no ``invalid_action``): the checkers sample the unmasked action space, which the default
invalid-action contract turns into flagged legal actions.
"""

from __future__ import annotations

import contextlib
import io
import warnings

import pytest
from pettingzoo.test import (
    api_test,
    max_cycles_test,
    parallel_api_test,
    parallel_seed_test,
    render_test,
    seed_test,
    state_test,
)

import deszoo

ENVS = deszoo.list_envs()


@contextlib.contextmanager
def quiet():
    """PettingZoo's checkers print and warn about naming style; keep the log readable."""
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        yield


@pytest.mark.parametrize("name", ENVS)
@pytest.mark.parametrize("mask_in_obs", [False, True])
def test_parallel_api_and_seed(name, mask_in_obs):
    module = deszoo.env_module(name)
    with quiet():
        parallel_api_test(module.parallel_env(preset="small", mask_in_obs=mask_in_obs),
                          num_cycles=500)
        parallel_seed_test(lambda: module.parallel_env(preset="small", mask_in_obs=mask_in_obs),
                           num_cycles=200)


@pytest.mark.parametrize("name", ENVS)
def test_aec_api_and_seed(name):
    module = deszoo.env_module(name)
    with quiet():
        api_test(module.env(preset="small"), num_cycles=100)
        seed_test(lambda: module.env(preset="small"), num_cycles=100)


@pytest.mark.parametrize("name", ENVS)
def test_state(name):
    """PettingZoo's state_test: state_space and state(), AEC and parallel."""
    module = deszoo.env_module(name)
    with quiet():
        state_test(module.env(preset="small"), module.parallel_env(preset="small"),
                   num_cycles=50)


@pytest.mark.parametrize("name", ENVS)
def test_render(name):
    module = deszoo.env_module(name)
    with quiet():
        render_test(lambda render_mode=None: module.env(preset="small", render_mode=render_mode))


@pytest.mark.parametrize("name", ENVS)
def test_max_cycles(name):
    with quiet():
        max_cycles_test(deszoo.env_module(name))


@pytest.mark.parametrize("name", ENVS)
def test_module_conventions(name):
    """``env`` is the wrapped AEC env, ``raw_env`` the unwrapped one, ``parallel_env`` the
    class; ``max_cycles`` is another name for ``max_steps``."""
    from pettingzoo import AECEnv, ParallelEnv
    from pettingzoo.utils.wrappers import OrderEnforcingWrapper

    module = deszoo.env_module(name)
    assert isinstance(module.env(preset="small"), OrderEnforcingWrapper)
    assert isinstance(module.raw_env(preset="small"), AECEnv)
    par = module.parallel_env(preset="small", max_cycles=7)
    assert isinstance(par, ParallelEnv) and par.max_steps == 7 == par.max_cycles
