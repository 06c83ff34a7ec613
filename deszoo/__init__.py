"""deszoo: SimPy discrete-event simulations as PettingZoo environments, sampled in parallel."""

from deszoo.registry import env_module, list_envs, make

__version__ = "0.1.0"
__all__ = ["__version__", "check", "env_module", "list_envs", "make"]


def check(env_fn, seed: int = 0, steps: int = 200):
    """Check an env class or factory for parallel sampling; see :mod:`deszoo.checks`."""
    from deszoo.checks import check as _check

    return _check(env_fn, seed=seed, steps=steps)
