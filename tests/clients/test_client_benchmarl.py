"""Client matrix: BenchMARL's MAPPO trains on a deszoo task with its critic on ``state``.

``deszoo.integrations.benchmarl.DeszooTask`` builds the env with ``PettingZooWrapper(
return_state=True)`` and says ``has_state``, so BenchMARL gives the experiment a
``state_spec`` and MAPPO's critic reads ``state`` instead of the concatenated observations;
masks and deszoo's agent groups come through as well. BenchMARL 1.5.2 needs TorchRL 0.10 or
0.11, so CI runs this file in a venv of its own (``pip install -e ".[dev,benchmarl]"``).
"""

from __future__ import annotations

import pytest

import deszoo

pytest.importorskip("torch")
pytest.importorskip("benchmarl")
from benchmarl.algorithms import MappoConfig  # noqa: E402
from benchmarl.experiment import Experiment, ExperimentConfig  # noqa: E402
from benchmarl.models import MlpConfig  # noqa: E402

from deszoo.integrations.benchmarl import DeszooClass, DeszooTask  # noqa: E402


def tiny_config(folder) -> ExperimentConfig:
    """Two iterations of 64 frames, one evaluation episode, nothing logged or rendered."""
    cfg = ExperimentConfig.get_from_yaml()
    cfg.max_n_iters = 2
    cfg.on_policy_collected_frames_per_batch = 64
    cfg.on_policy_n_envs_per_worker = 2
    cfg.on_policy_n_minibatch_iters = 1
    cfg.on_policy_minibatch_size = 32
    cfg.evaluation_interval = 64
    cfg.evaluation_episodes = 1
    cfg.render = False
    cfg.loggers = []
    cfg.create_json = False
    cfg.checkpoint_interval = 0
    cfg.save_folder = str(folder)
    return cfg


def mappo(task: DeszooClass, folder) -> Experiment:
    return Experiment(task=task, algorithm_config=MappoConfig.get_from_yaml(),
                      model_config=MlpConfig.get_from_yaml(),
                      critic_model_config=MlpConfig.get_from_yaml(), seed=0,
                      config=tiny_config(folder))


def test_one_task_per_registered_scenario():
    assert [t.name.lower() for t in DeszooTask] == deszoo.list_envs()
    task = DeszooTask.WAREHOUSE_V2.get_task({"preset": "small"})
    assert task.has_state() and task.supports_discrete_actions()
    assert not task.supports_continuous_actions()
    assert task.config == {"preset": "small"} and DeszooTask.JOBSHOP_V0.get_task().config == {}


@pytest.mark.parametrize("name", ["elevator_v2", "supplychain_v0"])
def test_mappo_critic_reads_the_state(name, tmp_path):
    task = DeszooTask[name.upper()].get_task({"preset": "small"})
    experiment = mappo(task, tmp_path)
    env = deszoo.make(name, preset="small")
    assert experiment.state_spec["state"].shape == env.state_space.shape
    groups = experiment.group_map
    assert sorted(a for agents in groups.values() for a in agents) == sorted(env.possible_agents)
    for group in groups:
        assert (group, "action_mask") in experiment.action_mask_spec.keys(True)
        critic = experiment.losses[group].critic_network
        assert critic.in_keys == ["state"]  # not (group, "observation")
    experiment.run()  # collects, trains and evaluates: the critic read every batch's state
    assert experiment.n_iters_performed == 2
