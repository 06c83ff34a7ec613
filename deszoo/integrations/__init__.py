"""Ready-made adapters and settings for trainers.

Optional: each module imports its trainer, so install the extra first.

- :mod:`deszoo.integrations.sb3`: a vector env as a Stable-Baselines3 ``VecEnv``
  (``deszoo.vector.to_sb3``; ``pip install "deszoo[sb3]"``).
- :mod:`deszoo.integrations.torchrl`: TorchRL's ``PettingZooWrapper`` with the state
  (``return_state=True``), masks and one group per agent kind (``pip install
  "deszoo[torchrl]"``).
- :mod:`deszoo.integrations.benchmarl`: BenchMARL tasks (``DeszooTask.ELEVATOR_V2``, ...) whose
  ``has_state``/``state_spec`` give MAPPO's and MASAC's critics the state (``pip install
  "deszoo[benchmarl]"``; BenchMARL 1.5.2 needs TorchRL < 0.12).
"""
