"""Client matrix: TorchRL reads deszoo's global state through ``deszoo.integrations.torchrl``.

``make_env`` is ``PettingZooWrapper(return_state=True, group_map=<deszoo's groups>,
categorical_actions=True)``: every newest scenario passes ``check_env_specs``, its
``td["state"]`` is ``env.state()`` at reset and after each step, and a centralised critic that
reads ``state`` (as MAPPO's does) evaluates a rollout; masks arrive per group.
"""

from __future__ import annotations

import functools
import warnings

import numpy as np
import pytest

from deszoo.registry import latest_versions

torch = pytest.importorskip("torch")
pytest.importorskip("torchrl")
from tensordict.nn import TensorDictModule  # noqa: E402
from torchrl.envs import SerialEnv  # noqa: E402
from torchrl.envs.utils import check_env_specs  # noqa: E402

from deszoo.integrations.torchrl import group_map, make_env  # noqa: E402

NEWEST = latest_versions()


def small(name: str, **kwargs):
    with warnings.catch_warnings():  # "tested with PettingZoo 1.24.3 only"
        warnings.simplefilter("ignore")
        return make_env(name, preset="small", seed=0, **kwargs)


def masked_random(groups, seed: int = 0):
    """A uniformly random legal action per agent, read from ``td[group, "action_mask"]``."""
    gen = torch.Generator().manual_seed(seed)

    def policy(td):
        for group in groups:
            mask = td[group, "action_mask"]
            scores = torch.rand(mask.shape, generator=gen) * mask
            td[group, "action"] = scores.argmax(dim=-1)
        return td

    return policy


@pytest.mark.parametrize("name", NEWEST)
def test_the_state_reaches_torchrl(name):
    env = small(name)
    try:
        check_env_specs(env, seed=0)
        deszoo_env = env._env  # the wrapped deszoo env (TorchRL's attribute)
        td = env.reset()
        assert td["state"].shape == deszoo_env.state_space.shape
        np.testing.assert_array_equal(td["state"].numpy(), deszoo_env.state())
        rollout = env.rollout(40, policy=masked_random(env.group_map),
                              break_when_any_done=False)
        np.testing.assert_array_equal(rollout["next", "state"][-1].numpy(), deszoo_env.state())
        assert rollout["next", "state"].std(dim=0).gt(0).any()  # it moves
        for group in env.group_map:  # masks per group, and the policy kept to them
            assert (group, "action_mask") in rollout.keys(True)
        assert deszoo_env.invalid_count.sum() == 0
    finally:
        env.close()


def test_a_centralised_critic_reads_the_state():
    """A MAPPO-style critic on ``state`` evaluates a batched rollout: one value per step."""
    env = SerialEnv(2, functools.partial(small, "elevator_v2"))
    try:
        rollout = env.rollout(30, policy=masked_random(["car"]), break_when_any_done=False)
        size = rollout["state"].shape[-1]
        critic = TensorDictModule(torch.nn.Linear(size, 1), in_keys=["state"],
                                  out_keys=["state_value"])
        values = critic(rollout)["state_value"]
        assert values.shape == (2, 30, 1)
        assert critic.in_keys == ["state"]
    finally:
        env.close()


def test_groups_are_deszoos_and_agents_that_leave_get_masks():
    env = small("supplychain_v0")  # retailer_0, wholesaler_0, ...: one kind of agent
    assert list(env.group_map) == ["agents"] and len(env.group_map["agents"]) == 4
    env.close()
    assert group_map(small("traffic_v1")._env) == {"signal": [f"signal_{k}" for k in range(4)]}
    env = small("ridehail_v0")  # drivers leave the roster: TorchRL needs use_mask
    try:
        assert env.use_mask and not env.done_on_any
        check_env_specs(env, seed=0)
    finally:
        env.close()
