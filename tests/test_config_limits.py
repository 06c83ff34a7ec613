"""Configs that cannot run are refused fast with ConfigError (issue 11, F5): non-finite numbers
anywhere, and sizes whose memory would exceed what the machine has."""

from __future__ import annotations

import math

import pytest

import deszoo
from deszoo.core import memory
from deszoo.errors import ConfigError
from deszoo.vector import make_vec


def real_params() -> list[tuple[str, str]]:
    """(scenario, parameter) for every declared parameter whose default is a real number."""
    out = []
    for name in deszoo.list_envs():
        cls = deszoo.env_module(name).parallel_env
        cls = getattr(cls, "func", cls)
        for key, param in cls.all_params().items():
            if isinstance(param.default, float):
                out.append((name, key))
    return out


@pytest.mark.parametrize(("name", "key"), real_params(), ids=lambda x: str(x))
@pytest.mark.parametrize("bad", [math.inf, -math.inf, math.nan])
def test_non_finite_numbers_are_refused(name, key, bad):
    with pytest.raises(ConfigError, match=key):
        deszoo.make(name, preset="small", **{key: bad})


def test_real_params_cover_every_scenario():
    assert {n for n, _ in real_params()} == set(deszoo.list_envs())


def test_estimate_over_the_available_memory_is_refused_with_the_estimate():
    with pytest.raises(ConfigError, match=r"about 1\.0 GiB .*an estimate.*0\.5 GiB"):
        memory.check_fits("thing", 2**30, "detail", available=2**29)
    memory.check_fits("thing", 2**29, "detail", available=2**30)  # fits: no error


def test_an_env_too_big_for_the_machine_is_refused_before_it_is_built(monkeypatch):
    monkeypatch.setattr(memory, "available_bytes", lambda: 50 * 2**20)  # a 50 MiB machine
    with pytest.raises(ConfigError, match=r"20000 agents.*an estimate"):
        deszoo.make("ridehail_v0", n_drivers=20_000)
    deszoo.make("ridehail_v0", preset="small").close()  # a small one still fits


def test_a_batch_too_big_for_the_machine_is_refused_with_its_size(monkeypatch):
    env = deszoo.make("ridehail_v0", n_drivers=2_000)
    one = memory.env_bytes(len(env.possible_agents), env.rows.obs_dim, env.rows.mask_dim)
    env.close()
    monkeypatch.setattr(memory, "available_bytes", lambda: 4 * one)  # room for 4 envs
    with pytest.raises(ConfigError, match=r"make_vec\('ridehail_v0', 8\).*8 envs x 2000 agents"):
        make_vec("ridehail_v0", 8, backend="roundrobin", n_drivers=2_000)
    make_vec("ridehail_v0", 3, backend="roundrobin", n_drivers=2_000).close()
