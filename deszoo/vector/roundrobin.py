"""``roundrobin``: every env in the calling process, one after the other; the reference
backend and the one to debug with."""

from __future__ import annotations

import traceback
from collections.abc import Sequence
from typing import Any

from deszoo.core.params import named_check, optional
from deszoo.vector._host import Buffers, EnvGroup, Layout
from deszoo.vector.base import DeszooVecEnv, VecSpec
from deszoo.vector.options import option
from deszoo.vector.pool import (
    IDLE,
    STEP,
    Reply,
    Transport,
    Worker,
    WorkerState,
    sigint_deferred,
)

__all__ = ["InProcess", "RoundRobinVecEnv"]


class InProcess(Transport):
    """Each worker is an :class:`EnvGroup` in this process; a command runs when posted."""

    def __init__(self, factory: Any, layout: Layout):
        self.factory = factory
        self.bufs = Buffers(layout)
        self.replies: list[Reply] = []
        self.groups: dict[int, EnvGroup] = {}

    def start(self, w: Worker, reset_seeds: list | None) -> None:
        w.to(WorkerState.BOOT)
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
            w.to(WorkerState(command))
            self.replies.append(Reply(w.index, "ok", failures, value))
            if k == 0 and self.hook is not None:
                self.hook("handout")

    def step(self, ws: Sequence[Worker], same_step: bool, deadline: float) -> list[Reply] | None:
        # The hot path, Ctrl-C held off (a batch stepped in part can be neither finished
        # nor undone). Failures are queued inside the block, so none is lost to a Ctrl-C.
        failed = False
        with sigint_deferred():
            for w in ws:
                failures = w.handle.step(same_step)
                if failures:
                    w.state = STEP  # IDLE -> STEP (WORKER_NEXT), inlined
                    self.replies.append(Reply(w.index, "ok", failures))
                    failed = True
        if not failed:
            return None
        for w in ws:
            if w.state is IDLE:
                w.state = STEP
                self.replies.append(Reply(w.index, "ok"))
        return []  # the pool polls the replies

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
        option("num_workers", None, optional(named_check(
            "1 (roundrobin runs every env in the calling process; use backend='shm' for "
            "worker processes)", lambda v: type(v) is int and v == 1)),
            "none: every env runs in the calling process"),
    )

    @classmethod
    def build(cls, spec: VecSpec, seed: int | None, opts: dict[str, Any]) -> DeszooVecEnv:
        return cls(spec, seed, {**opts, "num_workers": 1})

    def make_transport(self, opts: dict[str, Any]) -> Transport:
        return InProcess(self.sim_spec.factory, self.layout)
