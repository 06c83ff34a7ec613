"""``supersuit``: SuperSuit's vectorization (``concat_vec_envs_v1``), done correctly.

SuperSuit's pieces as they are: ``ConcatVecEnv`` in the parent for ``num_workers`` 0 or 1,
else its worker loop (``multiproc_vec.async_loop``) with its shared arrays and pickles, the
parent's side as ``ProcConcatVec`` does it. The lifecycle is deszoo's; what it fixes is in
``docs/vector.md`` ("One lifecycle over a transport").
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import functools
import multiprocessing.connection
import time
import traceback
import weakref
from collections.abc import Sequence
from typing import Any

import numpy as np
from gymnasium.vector.utils import CloudpickleWrapper, read_from_shared_memory

from deszoo.core.params import integer, optional
from deszoo.errors import ConfigError
from deszoo.vector import _procs
from deszoo.vector._host import Buffers, EnvFailure, EnvGroup, Layout
from deszoo.vector.base import DeszooVecEnv, VecSpec
from deszoo.vector.options import option
from deszoo.vector.pool import Reply, Transport, Worker, WorkerState

__all__ = ["AgentVecEnv", "SuperSuitTransport", "SuperSuitVecEnv"]

INFO_KEY = "deszoo"
NO_RESTART = object()


class AgentVecEnv:
    """One env as a SuperSuit-style vector env over its agents (``num_envs`` = agents)."""

    def __init__(self, factory: Any, env_index: int, layout: Layout, same_step: bool,
                 reset_seed: Any = NO_RESTART, box: Any = None, action_space: Any = None,
                 events: int = 0):
        self._args = (factory, env_index, layout, same_step, reset_seed, box, action_space,
                      events)
        self.env_index, self.same_step = env_index, same_step
        self.bufs = Buffers(dataclasses.replace(layout, num_sims=1))
        self.bufs.events[0] = events  # its count so far (a replaced worker goes on from it)
        seeds = None if reset_seed is NO_RESTART else [reset_seed]
        self.group = EnvGroup(factory, self.bufs, 0, 1, seeds)
        self.num_envs = layout.n_agents
        env = self.group.envs[0]
        agent = env.possible_agents[0]
        if box is None:  # used on its own, as a SuperSuit vector env
            space = env.observation_space(agent)
            box = space["observation"] if hasattr(space, "spaces") else space
        self.observation_space = box
        self.action_space = action_space or env.action_space(agent)
        self.metadata, self.render_mode = {}, None

    def __reduce__(self):
        # Rebuild from the arguments: pickled numpy views would lose their shared base.
        return (AgentVecEnv, self._args)

    def _answer(self, answer: tuple) -> list[dict]:
        """SuperSuit's infos, with deszoo's ``answer`` (failures first) at the first row."""
        for f in answer[0]:
            f.env_index = self.env_index  # the batch's index (the group's is 0)
        return [{INFO_KEY: answer}] + [{} for _ in range(self.num_envs - 1)]

    def _rows(self, failures: list[EnvFailure]) -> tuple:
        """``failures``, then what the parent needs of this env's rows besides SuperSuit's."""
        b = self.bufs
        final = (b.final_obs.copy(), b.final.copy(), b.final_count.copy(),
                 float(b.final_time[0])) if self.same_step else None
        state = (b.state[0].copy(), b.final_state[0].copy()) if b.layout.state_dim else None
        return (failures, b.mask.copy(), b.needs.copy(), b.live.copy(), b.invalid.copy(),
                b.invalid_count.copy(), float(b.sim_time[0]), int(b.events[0]), final, state)

    def reset(self, seed: int | None = None, options: dict | None = None):
        # deszoo's options: {env index: seed} of the envs of the batch to reset
        plan = (options or {}).get(INFO_KEY, {self.env_index: seed})
        if self.env_index not in plan:  # no answer: the parent leaves its rows alone
            return self.bufs.obs.copy(), [{} for _ in range(self.num_envs)]
        failures = self.group.reset([plan[self.env_index]])
        return self.bufs.obs.copy(), self._answer(self._rows(failures))

    def step(self, actions):
        b = self.bufs
        b.act[:] = actions
        failures = self.group.step(self.same_step)
        answer = self._answer(self._rows(failures))
        return b.obs.copy(), b.rew.copy(), b.term.copy(), b.trunc.copy(), answer

    def env_is_wrapped(self, wrapper_class):
        if isinstance(wrapper_class, tuple):  # a deszoo command: (INFO_KEY, command, payload)
            return self.run(*wrapper_class[1:])
        return [False] * self.num_envs

    def run(self, command: str, payload: Any) -> list[dict]:
        """A deszoo ``call`` or ``rebuild`` (sims are batch-wide; this group's one env is
        index 0), answered as :meth:`_answer` (no answer when it is not for this env)."""
        i = self.env_index
        if i not in (payload.sims if command == "call" else payload[0]):
            return [{} for _ in range(self.num_envs)]
        if command == "call":  # each time it is asked for, by its place in the call
            at = [k for k, s in enumerate(payload.sims) if s == i]
            values = tuple(payload.values[k] for k in at) if payload.values else ()
            payload = dataclasses.replace(payload, sims=(0,) * len(at), values=values)
        else:  # rebuild: ({env index: seed}, reset now)
            payload = ({0: payload[0][i]}, payload[1])
        failures, value = self.group.run(command, payload)
        if command == "call":
            value = list(zip(at, value, strict=True))
        elif payload[1]:  # a rebuild that reset now: the new episode's rows
            value = (self._rows([]), self.bufs.obs.copy())
        return self._answer((failures, value))

    def render(self):
        return None

    def close(self):
        self.group.close()


class _Unlocked:
    """A shared array as gymnasium's shared-memory helpers take it (``get_obj()``), unlocked."""

    def __init__(self, raw: Any):
        self.raw = raw

    def get_obj(self) -> Any:
        return self.raw


def _worker(parent: int | None, *args: Any) -> None:
    """Body of a SuperSuit worker process: SuperSuit's own loop, once the worker leaves
    Ctrl-C to the parent and is armed to die with it."""
    from supersuit.vector.multiproc_vec import async_loop

    _procs.worker_begins(parent)
    async_loop(*args)


@dataclasses.dataclass
class _Proc:
    proc: Any
    pipe: Any


def _stop(procs: dict[int, _Proc], close_timeout: float) -> None:
    """Close SuperSuit workers: ``close``, read the ack, ``terminate``, join, kill (the
    finalizer: no env reference)."""
    ps = list(procs.values())
    procs.clear()
    for p in ps:
        with contextlib.suppress(OSError, ValueError):
            if p.proc.is_alive():
                p.pipe.send("close")  # the worker closes its envs and acknowledges
    deadline = time.monotonic() + close_timeout
    for p in ps:
        with contextlib.suppress(OSError, EOFError, ValueError):
            if p.proc.is_alive() and p.pipe.poll(max(0.0, deadline - time.monotonic())):
                p.pipe.recv()
            p.pipe.send("terminate")
    for p in ps:
        p.proc.join(max(0.0, deadline - time.monotonic()))
        _procs.end(p.proc, p.pipe)  # killed if it outlived the deadline


class SuperSuitTransport(Transport):
    """SuperSuit's ``ConcatVecEnv`` per worker: in this process (``num_cpus`` 0 or 1: a
    command runs when posted) or in SuperSuit's worker processes (``async_loop``);
    ``close_timeout``: seconds :meth:`close` waits for them to exit."""

    def __init__(self, spec: VecSpec, workers: list[Worker], num_cpus: int, same_step: bool,
                 start_method: str | None, close_timeout: float):
        self.spec, self.workers, self.same_step = spec, workers, same_step
        self.n = len(spec.agents)
        self.bufs = Buffers(spec.layout)
        self.in_process = num_cpus <= 1
        self.replies: list[Reply] = []
        self.procs: dict[int, _Proc] = {}
        self.finalizer = weakref.finalize(self, _stop, self.procs, float(close_timeout))
        self.start_method = None
        if self.in_process:
            return
        from supersuit.vector.utils.shared_array import SharedArray

        self.ctx = _procs.context(start_method)
        self.start_method = self.ctx.get_start_method()
        box, rows = spec.obs_box, spec.layout.rows
        # SuperSuit's shared buffers as ProcConcatVec makes them, but no lock on the
        # observations (no one takes it; under spawn or forkserver its named semaphore stays
        # in /dev/shm, sem.mp-*, until the array is garbage collected, after close()).
        self.shared_obs = _Unlocked(self.ctx.RawArray(
            np.ctypeslib.as_ctypes_type(box.dtype), rows * int(np.prod(box.shape))))
        self.obs_view = read_from_shared_memory(box, self.shared_obs, n=rows)
        # rewards, terminations, truncations
        self.shared = [SharedArray((rows,), dtype=t) for t in (np.float32, np.uint8, np.uint8)]

    def start(self, w: Worker, reset_seeds: list | None) -> None:
        from supersuit.vector import ConcatVecEnv

        w.to(WorkerState.BOOT)
        seeds = [NO_RESTART] * w.count if reset_seeds is None else reset_seeds
        sp = self.spec
        fns = [functools.partial(AgentVecEnv, sp.factory, s, sp.layout, self.same_step,
                                 seeds[k], sp.obs_box, sp.action_space,
                                 int(self.bufs.events[s]))
               for k, s in enumerate(w.sims)]
        if self.in_process:
            try:
                w.handle = ConcatVecEnv(fns)
                self.replies.append(Reply(w.index, "booted"))
            except Exception as exc:
                detail = f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"
                self.replies.append(Reply(w.index, "boot_failed", detail=detail))
            return
        inpt, outpt = self.ctx.Pipe()
        constr = CloudpickleWrapper(functools.partial(ConcatVecEnv, fns))
        proc = self.ctx.Process(target=_worker, daemon=True, name=f"deszoo-supersuit-{w.index}",
                                args=(_procs.parent_token(self.start_method), constr, inpt,
                                      outpt, self.shared_obs, *self.shared))
        proc.start()
        outpt.close()
        w.handle = self.procs[w.index] = _Proc(proc, inpt)

    def post(self, ws: Sequence[Worker], command: str, payloads: Any) -> None:
        per = isinstance(payloads, dict)
        for k, w in enumerate(ws):
            w.to(WorkerState(command))
            message = self._message(w, command, payloads[w.index] if per else payloads)
            if self.in_process:
                self.replies.append(self._run_here(w, *message))
            else:
                with contextlib.suppress(OSError):  # a broken pipe: poll sees it is gone
                    w.handle.pipe.send(message)
            if k == 0 and self.hook is not None:
                self.hook("handout")

    def _message(self, w: Worker, command: str, payload: Any) -> tuple[str, Any]:
        if command == "step":
            return ("step", list(self.bufs.act[w.rows]))
        if command == "reset":
            seeds, which = payload
            plan = {s: seeds[k] for k, s in enumerate(w.sims) if which is None or which[k]}
            return ("reset", (None, {INFO_KEY: plan}))
        return ("env_is_wrapped", (INFO_KEY, command, payload))

    def _run_here(self, w: Worker, name: str, data: Any) -> Reply:
        if name == "step":
            obs, rew, term, trunc, infos = w.handle.step(np.asarray(data))
            return self._absorb(w, infos, obs, (rew, term, trunc))
        if name == "reset":
            obs, infos = w.handle.reset(*data)
            return self._absorb(w, infos, obs)
        return self._absorb(w, w.handle.env_is_wrapped(data))

    def poll(self, deadline: float, want: int) -> list[Reply]:
        out, self.replies = self.replies, []
        if out or self.in_process:
            return out
        busy = [w for w in self.workers if w.busy and w.handle is not None]
        waits = [x for w in busy for x in (w.handle.pipe, w.handle.proc.sentinel)]
        ready = set(multiprocessing.connection.wait(waits, max(0.0, deadline - time.monotonic())))
        for w in busy:
            p = w.handle
            if p.pipe not in ready and p.proc.sentinel not in ready:
                continue
            try:
                if p.pipe in ready or p.pipe.poll():  # else its sentinel alone: it ended
                    out.append(self._receive(w, p.pipe.recv()))
                    continue
            except (EOFError, OSError):  # it died as it answered (or was answered)
                pass
            out.append(_procs.died(w.index, p.proc))
        return out

    def _receive(self, w: Worker, item: Any) -> Reply:
        """One message of a SuperSuit worker, as the reply to its command in flight."""
        from supersuit.vector.multiproc_vec import decompress_info, numpy_deepcopy

        if isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], BaseException):
            exc, tb = item  # SuperSuit's loop ended on an exception (boot, or a bug)
            detail = f"{type(exc).__name__}: {exc}\nworker traceback:\n{tb}"
            if w.state is WorkerState.BOOT:
                return Reply(w.index, "boot_failed", detail=detail)
            return Reply(w.index, "died", detail=f" ({detail})")
        if w.state is WorkerState.BOOT:  # its env count: answer with its first row
            w.handle.pipe.send(w.first * self.n)
            return Reply(w.index, "booted")
        if w.state not in (WorkerState.STEP, WorkerState.RESET):
            return self._absorb(w, item)
        rows = w.rows
        # As ProcConcatVec.step_wait does: decompress, deep-copy what the parent keeps.
        obs = numpy_deepcopy(self.obs_view[rows])
        infos = copy.deepcopy(decompress_info(w.count * self.n, [0], [item]))
        if w.state is WorkerState.RESET:
            return self._absorb(w, infos, obs)
        return self._absorb(w, infos, obs, [a.np_arr[rows] for a in self.shared])

    def _absorb(self, w: Worker, infos: list, obs: Any = None, flags: Any = None) -> Reply:
        """A worker's answers (:meth:`AgentVecEnv._answer`) as a reply (failures, a call's
        values); into the batch buffers the rows of a step or reset (``obs``, a step's
        ``flags``: SuperSuit's) or of a rebuild that reset at once (only the worker has them)."""
        n = self.n
        failures, values = [], []
        for k, s in enumerate(w.sims):
            got = infos[k * n].get(INFO_KEY)
            if got is None:
                continue
            failures += got[0]
            if obs is not None:
                self._put(s, got, obs, slice(k * n, (k + 1) * n), flags)
            elif got[1] is not None and w.state is WorkerState.REBUILD:
                self._put(s, *got[1])
            elif got[1] is not None:
                values += got[1]
        values = [v for _, v in sorted(values, key=lambda p: p[0])]  # in the call's order
        return Reply(w.index, "ok", failures, values or None)

    def _put(self, s: int, rows: tuple, obs: Any, local: slice = slice(None),
             flags: Any = None) -> None:
        """Env ``s``'s rows (:meth:`AgentVecEnv._rows`; ``obs`` and ``flags`` at ``local``)."""
        b, at = self.bufs, slice(s * self.n, (s + 1) * self.n)
        _, mask, needs, live, invalid, count, now, events, final, state = rows
        b.obs[at], b.mask[at], b.needs[at], b.live[at] = obs[local], mask, needs, live
        b.invalid[at], b.invalid_count[at] = invalid, count
        b.sim_time[s], b.events[s] = now, events
        if flags is not None:
            rew, term, trunc = flags
            b.rew[at], b.term[at], b.trunc[at] = rew[local], term[local], trunc[local]
        b.final[at] = False
        if final is not None:
            b.final_obs[at], b.final[at], b.final_count[at], b.final_time[s] = final
        if state is not None:
            b.state[s], b.final_state[s] = state

    def stop(self, w: Worker) -> None:
        if w.handle is not None and self.in_process:
            w.handle.close()
        elif w.handle is not None:
            self.procs.pop(w.index, None)
            _procs.end(w.handle.proc, w.handle.pipe)
        w.handle = None

    def close(self) -> None:
        if self.in_process:
            for w in self.workers:
                self.stop(w)
        self.finalizer()

    def describe(self, w: Worker) -> str:
        where = "" if self.in_process or w.handle is None else f"pid {w.handle.proc.pid}, "
        return f"supersuit worker {w.index} ({where}envs {w.first}..{w.first + w.count - 1})"

    def pid(self, w: Worker) -> int | None:
        return None if self.in_process or w.handle is None else w.handle.proc.pid


class SuperSuitVecEnv(DeszooVecEnv):
    """SuperSuit's concat vectorization over :class:`AgentVecEnv`; see ``make_vec``."""

    backend = "supersuit"
    options = (
        option("num_workers", None, optional(integer(0)), "SuperSuit's num_cpus: 0 or 1 "
               "runs in the calling process (default: the usable cores, at most one per env)"),
        _procs.START_METHOD,
        _procs.CLOSE_TIMEOUT,
    )

    @classmethod
    def build(cls, spec: VecSpec, seed: int | None, opts: dict[str, Any]) -> DeszooVecEnv:
        cpus = opts["num_workers"]
        if cpus in (0, 1) and opts["start_method"] is not None:
            raise ConfigError(
                f"make_vec(backend='supersuit'): start_method={opts['start_method']!r} with "
                f"num_workers={cpus}, which runs the envs in this process; leave start_method "
                "out, or give num_workers 2 or more")
        cpus = 0 if cpus == 0 else cls.workers_for(spec, cpus)
        return cls(spec, seed, {**opts, "num_workers": max(1, cpus), "num_cpus": cpus})

    def make_transport(self, opts: dict[str, Any]) -> Transport:
        self.num_cpus = opts["num_cpus"]
        t = SuperSuitTransport(self.sim_spec, self.workers, self.num_cpus, self._same_step,
                               opts["start_method"], opts["close_timeout"])
        if t.start_method is not None:
            self.start_method = t.start_method
        return t
