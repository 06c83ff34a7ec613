"""``deszoo check``: every scenario passes; classic bugs of hand-written envs are caught."""

from __future__ import annotations

import functools
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from gymnasium import spaces

import deszoo
import deszoo.core
from deszoo.checks import check
from devkit import plain_envs
from devkit.plain_envs import Kinds


def failed(verdicts) -> dict[str, str]:
    return {v.name: v.detail for v in verdicts if not v.ok}


@pytest.mark.parametrize("name", deszoo.list_envs())
def test_every_scenario_passes(name):
    verdicts = check(functools.partial(deszoo.make, name, preset="small"), steps=60)
    assert not failed(verdicts), failed(verdicts)
    assert len(verdicts) == 9


def test_a_plain_user_env_passes():
    assert not failed(check(Kinds))


class GlobalRNG(Kinds):
    """Draws its observations from numpy's global random state."""

    def _observe(self):
        return {a: np.random.random(self._obs[a].shape).astype(np.float32) for a in self.agents}


class NewSpaces(Kinds):
    """Builds a new space object on every call."""

    def observation_space(self, agent):
        return spaces.Box(0, 1, self._obs[agent].shape, np.float32)


class OutOfSpace(Kinds):
    """Observes values above its space's high bound."""

    def _observe(self):
        return {a: 2 + self.np_random.random(self._obs[a].shape).astype(np.float32)
                for a in self.agents}


class EmptyMask(Kinds):
    """The base's mask allows nothing on even steps."""

    def _infos(self):
        infos = super()._infos()
        if "base_0" in infos and self.t % 2 == 0:
            infos["base_0"] = {"action_mask": np.zeros(5, dtype=np.int8)}
        return infos


@pytest.mark.parametrize(("env", "check_name", "words"), [
    (GlobalRNG, "determinism", "global random state"),
    (NewSpaces, "spaces", "new object"),
    (OutOfSpace, "observations", "outside"),
    (EmptyMask, "observations", "allows nothing"),
])
def test_classic_bugs_are_caught(env, check_name, words):
    found = failed(check(env))
    assert check_name in found and words in found[check_name], found


def test_command_line_exit_codes(tmp_path):
    """A user's module in a folder of its own: Kinds' source, then a bad subclass."""
    (tmp_path / "user_env.py").write_text(
        Path(plain_envs.__file__).read_text() + "\n\n"
        "class Bad(Kinds):\n"
        "    def _observe(self):\n"
        "        return {a: np.random.random(self._obs[a].shape).astype(np.float32)\n"
        "                for a in self.agents}\n"
    )
    run = functools.partial(subprocess.run, capture_output=True, text=True, cwd=tmp_path,
                            timeout=120)
    ok = run([sys.executable, "-m", "deszoo.cli", "check", "user_env:Kinds", "--steps", "30"])
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "9 of 9 checks passed" in ok.stdout
    bad = run([sys.executable, "-m", "deszoo.cli", "check", "user_env:Bad", "--steps", "30"])
    assert bad.returncode == 1 and "FAIL  determinism" in bad.stdout
    missing = run([sys.executable, "-m", "deszoo.cli", "check", "user_env:Nope"])
    assert missing.returncode == 2 and "has no attribute 'Nope'" in missing.stderr


class _Router(deszoo.core.SimPyParallelEnv):
    """A deszoo model of a user's: one router decides every time unit."""

    metadata = {"name": "router_v0", "render_modes": []}
    params = {"bug": deszoo.core.Param("", lambda v: None, "which bug to have"),
              "max_time": deszoo.core.COMMON["max_time"].with_default(50.0)}

    def _setup(self):
        return deszoo.core.discrete(["router_0", "router_1"], [0.0], [1.0], 2)

    def _build(self):
        self.private = np.random.default_rng()  # unseeded unless bug is ""
        for i in range(2):
            self.sim.process(self._route(i))

    def _route(self, i):
        while True:
            mask = [0, 0] if self.p.bug == "zero mask" else [1, 1]
            yield self.decide(i, mask)  # the user's line the report must name
            yield self.sim.timeout(1.0)

    def _observe_all(self, obs):
        rng = self.private if self.p.bug == "private rng" else self.rng
        obs[:, 0] = rng.random()


def test_an_error_in_a_model_process_is_reported_at_the_model_line():
    import inspect

    found = failed(check(functools.partial(_Router, bug="zero mask"), steps=20))
    line = next(n for n, text in enumerate(inspect.getsourcelines(_Router)[0])
                if "the user's line" in text) + inspect.getsourcelines(_Router)[1]
    assert "all-zero mask" in found["builds"], found
    assert found["builds"].endswith(f"(test_check.py:{line})"), found["builds"]


def test_a_deszoo_model_is_told_to_use_self_rng():
    found = failed(check(functools.partial(_Router, bug="private rng"), steps=20))
    assert "self.rng" in found["determinism"] and "np_random" not in found["determinism"]
    assert not failed(check(_Router, steps=20))


def test_deszoo_check_stays_the_function_after_the_module_is_imported():
    import deszoo.checks  # noqa: F401  (importing a submodule must not shadow the function)

    assert callable(deszoo.check)
    assert not failed(deszoo.check(Kinds, steps=10)) and callable(deszoo.check)


class MultiActions(Kinds):
    """MultiDiscrete([3, 2]) actions, a flat mask of one block per component."""

    def action_space(self, agent):
        return self._multi

    @property
    def _multi(self):
        self.__dict__.setdefault("_md", spaces.MultiDiscrete([3, 2]))
        return self._md

    def _infos(self):
        return {a: {"action_mask": np.array([1, 0, 1, 1, 1], dtype=np.int8)}
                for a in self.agents}

    def step(self, actions):
        for a, x in actions.items():
            assert self._multi.contains(np.asarray(x)), f"{a} got {x}, outside the space"
        return super().step({a: int(x[0]) for a, x in actions.items()})


class Unbounded(Kinds):
    """Box actions without bounds (a policy's raw output)."""

    def action_space(self, agent):
        self.__dict__.setdefault("_box", spaces.Box(-np.inf, np.inf, (2,), np.float32))
        return self._box

    def _infos(self):
        return {a: {} for a in self.agents}

    def step(self, actions):
        return super().step({a: 0 for a in actions})


@pytest.mark.parametrize("env", [MultiActions, Unbounded])
def test_a_plain_env_of_multidiscrete_or_unbounded_box_actions_passes(env):
    """deszoo check's own random actions fit the space: one per component from a
    MultiDiscrete mask's blocks (the vector check sent one int per row and failed), finite
    values from an unbounded Box (sampling overflowed and five checks failed)."""
    assert not failed(check(env, steps=30)), failed(check(env, steps=30))


def test_each_verdict_is_given_as_soon_as_it_is_known():
    """deszoo check prints a check's line when it ends (it printed all nine at the end: a
    slow model showed nothing for minutes)."""
    seen = []
    verdicts = check(Kinds, steps=20, on_verdict=lambda v: seen.append((v, len(seen))))
    assert [v for v, _ in seen] == verdicts and len(verdicts) == 9
