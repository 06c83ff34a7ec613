"""The SimPy-to-PettingZoo bridge that every scenario builds on."""

from deszoo.core.env import NOOP, SimPyParallelEnv
from deszoo.core.util import Integrator

__all__ = ["NOOP", "Integrator", "SimPyParallelEnv"]
