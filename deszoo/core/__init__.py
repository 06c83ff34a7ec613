"""The SimPy-to-PettingZoo bridge that every scenario builds on."""

from deszoo.core.env import NOOP, SimPyParallelEnv
from deszoo.core.groups import Group, discrete
from deszoo.core.params import COMMON, Param
from deszoo.core.util import Integrator

__all__ = ["COMMON", "NOOP", "Group", "Integrator", "Param", "SimPyParallelEnv", "discrete"]
