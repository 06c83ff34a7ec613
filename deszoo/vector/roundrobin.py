"""``roundrobin``: every env in the calling process, stepped one after the other.

The reference for the other backends (same :class:`~deszoo.vector._host.EnvGroup` code)
and the one to debug with: no processes, exceptions come with their own frames.
"""

from __future__ import annotations

from typing import Any

from deszoo.vector._host import Buffers, EnvGroup
from deszoo.vector.base import DeszooVecEnv, State, VecSpec

__all__ = ["RoundRobinVecEnv"]


class RoundRobinVecEnv(DeszooVecEnv):
    """All envs in one process; see :func:`deszoo.vector.make_vec`."""

    backend = "roundrobin"

    def __init__(self, spec: VecSpec, seed: int | None = 0, **options: Any):
        super().__init__(spec, seed=seed, **options)
        self._bufs = Buffers(self.layout)
        self._group = EnvGroup(spec.factory, self._bufs, 0, self.num_sims)

    def reset(self, *, seed=None, options=None):
        self._check_state(stepping=False)
        failures = self._group.reset(self._seeds(seed))
        self._restarted[:] = False
        if failures:
            self._raise_failures(failures)
        self._state = State.READY
        obs, _, _, _, infos = self._results(self._bufs)
        return obs, infos

    def step(self, actions):
        self._check_state()
        self._check_actions(actions, self._bufs.act)
        self._restarted[:] = False
        failures = self._group.step(same_step=self.autoreset_mode.value == "SameStep")
        if failures:
            if self.on_error != "restart":
                self._raise_failures(failures)
            sims = [f.env_index for f in failures]
            for s in sims:
                self._group.rebuild(s, self._restart_seed(s))
            self._mark_restarted(self._bufs, sims)
        return self._results(self._bufs)

    def close_extras(self, **kwargs: Any) -> None:
        self._group.close()
