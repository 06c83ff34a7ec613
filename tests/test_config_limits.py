"""Configs that cannot run are refused fast with ConfigError (issue 11, F5): non-finite numbers
anywhere, and sizes whose memory would exceed what the machine has."""

from __future__ import annotations

import math
import signal

import numpy as np
import pytest

import deszoo
from deszoo.core import memory
from deszoo.errors import ConfigError
from deszoo.registry import latest_versions
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
    with pytest.raises(ConfigError, match=r"4096 agents.*an estimate"):
        deszoo.make("ridehail_v0", n_drivers=4096, zones_x=32, zones_y=32)
    deszoo.make("ridehail_v0", preset="small").close()  # a small one still fits


def test_a_batch_too_big_for_the_machine_is_refused_with_its_size(monkeypatch):
    env = deszoo.make("ridehail_v0", n_drivers=2_000)
    one = memory.env_bytes(len(env.possible_agents), env.rows.obs_dim, env.rows.mask_dim)
    env.close()
    monkeypatch.setattr(memory, "available_bytes", lambda: 4 * one)  # room for 4 envs
    with pytest.raises(ConfigError, match=r"make_vec\('ridehail_v0', 8\).*8 envs x 2000 agents"):
        make_vec("ridehail_v0", 8, backend="roundrobin", n_drivers=2_000)
    make_vec("ridehail_v0", 3, backend="roundrobin", n_drivers=2_000).close()


# ---- a fuzz over every parameter of every scenario (issue 20, item 6) -----------------
FUZZ = ["x", None, [1], {}, (), True, -1, 0, -0.5, 0.5, 3, 1e-300, math.nan, math.inf,
        -math.inf, 10**9, 1e9, 1e300, 2**63, 2**64, -(2**64), 10**400, np.int64(2**62),
        np.float64(1e200)]
HANG_GUARD = 120  # seconds: a case past this is a hang, not a slow machine


def play(name: str, **kwargs) -> str | None:
    """Build ``name`` (small preset), reset and step it a few times; None if it ran or was
    refused with a ConfigError that names the parameter, else what went wrong."""
    (key,) = kwargs
    def alarm(*_):
        raise TimeoutError(f"over {HANG_GUARD} s")

    old = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(HANG_GUARD)
    try:
        try:
            env = deszoo.make(name, preset="small", **kwargs)
        except ConfigError as err:
            return None if key in str(err) else f"ConfigError without the name: {err}"
        try:
            env.reset_arrays(0)
            for _ in range(3):
                if env.episode_over:
                    break
                env.step_arrays(env.rows.zero_actions())
        finally:
            env.close()
        return None
    except Exception as err:  # noqa: BLE001 - the fuzz reports every other failure
        return f"{type(err).__name__}: {err}"[:200]
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def params_of(name: str) -> dict:
    cls = deszoo.env_module(name).parallel_env
    return getattr(cls, "func", cls).all_params()


@pytest.mark.parametrize("name", latest_versions())
def test_config_fuzz_gives_only_config_errors(name):
    failures = [f"{key}={value!r}: {why}"
                for key in params_of(name) for value in FUZZ
                if (why := play(name, **{key: value})) is not None]
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("name", latest_versions())
def test_every_bound_runs(name):
    """Each numeric parameter at its documented bounds builds and steps (or is refused with
    a ConfigError: e.g. a memory estimate past what the machine has)."""
    failures = []
    for key, param in params_of(name).items():
        for bound in getattr(param.check, "bounds", (None, None)):
            if bound is not None and (why := play(name, **{key: bound})) is not None:
                failures.append(f"{key}={bound!r}: {why}")
    assert not failures, "\n".join(failures)


def test_every_scenario_parameter_has_an_upper_bound():
    """What the docs promise: every number a scenario takes has a documented upper bound."""
    loose = [f"{name}.{key} ({param.expects})" for name in latest_versions()
             for key, param in params_of(name).items()
             if getattr(param.check, "bounds", (0, 0))[1] is None
             and not isinstance(param.default, (bool, str, tuple))
             and "fraction" not in param.expects and "x with" not in param.expects]
    assert not loose, loose
