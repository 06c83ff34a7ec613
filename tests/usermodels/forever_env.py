"""A user's model that never ends: the carwash without ``max_time`` (most SimPy examples
run forever under ``env.run(until=...)``). ``deszoo check`` must fail it naming the fix."""

from carwash_env import CarwashEnv

from deszoo.core import COMMON


class ForeverEnv(CarwashEnv):
    params = {**CarwashEnv.params, "max_time": COMMON["max_time"]}  # the bridge's: no limit
    presets = {"default": {}}
