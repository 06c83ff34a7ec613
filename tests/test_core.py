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
    env = Toy(leave_at=(1, 1.5), black_death=False)
    env.reset(seed=0)
    _, _, term, _, _ = env.step({"a0": 1, "a1": 1})
    assert term == {"a0": False, "a1": True}
    assert env.agents == ["a0"]
    assert env.obs_buf[1].tolist() == [3.0], "the leaving step carries the final observation"
    assert env.mask_buf[1].tolist() == [1, 0, 0]
    env.step({"a0": 1})
    assert not env.obs_buf[1].any() and env.mask_buf[1].tolist() == [1, 0, 0]


def test_by_default_an_agent_that_leaves_stays_listed_until_the_end():
    """black_death=True is the bridge's default (every trainer expects a fixed agent set)."""
    env = Toy(leave_at=(1, 1.5))
    env.reset(seed=0)
    _, _, term, _, _ = env.step({"a0": 1, "a1": 1})
    assert term == {"a0": False, "a1": False} and env.agents == ["a0", "a1"]
    obs, rew, term, _, infos = env.step({"a0": 1, "a1": 2})  # a1's action: ignored
    assert not obs["a1"].any() and rew["a1"] == 0
    assert infos["a1"]["action_mask"].tolist() == [1, 0, 0]


def test_periodic_mode_asks_every_live_agent_every_dt():
    env = Toy(periodic=2.0, max_time=5.0)
    env.reset(seed=0)
    times = []
    while env.agents:
        times.append(env.now)
        env.step({"a0": 1, "a1": 2})
    assert times == [0.0, 2.0, 4.0]
    assert [d[0] for d in env.decisions] == [0.0, 0.0, 2.0, 2.0, 4.0, 4.0]



class Some(SimPyParallelEnv):
    """Four agents; ``every`` round: the agents ``who`` lists (repeats allowed), with the
    mask ``masks[i]`` (``None``: all actions)."""

    metadata = {"render_modes": [], "name": "some_v0"}
    params = {"who": Param((2, 0, 2), lambda v: None, "the round's agents"),
              "masks": Param(None, lambda v: None, "mask per agent, or None")}

    def _setup(self):
        return discrete([f"a{i}" for i in range(4)], np.zeros(1), np.full(1, 9.0), 3)

    def _build(self):
        self.applied = []
        mask = None if self.p.masks is None else self.p.masks.__getitem__
        self.every(1.0, lambda i, a: self.applied.append((self.now, i, a)),
                   agents=lambda: self.p.who, mask=mask)

    def _observe(self, i, out):
        out[0] = self.now


@pytest.mark.parametrize("masks", [None, ([1, 1, 0], None, None, None)])
def test_every_round_of_some_agents_writes_only_their_rows(masks):
    env = Some(who=(2, 0, 2), masks=masks)
    env.reset_arrays(0)
    full, noop = [1, 1, 1], [1, 0, 0]
    first = full if masks is None else [1, 1, 0]
    assert env.needs_buf.tolist() == [True, False, True, False]
    assert env.mask_buf.tolist() == [first, noop, full, noop]
    env.step_arrays(np.array([1, 2, 2, 1]))
    env.step_arrays(np.array([0, 0, 1, 0]))
    assert env.applied == [(0.0, 2, 2), (0.0, 0, 1), (1.0, 2, 1), (1.0, 0, 0)]
    assert env.needs_buf.tolist() == [True, False, True, False]


class Mixed(SimPyParallelEnv):
    """Agents 0-2 decide in ``every`` rounds (together); agent 3, in its own process, decides
    at some of the same instants and schedules a same-instant event; agent 1 leaves at 4
    (during the step), agent 0 at 7 (as the step ends, while agent 3 decides too). ``log``
    records the order in which things happen."""

    metadata = {"render_modes": [], "name": "mixed_v0"}
    params = {"old_every": Param(False, lambda v: None, "use the all_of reference below")}

    def _setup(self):
        return discrete([f"a{i}" for i in range(4)], np.zeros(1), np.full(1, 100.0), 3)

    def _build(self):
        self.log = []
        every = self._old_every if self.p.old_every else self.every
        every(1.0, lambda i, a: self.log.append((self.now, "apply", i, a)),
              agents=lambda: [i for i in (0, 1, 2) if self.live[i]], together=True)
        self.sim.process(self._other())
        self.sim.process(self._leave())

    def _other(self):
        while True:
            yield self.sim.timeout(1.0 if self.now < 3 else 2.0)
            if self.now >= 7:
                yield self.sim.timeout(0)  # decide after the round of this instant
            a = yield self.decide(3)
            self.log.append((self.now, "other", 3, a))
            self.sim.timeout(0).callbacks.append(lambda ev: self.log.append((self.now, "echo")))

    def _leave(self):
        yield self.sim.timeout(4.0)
        self.remove_agent(1)
        self.log.append((self.now, "left", 1))

    def _flush(self, until):
        if until == 7.0 and self.live[0]:
            self.remove_agent(0)
            self.log.append((self.now, "left", 0))

    def _old_every(self, dt, apply, *, agents, together):  # the all_of implementation
        def clock():
            while True:
                round_ = [(i, self.decide(i)) for i in agents() if not self.needs_action(i)]
                if round_:
                    yield self.sim.all_of([e for _, e in round_])
                    for i, event in round_:
                        apply(i, event.value)
                yield self.sim.timeout(dt)

        self.sim.process(clock())

    def _observe(self, i, out):
        out[0] = self.now


def test_every_rounds_keep_the_order_of_one_event_per_decision():
    """One event per round (the round's agents alone deciding) or one per decision (mixed
    with other decisions, or a departure), the model sees the same order of things as with
    ``sim.all_of`` over one event per decision."""
    logs = []
    for old in (True, False):
        env = Mixed(old_every=old, max_time=12.0)
        env.reset(seed=0)
        rng = np.random.default_rng(5)
        while env.agents:
            env.step({a: int(rng.integers(3)) for a in env.agents})
        logs.append(env.log)
    assert logs[0] == logs[1]
    kinds = [entry[1] for entry in logs[0]]
    assert {"apply", "other", "echo", "left"} <= set(kinds)
    assert (7.0, "left", 0) in logs[0]


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


class Counter(Toy):
    """Two agents decide at t=1; a job that arrives at t=1 after their decisions opens
    action 2, which a mask computed when the step ends sees (``late=True``)."""

    params = {**Toy.params, "late": Param(True, lambda v: None, "mask as a callable")}

    def _build(self):
        self.jobs = 0
        super()._build()
        self.sim.process(self._arrive())

    def _arrive(self):
        yield self.sim.timeout(1.0)
        yield self.sim.timeout(0.0)  # after the agents' decide() at the same instant
        self.jobs += 1

    def _agent(self, i, times):
        for t in times:
            yield self.sim.timeout(t - self.sim.now)
            mask = (lambda: [0, 1, int(self.jobs > 0)]) if self.p.late else [0, 1, 0]
            action = yield self.decide(i, mask)
            self._apply(i, action)


def test_a_callable_mask_is_computed_when_the_step_ends():
    env = Counter()
    _, infos = env.reset(seed=0)
    assert infos["a0"]["action_mask"].tolist() == [0, 1, 1], "the job at t=1 opens action 2"
    assert Counter(late=False).reset(seed=0)[1]["a0"]["action_mask"].tolist() == [0, 1, 0]
    env.step({"a0": 2, "a1": 2})  # legal under the late mask: not replaced
    assert not env.invalid_buf.any() and env.decisions[:2] == [(1.0, 0, 2), (1.0, 1, 2)]


def test_a_callable_mask_with_no_legal_action_is_a_model_bug():
    class Empty(Counter):
        def _agent(self, i, times):
            yield self.sim.timeout(times[0])
            yield self.decide(i, lambda: [0, 0, 0])

    with pytest.raises(RuntimeError, match="all-zero mask"):
        Empty().reset(seed=0)


class _Handed(Toy):
    """Toy whose model hands the bridge a broken mask, reward, observation or values."""

    params = {**Toy.params, "broken": Param("mask", lambda v: None, "what the model breaks")}

    def _agent(self, i, times):
        yield self.sim.timeout(times[0])
        broken = self.p.broken
        if broken == "reward":
            self.add_reward(i, [1.0, 2.0])
        mask = [1, 1] if broken == "mask" else "abc" if broken == "mask_kind" else [0, 1, 1]
        values = ["x", "y"] if broken == "values" else None
        yield self.decide(i, mask, values=values)

    def _observe(self, i, out):
        out[:] = np.zeros(3) if self.p.broken == "obs" else self.now

    def _flush(self, until):
        if self.p.broken == "flush":
            self.rew_buf += np.ones(3)  # not one reward per agent


@pytest.mark.parametrize(("broken", "words"), [
    ("flush", ["_flush", "0: 'a0', 1: 'a1'", "rew_buf", "shape (2,)", "(3,)"]),
    ("mask", ["agent 'a0'", "mask_buf", "expected 3 entries", "shape (3,)", "shape (2,)"]),
    ("mask_kind", ["agent 'a0'", "mask_buf", "expected 3 entries", "'abc'"]),
    ("reward", ["agent 'a0'", "rew_buf", "shape ()", "shape (2,)"]),
    ("obs", ["agent 'a0'", "obs_buf", "shape (1,)", "(3,)"]),
])
def test_what_the_model_hands_over_wrongly_names_the_agent_buffer_and_shapes(broken, words):
    from deszoo.errors import ModelError

    with pytest.raises(ModelError) as info:
        _Handed(broken=broken).reset(seed=0)
    message = str(info.value)
    assert message.startswith("toy_v0: ") and all(w in message for w in words), message
    assert isinstance(info.value, ValueError)


def test_a_models_own_error_outside_flush_is_left_as_it_is():
    from deszoo.errors import ModelError

    class Raises(Toy):
        def _agent(self, i, times):
            yield self.sim.timeout(times[0])
            raise ValueError("the model's own complaint")

    with pytest.raises(ValueError, match="the model's own complaint") as info:
        Raises().reset(seed=0)
    assert not isinstance(info.value, ModelError)


def test_decision_values_without_an_entry_for_the_action_name_the_agent():
    from deszoo.errors import ModelError

    env = _Handed(broken="values")
    env.reset(seed=0)
    with pytest.raises(ModelError, match=r"agent 'a0' chose action 2, but the values .* "
                                         r"\(received shape \(2,\)"):
        env.step({"a0": 2, "a1": 1})


def test_a_row_that_names_no_agent_is_named_as_such():
    from deszoo.errors import ModelError

    class Beyond(Toy):
        def _agent(self, i, times):
            yield self.sim.timeout(times[0])
            self.add_reward(i + 5, 1.0)

    with pytest.raises(ModelError, match=r"add_reward\(5, 1.0\) .*no agent at row 5; rows "
                                         r"are 0..1"):
        Beyond().reset(seed=0)


def test_a_padded_mask_row_names_both_widths():
    from gymnasium import spaces

    from deszoo.core import Group
    from deszoo.errors import ModelError

    class Two(Toy):
        def _setup(self):
            box = spaces.Box(0.0, 100.0, (1,), dtype=np.float32)
            return [Group(["a0"], box, spaces.Discrete(2)), Group(["a1"], box, spaces.Discrete(3))]

        def _agent(self, i, times):
            yield self.sim.timeout(times[0])
            yield self.decide(i, [1])  # neither a0's own two actions nor its row's three

    with pytest.raises(ModelError, match=r"agent 'a0' .* expected 2 entries of 0/1 \(its action "
                                         r"space Discrete\(2\)\), or 3 \(padded"):
        Two().reset(seed=0)


class _CountingRows(np.ndarray):
    """An int8 mask buffer that records which rows each write touches."""

    log: list = []

    def __setitem__(self, key, value):
        rows = np.arange(self.shape[0])[key if isinstance(key, tuple) is False else key[0]]
        _CountingRows.log.extend(np.atleast_1d(rows).tolist() if self.ndim == 2 else [-1])
        super().__setitem__(key, value)


@pytest.mark.parametrize("kwargs", [{}, {"leave_at": (1, 1.0)}, {"periodic": 1.0}])
def test_each_mask_row_is_written_at_most_once_per_step(kwargs):
    env = Toy(schedule=((1.0, 2.0, 3.0), (1.0, 3.0, 4.0)), max_time=6.0, **kwargs)
    env.mask_buf = env.mask_buf.view(_CountingRows)  # (the bridge writes it in place)
    _CountingRows.log = []
    env.reset(seed=0)
    steps = 0
    while env.agents:
        _CountingRows.log = []
        env.step({a: 1 for a in env.agents})
        steps += 1
        rows = _CountingRows.log
        assert -1 not in rows, "a mask row was written through a view, not counted"
        assert len(rows) == len(set(rows)), (steps, rows)
    assert steps >= 3


def test_an_unhashable_preset_is_a_config_error():
    with pytest.raises(ConfigError, match="unknown preset"):
        Toy(preset=["default"])


def _mask_unaware_episode(env, steps=300, seed=0):
    rng = np.random.default_rng(seed)
    env.reset(seed=seed)
    for _ in range(steps):
        if not env.agents:
            env.reset()
        infos = env.step({a: int(rng.integers(3)) for a in env.agents})[4]
    return infos


def test_a_policy_that_ignores_masks_gets_one_warning(monkeypatch, recwarn):
    import warnings

    from deszoo.core import invalid
    from deszoo.errors import MasksIgnoredWarning

    monkeypatch.setattr(invalid, "WARNED", set())
    warnings.simplefilter("always")
    _mask_unaware_episode(Toy(periodic=1.0, max_time=1000.0))
    _mask_unaware_episode(Toy(periodic=1.0, max_time=1000.0))  # the same scenario: quiet
    found = [w for w in recwarn if w.category is MasksIgnoredWarning]
    assert len(found) == 1, [str(w.message) for w in recwarn]
    message = str(found[0].message)
    import re

    replaced, decisions, share = map(int, re.search(
        r"^toy_v0: (\d+) of the (\d+) actions .* \((\d+)%\)", message).groups())
    assert decisions >= 100 and share == round(100 * replaced / decisions)
    assert 20 <= share <= 45, "action 0 of three is masked out: about a third"
    assert "DESZOO_WARN_MASKS=0" in message and "compatibility.md#masks" in message
    assert found[0].filename == __file__, "the warning points at the caller's step()"


def test_no_mask_warning_for_legal_play_or_when_silenced(monkeypatch, recwarn):
    import warnings

    from deszoo.core import invalid
    from deszoo.errors import MasksIgnoredWarning

    monkeypatch.setattr(invalid, "WARNED", set())
    warnings.simplefilter("always")
    env = Toy(periodic=1.0, max_time=300.0)
    env.reset(seed=0)
    while env.agents:
        env.step({a: 1 for a in env.agents})  # always legal
    monkeypatch.setenv("DESZOO_WARN_MASKS", "0")
    _mask_unaware_episode(Toy(periodic=1.0, max_time=1000.0))
    assert not [w for w in recwarn if w.category is MasksIgnoredWarning]


def test_the_default_state_is_every_observation_row():
    from deszoo.errors import ResetNeededError

    env = Toy()
    with pytest.raises(ResetNeededError, match="state"):
        env.state()
    env.reset(seed=0)
    env.step({"a0": 1, "a1": 1})
    state = env.state()
    assert state.dtype == np.float32 and env.state_space.contains(state)
    np.testing.assert_array_equal(state, env.obs_buf.reshape(-1))
    state[:] = -1.0  # a fresh array: the env is untouched
    assert (env.obs_buf >= 0).all()


def test_a_model_declares_its_own_state():
    from gymnasium import spaces

    class Clocked(Toy):
        def _state_setup(self):
            return spaces.Box(0.0, 100.0, (2,), dtype=np.float32)

        def _state_all(self, out):
            out[:] = (self.now, len(self.decisions))

    env = Clocked()
    env.reset(seed=0)
    env.step({"a0": 1, "a1": 2})
    assert env.state().tolist() == [2.0, 2.0]

    class Wrong(Toy):
        def _state_setup(self):
            return spaces.Discrete(3)

    with pytest.raises(ConfigError, match="flat float32 Box"):
        Wrong()


class Booked(Toy):
    """Toy that records every ``_flush(until)`` and books the time elapsed as reward."""

    def _build(self):
        super()._build()
        self.flushes = [0.0]

    def _flush(self, until):
        self.rew_buf += until - self.flushes[-1]
        self.flushes.append(until)


def test_a_time_limit_moved_below_the_clock_truncates_without_booking_time_backwards():
    env = Booked()
    env.reset(seed=0)
    env.step({"a0": 1, "a1": 1})  # now 2.0
    env.max_time = 1.5  # (vec.set_attr("max_time", 1.5) mid-episode)
    _, rew, term, trunc, infos = env.step({"a1": 1})
    assert all(trunc.values()) and not any(term.values()) and env.agents == []
    assert env.flushes == sorted(env.flushes), "the clock never runs backwards"
    assert infos["a0"]["sim_time"] == env.now == 2.0
    assert all(r >= 0 for r in rew.values()), rew


def test_step_arrays_after_close_needs_a_reset():
    from deszoo.errors import ResetNeededError

    env = Toy()
    env.reset_arrays(0)
    env.close()
    with pytest.raises(ResetNeededError, match=r"after close\(\); call reset\(\) first"):
        env.step_arrays([1, 1])
    env.reset_arrays(0)
    env.step_arrays([1, 1])  # a new episode runs


class Multi(SimPyParallelEnv):
    """Two agents with MultiDiscrete([2, 3]) actions decide at t = 1, 2, 3."""

    metadata = {"render_modes": [], "name": "multi_v0"}

    def _setup(self):
        from gymnasium import spaces

        from deszoo.core.groups import Group

        return Group(["p", "q"], spaces.Box(0, 10, (1,), np.float32),
                     spaces.MultiDiscrete([2, 3]))

    def _build(self):
        for i in range(2):
            self.sim.process(self._agent(i))

    def _agent(self, i):
        for _ in range(3):
            yield self.sim.timeout(1)
            yield self.decide(i, [1, 1, 0, 1, 1])

    def _observe(self, i, out):
        out[0] = self.now


@pytest.mark.xfail(strict=True, reason="mask_in_obs gives a MultiDiscrete mask as one flat "
                   "int8 Box; gymnasium's MultiDiscrete.sample(mask=...) (which PettingZoo's "
                   "parallel_api_test calls) needs a tuple of one mask per component")
def test_multidiscrete_with_the_mask_in_the_observation_passes_pettingzoos_api_test():
    from pettingzoo.test import parallel_api_test

    parallel_api_test(Multi(mask_in_obs=True), num_cycles=20)


def test_an_episode_that_ends_inside_reset_says_so():
    """No decision before max_time: reset returns no agent, and the step after it says the
    episode ended inside reset, not that a wrapper (SuperSuit's black_death_v3) kept
    stepping."""
    import deszoo
    from deszoo.errors import ResetNeededError

    env = deszoo.make("elevator_v2", preset="small", max_time=5.0)
    next(s for s in range(50) if not env.reset(seed=s)[0])  # a seed with no decision
    assert env.agents == []
    with pytest.raises(ResetNeededError, match="ended inside reset") as info:
        env.step({})
    assert "black_death" not in str(info.value)


@pytest.mark.parametrize("name", ["supplychain_v0", "traffic_v1"])
def test_a_limit_set_as_an_attribute_is_checked_as_a_parameter(name):
    """A model that never ends by itself keeps a limit: setting the last one to None (as
    vec.set_attr does) is refused as make() refuses it (it ran 10,000+ steps unbounded)."""
    import deszoo

    env = deszoo.make(name, preset="small", max_steps=50, max_time=None)
    with pytest.raises(ConfigError, match="max_steps=None with max_time=None: the episode "
                                          "never ends"):
        env.max_steps = None
    with pytest.raises(ConfigError, match="max_cycles=None"):
        env.max_cycles = None
    env.max_steps = 7  # another limit is fine
    assert env.max_steps == 7


def test_a_mask_of_the_agents_own_size_among_wider_kinds_is_padded():
    """decide(i, mask) takes 0/1 per action of the agent's own Discrete space, as custom.md
    says, when another kind has more actions (it wanted the padded width)."""

    class Two(SimPyParallelEnv):
        metadata = {"name": "two_v0", "render_modes": []}

        def _setup(self):
            return [discrete(["a_0"], np.zeros(2), np.ones(2), 3),
                    discrete(["b_0"], np.zeros(2), np.ones(2), 5)]

        def _build(self):
            for i in range(2):
                self.sim.process(self._agent(i))

        def _agent(self, i):
            yield self.sim.timeout(1.0)
            yield self.decide(i, [0, 1, 1] if i == 0 else [1, 0, 0, 0, 1])

        def _observe_all(self, obs):
            obs[:] = 0.0

    env = Two()
    _, infos = env.reset(seed=0)
    assert infos["a_0"]["action_mask"].tolist() == [0, 1, 1]
    assert infos["b_0"]["action_mask"].tolist() == [1, 0, 0, 0, 1]


def test_a_one_entry_mask_is_not_spread_over_the_row():
    """decide(i, [1]) for an agent of 3 actions is a model bug named as such (numpy spread
    the one entry over the row: every action allowed, silently)."""
    from deszoo.errors import ModelError

    class One(Toy):
        def _agent(self, i, times):
            yield self.sim.timeout(times[0])
            yield self.decide(i, [1])

    with pytest.raises(ModelError, match=r"expected \d+ entries of 0/1 .*received shape \(1,\)"):
        One().reset(seed=0)
