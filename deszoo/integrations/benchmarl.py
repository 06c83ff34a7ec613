"""BenchMARL tasks for deszoo's scenarios, with the global state, masks and groups.

A BenchMARL task says whether its env has a state (``has_state``) and what it is
(``state_spec``); MAPPO's and MASAC's critics read ``state`` only when it is there, else the
concatenated observations. The tasks here build the env with
:func:`deszoo.integrations.torchrl.make_env` (``PettingZooWrapper(return_state=True)``,
masks from the infos, one group per agent kind), so the critics read ``state``::

    from benchmarl.algorithms import MappoConfig
    from benchmarl.experiment import Experiment, ExperimentConfig
    from benchmarl.models import MlpConfig

    from deszoo.integrations.benchmarl import DeszooTask

    task = DeszooTask.ELEVATOR_V2.get_task({"preset": "small"})  # deszoo.make's arguments
    Experiment(task=task, algorithm_config=MappoConfig.get_from_yaml(),
               model_config=MlpConfig.get_from_yaml(),
               critic_model_config=MlpConfig.get_from_yaml(), seed=0,
               config=ExperimentConfig.get_from_yaml()).run()

One member per registered scenario version (``DeszooTask.JOBSHOP_V0``, ...); the config is
the keyword arguments of ``deszoo.make`` (``{}``: the default preset). Actions are discrete
(``supports_continuous_actions`` is ``False``; ``supplychain_v0``'s ``continuous=True`` is not
offered here). Frames are env steps (decision points), so BenchMARL's frame budgets count
decisions, not simulated time. ``max_steps`` (the cap on an evaluation rollout) is the
scenario's ``max_steps``, else 1,000,000; episodes end by themselves before it (see each
scenario's Truncation row). Renders only with ``{"render_mode": "rgb_array"}``.

Needs BenchMARL (``pip install "deszoo[benchmarl]"``); tested with BenchMARL 1.5.2, which
needs TorchRL 0.10 or 0.11 (so not in the same venv as ``deszoo[clients]``'s TorchRL 0.14).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

try:
    from benchmarl.environments.common import Task
    from benchmarl.environments.pettingzoo.common import PettingZooClass
    from benchmarl.utils import _read_yaml_config
except ImportError as exc:  # pragma: no cover - the extra is missing
    raise ImportError(
        "deszoo.integrations.benchmarl needs BenchMARL: pip install 'deszoo[benchmarl]' "
        "(BenchMARL 1.5.2 needs TorchRL < 0.12; install a CPU torch first where there is no GPU)"
    ) from exc

import deszoo
from deszoo.integrations.torchrl import make_env

__all__ = ["DeszooClass", "DeszooTask"]

NO_STEP_LIMIT = 1_000_000  # an evaluation rollout's cap where the scenario sets no max_steps


class DeszooClass(PettingZooClass):
    """One deszoo scenario as a BenchMARL task (its specs are BenchMARL's PettingZoo ones:
    observations, masks and infos per group, and the ``state`` entry)."""

    def __init__(self, name: str, config: dict[str, Any] | None):
        super().__init__(name=name, config=config)
        self.scenario = name.lower()  # the enum member's name: ELEVATOR_V2 -> elevator_v2

    def get_env_fun(self, num_envs: int, continuous_actions: bool, seed: int | None,
                    device: Any) -> Callable[[], Any]:
        if continuous_actions:
            raise ValueError(f"{self.scenario}: deszoo's BenchMARL tasks are discrete; use "
                             "an algorithm with discrete actions or prefer_continuous_actions"
                             "=False")
        name, config = self.scenario, dict(self.config)
        return lambda: make_env(name, seed=seed, device=device, **config)

    def supports_continuous_actions(self) -> bool:
        return False

    def supports_discrete_actions(self) -> bool:
        return True

    def has_state(self) -> bool:
        return True

    def has_render(self, env) -> bool:
        return self.config.get("render_mode") == "rgb_array"

    def max_steps(self, env) -> int:
        steps = deszoo.make(self.scenario, **self.config).max_steps
        return NO_STEP_LIMIT if steps is None else int(steps)

    @staticmethod
    def env_name() -> str:
        return "deszoo"


class DeszooTask(Task):
    """deszoo's scenarios as BenchMARL tasks: ``DeszooTask.ELEVATOR_V2.get_task({...})``."""

    ELEVATOR_V0 = None
    ELEVATOR_V1 = None
    ELEVATOR_V2 = None
    JOBSHOP_V0 = None
    LOADBALANCE_V0 = None
    RIDEHAIL_V0 = None
    RIDEHAIL_V1 = None
    SUPPLYCHAIN_V0 = None
    TRAFFIC_V0 = None
    TRAFFIC_V1 = None
    WAREHOUSE_V0 = None
    WAREHOUSE_V1 = None
    WAREHOUSE_V2 = None

    @staticmethod
    def associated_class():
        return DeszooClass

    def get_task(self, config: dict[str, Any] | None = None) -> DeszooClass:
        """The task with ``config`` as ``deszoo.make``'s keyword arguments (``None``: ``{}``,
        the scenario's defaults; deszoo ships no BenchMARL yaml files)."""
        return DeszooClass(name=self.name, config=dict(config or {}))

    def get_from_yaml(self, path: str | None = None) -> DeszooClass:
        """The task with the config in the yaml file ``path`` (``None``: the defaults)."""
        return self.get_task(None if path is None else _read_yaml_config(path))
