"""``roundrobin``: every env in the calling process, stepped one after the other.

The reference for the other backends (same :class:`~deszoo.vector._host.EnvGroup` code,
same lifecycle) and the one to debug with: no processes, exceptions come with their own
frames. Its transport runs each command at once, as it is handed out.
"""

from __future__ import annotations

import traceback
from collections.abc import Sequence
from typing import Any

from deszoo.vector._host import Buffers, EnvGroup, Layout
from deszoo.vector.base import DeszooVecEnv, VecSpec
from deszoo.vector.options import option
from deszoo.vector.pool import Reply, Transport, Worker, post_guarded

__all__ = ["InProcess", "RoundRobinVecEnv"]


class InProcess(Transport):
    """Each worker is an :class:`EnvGroup` in this process; a command runs when posted."""

    def __init__(self, factory: Any, layout: Layout):
        self.factory = factory
        self.bufs = Buffers(layout)
        self.replies: list[Reply] = []
        self.groups: dict[int, EnvGroup] = {}

    def start(self, w: Worker, reset_seeds: list | None) -> None:
        w.command = "boot"
        try:
            w.handle = self.groups[w.index] = EnvGroup(self.factory, self.bufs, w.first,
                                                       w.count, reset_seeds)
            self.replies.append(Reply(w.index, "booted"))
        except Exception as exc:
            detail = f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"
            self.replies.append(Reply(w.index, "boot_failed", detail=detail))

    def post(self, ws: Sequence[Worker], command: str, payloads: Any) -> None:
        per = isinstance(payloads, dict)
        for k, w in enumerate(ws):
            failures, value = w.handle.run(command, payloads[w.index] if per else payloads)
            w.command = command
            self.replies.append(Reply(w.index, "ok", failures, value))
            if k == 0 and self.hook is not None:
                self.hook("handout")

    def step(self, ws: Sequence[Worker], same_step: bool, deadline: float) -> list[Reply] | None:
        # The hot path: the groups step as posted (Ctrl-C held off until all have), and when
        # none reports a failure no reply goes through the lifecycle's poll. A failure takes
        # the general way.
        post_guarded(self, ws, "step", same_step)
        hook = self.hook
        if hook is not None:
            hook("wait")
            hook("polled")
        if any(r.failures for r in self.replies):
            return []  # the lifecycle polls the replies and handles the failures
        self.replies.clear()
        for w in ws:
            w.command = None  # taken
        if hook is not None:
            hook("taken")
        return None

    def poll(self, deadline: float, want: int) -> list[Reply]:
        out, self.replies = self.replies, []
        return out

    def stop(self, w: Worker) -> None:
        group = self.groups.pop(w.index, None)
        if group is not None:
            group.close()
        w.handle = None

    def close(self) -> None:
        for group in self.groups.values():
            group.close()
        self.groups.clear()


class RoundRobinVecEnv(DeszooVecEnv):
    """All envs in one process; see :func:`deszoo.vector.make_vec`."""

    backend = "roundrobin"
    options = (
        option("num_workers", None, "choice", "none: every env runs in the calling process",
               choices=(1,), none=True,
               note="roundrobin runs every env in the calling process; use backend='shm' "
                    "for worker processes"),
    )

    @classmethod
    def build(cls, spec: VecSpec, seed: int | None, opts: dict[str, Any]) -> DeszooVecEnv:
        return cls(spec, seed, {**opts, "num_workers": 1})

    def _transport(self, opts: dict[str, Any]) -> Transport:
        return InProcess(self.sim_spec.factory, self.layout)
