"""deszoo: SimPy discrete-event simulations as PettingZoo environments, sampled in parallel."""

from deszoo.registry import env_module, list_envs, make

__version__ = "0.1.0"
__all__ = ["__version__", "env_module", "list_envs", "make"]
