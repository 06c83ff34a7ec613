"""Client matrix: TorchRL's ``PettingZooWrapper`` on every scenario, on default settings:
``check_env_specs``, ``SerialEnv``, ``ParallelEnv`` and a random (mask-unaware) policy.

TorchRL builds its info spec from the reset infos and writes every step's infos into it,
so deszoo's info keys are the same, with the same types, on every step; it sends an action
for every possible agent, including those that have left, which the default contract
ignores. ridehail_v0's drivers leave ``agents``: TorchRL's default ``done_on_any=True`` would
end the episode at the first one, so it runs with ``done_on_any=False, use_mask=True`` too
(v1 keeps them listed: ``test_client_departures.py``).
"""

from __future__ import annotations

import functools
import warnings

import pytest

import deszoo

torch = pytest.importorskip("torch")
pytest.importorskip("torchrl")
from torchrl.envs import ParallelEnv, SerialEnv  # noqa: E402
from torchrl.envs.libs.pettingzoo import PettingZooWrapper  # noqa: E402
from torchrl.envs.utils import check_env_specs  # noqa: E402

ENVS = deszoo.list_envs()


def wrapped(name: str, **wrapper_kwargs) -> PettingZooWrapper:
    with warnings.catch_warnings():  # "tested with PettingZoo 1.24.3 only"
        warnings.simplefilter("ignore")
        return PettingZooWrapper(deszoo.make(name, preset="small"), **wrapper_kwargs)


def random_policy(env):
    """Uniform over the whole action space, masks ignored (as a fresh policy would be)."""
    spec = env.full_action_spec

    def policy(td):
        return td.update(spec.rand())  # the spec has the batch dimensions already

    return policy


@pytest.mark.parametrize("name", ENVS)
def test_check_env_specs_and_random_rollout(name):
    env = wrapped(name)
    try:
        check_env_specs(env, seed=0)
        td = env.rollout(100, policy=random_policy(env), break_when_any_done=False)
        assert td.batch_size[0] == 100
    finally:
        env.close()


@pytest.mark.parametrize("name", ["jobshop_v0", "ridehail_v1", "traffic_v1"])
@pytest.mark.parametrize("batched", ["serial", "parallel"])
def test_batched_envs_with_a_random_policy(name, batched):
    cls = SerialEnv if batched == "serial" else ParallelEnv
    env = cls(2, functools.partial(wrapped, name))
    try:
        check_env_specs(env, seed=0)
        td = env.rollout(60, policy=random_policy(env), break_when_any_done=False)
        assert td.batch_size[:2] == (2, 60)
    finally:
        env.close()


def test_agents_that_leave_with_done_on_any_false():
    env = wrapped("ridehail_v0", done_on_any=False, use_mask=True)
    try:
        check_env_specs(env, seed=0)
        td = env.rollout(400, policy=random_policy(env), break_when_any_done=False)
        mask = td[("next", "driver", "mask")]
        assert (~mask).any(), "no driver left during the rollout"
    finally:
        env.close()
