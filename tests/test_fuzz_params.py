"""Every parameter of every scenario at the edge (issue 37, items 4 and 5): each value is
refused with a ConfigError that names the parameter and its value, or the env steps 50
steps with finite observations, rewards and state, in bounded time
(benchmarks/devkit/fuzz_params.py; benchmarks/fuzz_params.py runs combinations of several)."""

from __future__ import annotations

import numpy as np
import pytest

import deszoo
from deszoo.envs.warehouse.model import WarehouseModel
from deszoo.errors import ConfigError
from devkit.fuzz_params import run_case, single_cases


# NumPy warns of the overflow where a rate of 5e-324 gives an infinite mean gap (no arrivals:
# loadbalance load and background) or a horizon of 5e-324 an infinite time share (clipped to
# 1: ridehail); the outcome (finite, bounded) is what is checked.
@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")
@pytest.mark.parametrize("name", deszoo.list_envs())
def test_every_parameter_at_the_edge_is_refused_by_name_or_runs(name):
    failures, kinds = [], {"refused": 0, "ran": 0}
    for _, kwargs in single_cases([name]):
        out = run_case(name, kwargs)
        if out.ok:
            kinds[out.kind] += 1
        else:
            failures.append(f"{kwargs!r}: {out.kind}: {out.detail}")
    assert not failures, "\n".join(failures)
    assert kinds["refused"] and kinds["ran"]  # the fuzz reached both sides of the bounds


# ---- the cases the fuzz found, by name (issue 37) -----------------------------------------
@pytest.mark.parametrize(("name", "kwargs"), [
    ("traffic_v1", {"decision_interval": 5e-324}),
    ("traffic_v0", {"decision_interval": 1e-9}),
    ("ridehail_v1", {"dispatch_interval": 5e-324}),
    ("ridehail_v0", {"dispatch_interval": 0.1, "zone_time": 1e5}),
    ("supplychain_v0", {"demand_rate": 5e-324}),
    ("supplychain_v0", {"max_order": 5e-324}),
    ("supplychain_v0", {"season": 5e-324}),
    ("jobshop_v0", {"utilization": 5e-324}),
    ("warehouse_v1", {"utilization": 5e-324}),
])
def test_a_value_that_stalled_or_broke_a_step_is_refused_with_its_name(name, kwargs):
    with pytest.raises(ConfigError) as err:
        deszoo.make(name, **kwargs)
    for key, value in kwargs.items():
        assert f"{key}={value!r}" in str(err.value)


def test_the_dispatch_bound_follows_the_longest_episode():
    """ridehail's smallest dispatch_interval grows with the horizon and the longest drive;
    the error names the parameters it was computed from."""
    deszoo.make("ridehail_v1", dispatch_interval=0.2).close()  # 13,200 s / 100,000 = 0.132
    with pytest.raises(ConfigError, match=r"dispatch_interval=30.0 must be at least .* = 170 "
                                          r"with horizon=1000000.0, zone_time=100000.0"):
        deszoo.make("ridehail_v1", horizon=1e6, zone_time=1e5, zones_x=32, zones_y=32)


@pytest.mark.parametrize(("name", "key"), [
    ("jobshop_v0", "queue_slots"), ("jobshop_v0", "n_machines"), ("elevator_v1", "n_floors"),
    ("loadbalance_v0", "n_pools"), ("warehouse_v1", "order_slots"), ("ridehail_v1", "n_drivers"),
])
def test_numpy_integers_are_plain_ints_to_the_model(name, key):
    """np.uint8(255) is inside the bounds, and 255 + 1 must not wrap to 0 in the model."""
    env = deszoo.make(name, preset="small", **{key: np.uint8(255)})
    assert env.config[key] == 255 and type(env.config[key]) is int
    env.reset(seed=0)
    env.close()


def test_max_cycles_errors_name_max_cycles():
    with pytest.raises(ConfigError, match=r"max_cycles=0 must be"):
        deszoo.make("jobshop_v0", max_cycles=0)
    env = deszoo.make("jobshop_v0")
    with pytest.raises(ConfigError, match=r"max_cycles=-3 must be"):
        env.max_cycles = -3
    with pytest.raises(ConfigError, match=r"max_steps=-3 must be"):
        env.max_steps = -3
    env.max_cycles = np.int64(7)
    assert env.max_steps == 7 and type(env.max_steps) is int
    env.close()


@pytest.mark.parametrize(("name", "kwargs", "named"), [
    ("ridehail_v1", {"zones_x": 1, "zones_y": 1}, ["zones_x=1", "zones_y=1"]),
    ("traffic_v1", {"max_time": None, "max_steps": None}, ["max_time=None", "max_steps=None"]),
    ("supplychain_v0", {"max_steps": None}, ["max_steps=None", "max_time=None"]),
])
def test_cross_parameter_errors_name_each_value(name, kwargs, named):
    with pytest.raises(ConfigError) as err:
        deszoo.make(name, **kwargs)
    for words in named:
        assert words in str(err.value)


def test_warehouse_via_table_equals_its_search():
    """The closed form of the aisle to pass through equals the search it replaced (the
    search made a reset O(n_aisles^3): over 100 s at the documented 512 aisles)."""
    model = WarehouseModel.__new__(WarehouseModel)
    for n_aisles in range(2, 41):
        model.n_aisles = n_aisles
        for end in (0, 1):
            for x in range(n_aisles):
                for a in range(n_aisles):
                    assert model._via(end, x, a) == WarehouseModel._via_search(n_aisles, end,
                                                                               x, a)


def test_plain_numbers_and_a_bound_from_other_parameters():
    from deszoo.core.params import Least, Param, check_all, optional, plain, real

    assert plain((np.uint8(3), [np.float32(0.5), np.bool_(True)])) == (3, [0.5, True])
    assert type(plain(np.int64(7))) is int and plain("x") == "x"
    least = Least("span / 10", ("span",), lambda v: v["span"] / 10, "ten ticks a span")
    params = {"span": Param(None, optional(real(0)), ""),
              "tick": Param(1.0, real(0, open_min=True, at_least=least), "")}
    assert "x >= span / 10" in params["tick"].expects
    check_all("toy", params, {"span": None, "tick": 1e-9})  # no span: no bound
    check_all("toy", params, {"span": 10.0, "tick": 1.0})
    with pytest.raises(ConfigError, match=r"toy: tick=0.5 must be at least span / 10 = 1 with "
                                          r"span=10.0 \(ten ticks a span\)"):
        check_all("toy", params, {"span": 10.0, "tick": 0.5})
