"""Support code of deszoo's tests and benchmarks; part of the repository, not of the wheel.

``toyenv`` (a toy env that fails on demand), ``plain_envs`` (PettingZoo envs written without
deszoo), ``chaos_harness`` (faults injected into the vector backends), ``validation`` (the
scenarios against queueing and scheduling theory) and ``docs`` (writes ``docs/envs/*.md``).
pytest imports it through ``pythonpath`` in ``pyproject.toml``; a script in ``benchmarks/``
imports it from its own folder.
"""
