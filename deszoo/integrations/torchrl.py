"""TorchRL's ``PettingZooWrapper`` set up for deszoo: the global state, masks and groups.

TorchRL's defaults leave the state out (``return_state=False``), so a centralised critic
built on the wrapper reads the concatenated observations instead. :func:`make_env` builds
the wrapper with every setting a deszoo scenario needs::

    from deszoo.integrations.torchrl import make_env

    env = make_env("elevator_v2", preset="small", seed=0)
    td = env.rollout(10)   # td["state"], td["car", "observation"], td["car", "action_mask"]

- ``return_state=True``: ``td["state"]`` is ``env.state()`` (``state_space``), the whole
  system as the model sees it.
- ``group_map``: one group per kind of agent (deszoo's own groups: the agents that share
  spaces, named by their common name prefix, e.g. ``car``), so parameter sharing and
  centralised critics span the agents that can share them.
- ``categorical_actions=True``: an action is an index (``Discrete``), as the masks are.
- masks: ``infos[agent]["action_mask"]`` becomes ``td[group, "action_mask"]`` (TorchRL reads
  it from the infos on its own).
- agents that leave: with ``black_death=False`` (``ridehail_v0``) an agent leaves when its
  shift ends, so ``use_mask=True, done_on_any=False``; on the defaults (``black_death=True``)
  every agent stays listed until the episode ends and TorchRL's defaults are right.

Needs ``torchrl`` (``pip install "deszoo[torchrl]"``, after a CPU ``torch`` where there is no
GPU); tested with TorchRL 0.14.1 and 0.11.1.
"""

from __future__ import annotations

from typing import Any

import deszoo

try:
    from torchrl.envs.libs.pettingzoo import PettingZooWrapper
except ImportError as exc:  # pragma: no cover - the extra is missing
    raise ImportError(
        "deszoo.integrations.torchrl needs torchrl: pip install 'deszoo[torchrl]' (install a "
        "CPU torch first where there is no GPU)"
    ) from exc

__all__ = ["group_map", "make_env", "wrapper_kwargs"]


def group_map(env) -> dict[str, list[str]]:
    """One TorchRL group per deszoo agent group (agents that share spaces), named by the
    agents' common name prefix (``car_0``, ``car_1`` -> ``car``), else ``agents`` (one
    group) or ``group_{k}``."""
    groups = env.unwrapped.groups
    out: dict[str, list[str]] = {}
    for k, g in enumerate(groups):
        prefixes = {name.rpartition("_")[0] for name in g.names}
        if len(prefixes) == 1 and "" not in prefixes:
            key = prefixes.pop()
        else:
            key = "agents" if len(groups) == 1 else f"group_{k}"
        if key in out:
            key = f"{key}_{k}"
        out[key] = list(g.names)
    return out


def wrapper_kwargs(env) -> dict[str, Any]:
    """``PettingZooWrapper``'s settings for the deszoo env ``env`` (see the module docstring)."""
    kwargs: dict[str, Any] = {
        "return_state": True,
        "group_map": group_map(env),
        "categorical_actions": True,
    }
    if not env.unwrapped.config["black_death"]:  # agents leave the roster one by one
        kwargs.update(use_mask=True, done_on_any=False)
    return kwargs


def make_env(name: str, *, seed: int | None = None, device: Any = "cpu",
             **env_kwargs: Any) -> PettingZooWrapper:
    """Scenario ``name`` (``deszoo.make(name, **env_kwargs)``) as TorchRL's
    ``PettingZooWrapper`` with the global state, masks and one group per agent kind."""
    env = deszoo.make(name, **env_kwargs)
    return PettingZooWrapper(env, seed=seed, device=device, **wrapper_kwargs(env))
