"""Tests the bridge's semantics on tiny hand-written models."""

from __future__ import annotations

import numpy as np
import pytest

from deszoo.core import Integrator, Param, SimPyParallelEnv, discrete
from deszoo.core.params import optional, real
from deszoo.errors import ConfigError


def _schedule(v):
    ok = isinstance(v, tuple) and v and all(
        isinstance(ts, tuple) and all(isinstance(t, float) for t in ts) for ts in v
    )
    return None if ok else "a tuple of decision times (floats) per agent"


def _leave_at(v):
    ok = v is None or isinstance(v, tuple) and len(v) == 2
    return None if ok else "None or (agent, time)"


class Toy(SimPyParallelEnv):
    """Agent ``i`` decides at times ``schedule[i]``; its action is added to its reward."""

    metadata = {"render_modes": ["human", "ansi"], "name": "toy_v0"}
    params = {
        "schedule": Param(((1.0, 3.0), (1.0, 2.0)), _schedule, "decision times per agent"),
        "leave_at": Param(None, _leave_at, "agent i leaves at time t: (i, t)"),
        "periodic": Param(None, optional(real(0, open_min=True)),
                          "every live agent decides every this many time units instead"),
    }

    def _setup(self):
        names = [f"a{i}" for i in range(len(self.p.schedule))]
        return discrete(names, np.zeros(1), np.full(1, 100.0), 3)

    def _build(self):
        self.decisions = []
        if self.p.periodic:
            self.every(self.p.periodic, self._apply, mask=lambda i: [0, 1, 1])
        else:
            for i, times in enumerate(self.p.schedule):
                self.sim.process(self._agent(i, times))
        if self.p.leave_at is not None:
            self.sim.process(self._leave(*self.p.leave_at))

    def _apply(self, i, action):
        self.decisions.append((self.now, i, action))
        self.add_reward(i, float(action))

    def _agent(self, i, times):
        for t in times:
            yield self.sim.timeout(t - self.sim.now)
            if not self.live[i]:
                return
            action = yield self.decide(i, [0, 1, 1])
            self._apply(i, action)

    def _leave(self, i, t):
        yield self.sim.timeout(t)
        self.remove_agent(i)

    def _observe(self, i, out):
        out[0] = self.now


def test_agents_deciding_at_the_same_instant_decide_in_one_step():
    env = Toy()
    _, infos = env.reset(seed=0)
    assert env.now == 1.0
    assert infos["a0"]["needs_action"] and infos["a1"]["needs_action"]
    _, rew, _, _, infos = env.step({"a0": 1, "a1": 2})
    assert rew == {"a0": 1.0, "a1": 2.0}
    assert env.now == 2.0 and not infos["a0"]["needs_action"] and infos["a1"]["needs_action"]
    assert infos["a0"]["action_mask"].tolist() == [1, 0, 0]
    _, rew, *_ = env.step({"a1": 2})  # a0 is not deciding and may be left out
    assert env.now == 3.0 and rew == {"a0": 0.0, "a1": 2.0}
    _, _, term, trunc, _ = env.step({"a0": 1, "a1": 0})
    assert term == {"a0": True, "a1": True} and trunc == {"a0": False, "a1": False}
    assert env.agents == []


def test_event_queue_running_dry_terminates_even_with_max_time():
    env = Toy(max_time=1000.0)
    env.reset(seed=0)
    for actions in ({"a0": 1, "a1": 1}, {"a1": 1}):
        env.step(actions)
    _, _, term, trunc, _ = env.step({"a0": 1})
    assert all(term.values()) and not any(trunc.values())
    assert env.now == 3.0


def test_max_time_truncates_at_the_limit():
    env = Toy(max_time=2.5)
    env.reset(seed=0)
    env.step({"a0": 1, "a1": 1})
    _, _, term, trunc, infos = env.step({"a1": 1})
    assert all(trunc.values()) and not any(term.values())
    assert infos["a0"]["sim_time"] == 2.5 and env.agents == []


def test_max_steps_truncates():
    env = Toy(max_steps=1)
    env.reset(seed=0)
    _, _, term, trunc, _ = env.step({"a0": 1, "a1": 1})
    assert all(trunc.values()) and env.agents == []


def test_removed_agent_leaves_alone_and_its_row_is_blank():
    env = Toy(leave_at=(1, 1.5))
    env.reset(seed=0)
    _, _, term, _, _ = env.step({"a0": 1, "a1": 1})
    assert term == {"a0": False, "a1": True}
    assert env.agents == ["a0"]
    assert env.obs_buf[1].tolist() == [3.0], "the leaving step carries the final observation"
    assert env.mask_buf[1].tolist() == [1, 0, 0]
    env.step({"a0": 1})
    assert not env.obs_buf[1].any() and env.mask_buf[1].tolist() == [1, 0, 0]


def test_periodic_mode_asks_every_live_agent_every_dt():
    env = Toy(periodic=2.0, max_time=5.0)
    env.reset(seed=0)
    times = []
    while env.agents:
        times.append(env.now)
        env.step({"a0": 1, "a1": 2})
    assert times == [0.0, 2.0, 4.0]
    assert [d[0] for d in env.decisions] == [0.0, 0.0, 2.0, 2.0, 4.0, 4.0]


def test_bad_limits_are_config_errors():
    with pytest.raises(ConfigError, match="max_steps"):
        Toy(max_steps=0)
    with pytest.raises(ConfigError, match="invalid_action"):
        Toy(invalid_action="clip")


def test_integrator_books_piecewise_constant_area():
    integ = Integrator(2)
    integ.set(1.0, 0, 2.0)  # agent 0 at 2 from t=1
    integ.add(3.0, 0, 1.0)  # then 3 from t=3
    integ.set(2.0, 1, 1.0)
    np.testing.assert_allclose(integ.take(4.0), [2 * 2 + 3 * 1, 2.0])
    np.testing.assert_allclose(integ.take(5.0), [3.0, 1.0])


def test_episode_ends_when_the_last_agent_leaves():
    class Forever(Toy):
        def _build(self):
            super()._build()
            self.sim.process(self._tick())

        def _tick(self):
            while True:  # a model process that never stops by itself
                yield self.sim.timeout(1.0)

    env = Forever(schedule=((1.0,),), leave_at=(0, 1.5))
    env.reset(seed=0)
    _, _, term, trunc, _ = env.step({"a0": 1})
    assert term == {"a0": True} and trunc == {"a0": False} and env.agents == []


def test_setup_must_return_groups():
    class Tuple(Toy):
        def _setup(self):
            return ["a0"], np.zeros(1), np.ones(1), 2

    with pytest.raises(ConfigError, match="Group"):
        Tuple()
