"""``roundrobin``: every env in the calling process, stepped one after the other.

The reference for the other backends (same :class:`~deszoo.vector._host.EnvGroup` code,
same lifecycle) and the one to debug with: no processes, exceptions come with their own
frames. Its transport runs each command at once, as it is handed out.
"""

from __future__ import annotations

import traceback
from typing import Any

from deszoo.vector._host import Buffers, EnvGroup
from deszoo.vector.base import DeszooVecEnv, Reply, VecSpec, Worker

__all__ = ["RoundRobinVecEnv"]


class RoundRobinVecEnv(DeszooVecEnv):
    """All envs in one process; see :func:`deszoo.vector.make_vec`."""

    backend = "roundrobin"

    def __init__(self, spec: VecSpec, seed: int | None = 0, **options: Any):
        super().__init__(spec, seed=seed, num_workers=1, **options)
        self._bufs = Buffers(self.layout)
        self._replies: list[Reply] = []
        self._boot()

    def _launch(self, w: Worker, reset_seeds: list | None) -> None:
        try:
            w.handle = EnvGroup(self.sim_spec.factory, self._bufs, w.first, w.count,
                                reset_seeds)
            self._replies.append(Reply(w.index, "booted"))
        except Exception as exc:
            detail = f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"
            self._replies.append(Reply(w.index, "boot_failed", detail=detail))

    def _post(self, w: Worker, command: str, payload: Any) -> None:
        failures, value = w.handle.run(command, payload)
        self._replies.append(Reply(w.index, "ok", failures, value))

    def _poll(self, deadline: float, want: int = 1) -> list[Reply]:
        out, self._replies = self._replies, []
        return out

    def _kill(self, w: Worker) -> None:
        if w.handle is not None:
            w.handle.close()
            w.handle = None

    def _shutdown(self) -> None:
        for w in self._workers:
            self._kill(w)
