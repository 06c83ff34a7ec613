"""``supersuit``: SuperSuit's vectorization (``concat_vec_envs_v1``), done correctly.

SuperSuit's pieces are used as they are: ``ConcatVecEnv`` in the parent when
``num_workers`` is 0 or 1, else its worker loop (``multiproc_vec.async_loop``; observations,
rewards and flags in its shared arrays, actions and infos pickled, deep copies on the
parent's side as ``ProcConcatVec.step_wait`` makes them). The lifecycle is deszoo's. What it
fixes (seeding per env, next-step autoreset through :class:`AgentVecEnv` instead of
``pettingzoo_env_to_vec_env_v1``, env errors in the infos, dead or silent workers detected,
a clean ``close``, workers that ignore Ctrl-C and die with the parent, calls sent as its
``env_is_wrapped`` message) is listed in ``docs/vector.md`` ("One lifecycle over a
transport").
"""


from __future__ import annotations

import copy as _copy
import dataclasses
import functools
import multiprocessing.connection
import time
import traceback
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from deszoo.vector import _procs
from deszoo.vector._host import Buffers, Call, EnvFailure, EnvGroup, Layout
from deszoo.vector.base import DeszooVecEnv, VecSpec
from deszoo.vector.options import option
from deszoo.vector.pool import Reply, Transport, Worker, WorkerState

__all__ = ["AgentVecEnv", "SuperSuitTransport", "SuperSuitVecEnv"]

INFO_KEY = "deszoo"
NO_RESTART = object()


@dataclass(frozen=True)
class Command:
    """A deszoo command for the envs of a SuperSuit worker (sent as ``env_is_wrapped``)."""

    command: str
    payload: Any


class AgentVecEnv:
    """One env as a SuperSuit-style vector env over its agents (``num_envs`` = agents)."""

    def __init__(
        self,
        factory: Any,
        env_index: int,
        layout: Layout,
        same_step: bool,
        reset_seed: Any = NO_RESTART,
        box: Any = None,
        action_space: Any = None,
    ):
        self._args = (factory, env_index, layout, same_step, reset_seed, box, action_space)
        self.env_index = env_index
        self.same_step = same_step
        self.bufs = Buffers(dataclasses.replace(layout, num_sims=1))
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
        self.metadata = {}
        self.render_mode = None

    def __reduce__(self):
        # Rebuild from the arguments: pickled numpy views would lose their shared base.
        return (AgentVecEnv, self._args)

    def _global(self, failures: list[EnvFailure]) -> list[EnvFailure]:
        for f in failures:
            f.env_index = self.env_index
        return failures

    def _infos(self, failures: list[EnvFailure]) -> list[dict]:
        b = self.bufs
        final = None
        if self.same_step:
            final = (b.final_obs.copy(), b.final.copy(), b.final_count.copy(),
                     float(b.final_time[0]))
        state = (b.state[0].copy(), b.final_state[0].copy()) if b.layout.state_dim else None
        packed = (
            b.mask.copy(), b.needs.copy(), b.live.copy(), b.invalid.copy(),
            b.invalid_count.copy(), float(b.sim_time[0]), int(b.events[0]), final,
            self._global(failures), state,
        )
        return [{INFO_KEY: packed}] + [{} for _ in range(self.num_envs - 1)]

    def reset(self, seed: int | None = None, options: dict | None = None):
        plan = (options or {}).get(INFO_KEY)  # {env index: seed} of the envs to reset
        failures = []
        if plan is None:
            failures = self.group.reset([seed])
        elif self.env_index in plan:
            failures = self.group.reset([plan[self.env_index]])
        return self.bufs.obs.copy(), self._infos(failures)

    def step(self, actions):
        b = self.bufs
        b.act[:] = actions
        failures = self.group.step(self.same_step)
        return b.obs.copy(), b.rew.copy(), b.term.copy(), b.trunc.copy(), self._infos(failures)

    def step_async(self, actions):
        self._saved = actions

    def step_wait(self):
        return self.step(self._saved)

    def run(self, cmd: Command) -> tuple[list[EnvFailure], Any]:
        """A deszoo command (sims are batch-wide; this group's one env is index 0)."""
        payload = cmd.payload
        if cmd.command == "call":
            mine = payload.sims.index(self.env_index)
            values = (payload.values[mine],) if payload.values else ()
            payload = Call(payload.kind, payload.name, (0,), payload.args, payload.kwargs,
                           values)
        elif cmd.command == "rebuild":
            seeds, reset_now = payload
            payload = ({0: seeds[self.env_index]}, reset_now)
        failures, value = self.group.run(cmd.command, payload)
        if cmd.command == "rebuild" and payload[1]:  # reset now: the new episode's rows
            value = (self.bufs.obs.copy(), self._infos([])[0][INFO_KEY])
        return self._global(failures), value

    def env_is_wrapped(self, wrapper_class):
        if isinstance(wrapper_class, Command):  # a deszoo command, see the module docstring
            if wrapper_class.payload is None or self._wants(wrapper_class):
                out = self.run(wrapper_class)
            else:
                out = None
            return [out] + [None] * (self.num_envs - 1)
        return [False] * self.num_envs

    def _wants(self, cmd: Command) -> bool:
        if cmd.command == "call":
            return self.env_index in cmd.payload.sims
        if cmd.command == "rebuild":
            return self.env_index in cmd.payload[0]
        return True

    def render(self):
        return None

    def close(self):
        self.group.close()


class _Unlocked:
    """A shared array as gymnasium's shared-memory helpers take it (``get_obj()``), with
    no lock; pickled (with the array) only to start a worker process."""

    def __init__(self, raw: Any):
        self.raw = raw

    def get_obj(self) -> Any:
        return self.raw


def _concat(fns: list) -> Any:
    """A worker's SuperSuit ``ConcatVecEnv`` (module level: picklable under spawn)."""
    from supersuit.vector import ConcatVecEnv

    return ConcatVecEnv(fns)


def _worker(parent: int | None, *args: Any) -> None:
    """Body of a SuperSuit worker process: SuperSuit's own loop, once the worker leaves
    Ctrl-C to the parent and is armed to die with it."""
    from supersuit.vector.multiproc_vec import async_loop

    _procs.worker_begins(parent)
    async_loop(*args)


@dataclass
class _Proc:
    proc: Any
    pipe: Any
    start: int = 0  # its first row in SuperSuit's shared arrays
    dead: bool = False


class _Shared:
    """SuperSuit's workers, for the finalizer (no env reference)."""

    def __init__(self, close_timeout: float):
        self.procs: dict[int, _Proc] = {}
        self.close_timeout = close_timeout

    def stop(self) -> None:
        """Close SuperSuit workers: ``close``, read the ack, ``terminate``, join, kill."""
        procs = list(self.procs.values())
        self.procs.clear()
        for p in procs:
            if p.proc.is_alive():
                try:
                    p.pipe.send("close")  # the worker closes its envs and acknowledges
                except (OSError, ValueError):
                    pass
        deadline = time.monotonic() + self.close_timeout
        for p in procs:
            try:
                if p.proc.is_alive() and p.pipe.poll(max(0.0, deadline - time.monotonic())):
                    p.pipe.recv()
                p.pipe.send("terminate")
            except (OSError, EOFError, ValueError):
                pass
        for p in procs:
            p.proc.join(max(0.0, deadline - time.monotonic()))
        for p in procs:
            _procs.end(p.proc, p.pipe)


class SuperSuitTransport(Transport):
    """SuperSuit's ``ConcatVecEnv`` per worker: in this process (``num_cpus`` 0 or 1: a
    command runs when posted) or in SuperSuit's worker processes (``async_loop``).

    Args:
        spec: what the workers build.
        workers: the vector env's workers.
        num_cpus: SuperSuit's ``num_cpus``.
        same_step: the vector env's autoreset mode is ``SameStep``.
        start_method: the multiprocessing start method (worker processes only).
        close_timeout: seconds :meth:`close` waits for workers to exit.
    """

    def __init__(self, spec: VecSpec, workers: list[Worker], num_cpus: int, same_step: bool,
                 start_method: str | None, close_timeout: float):
        self.spec = spec
        self.layout = spec.layout
        self.workers = workers
        self.n = len(spec.agents)
        self.same_step = same_step
        self.bufs = Buffers(self.layout)
        self.in_process = num_cpus <= 1
        self.replies: list[Reply] = []
        self.shared = _Shared(float(close_timeout))
        self.finalizer = weakref.finalize(self, self.shared.stop)
        self.start_method = None
        if not self.in_process:
            import gymnasium.vector
            from supersuit.vector.utils.shared_array import SharedArray

            self.ctx = _procs.context(start_method)
            self.start_method = self.ctx.get_start_method()
            box = spec.obs_box
            rows = self.layout.rows
            # SuperSuit's own shared buffers, as ProcConcatVec makes them, but without the
            # lock gymnasium's create_shared_memory puts on the observations (no one takes
            # it): a lock is a named POSIX semaphore, which under spawn or forkserver stays
            # in /dev/shm (sem.mp-*) until the array is garbage collected, after close().
            self.shared_obs = _Unlocked(self.ctx.RawArray(
                np.ctypeslib.as_ctypes_type(box.dtype), rows * int(np.prod(box.shape))))
            self.obs_view = gymnasium.vector.utils.read_from_shared_memory(
                box, self.shared_obs, n=rows
            )
            self.shared_rews = SharedArray((rows,), dtype=np.float32)
            self.shared_terms = SharedArray((rows,), dtype=np.uint8)
            self.shared_truncs = SharedArray((rows,), dtype=np.uint8)

    def _fns(self, w: Worker, reset_seeds: list | None) -> list:
        seeds = [NO_RESTART] * w.count if reset_seeds is None else reset_seeds
        return [
            functools.partial(AgentVecEnv, self.spec.factory, s, self.layout,
                              self.same_step, seeds[k], self.spec.obs_box,
                              self.spec.action_space)
            for k, s in enumerate(w.sims)
        ]

    # ---- the contract ---------------------------------------------------------------
    def start(self, w: Worker, reset_seeds: list | None) -> None:
        w.to(WorkerState.BOOT)
        fns = self._fns(w, reset_seeds)
        if self.in_process:
            try:
                w.handle = _concat(fns)
                self.replies.append(Reply(w.index, "booted"))
            except Exception as exc:
                detail = f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"
                self.replies.append(Reply(w.index, "boot_failed", detail=detail))
            return
        import gymnasium.vector

        inpt, outpt = self.ctx.Pipe()
        constr = gymnasium.vector.async_vector_env.CloudpickleWrapper(
            functools.partial(_concat, fns)
        )
        proc = self.ctx.Process(
            target=_worker,
            args=(_procs.parent_token(self.start_method), constr, inpt, outpt,
                  self.shared_obs, self.shared_rews, self.shared_terms, self.shared_truncs),
            daemon=True,
            name=f"deszoo-supersuit-{w.index}",
        )
        proc.start()
        outpt.close()
        p = w.handle = _Proc(proc, inpt, start=w.first * self.n)
        self.shared.procs[w.index] = p

    def post(self, ws: Sequence[Worker], command: str, payloads: Any) -> None:
        per = isinstance(payloads, dict)
        for k, w in enumerate(ws):
            payload = payloads[w.index] if per else payloads
            w.to(WorkerState(command))
            if self.in_process:
                self.replies.append(self._run_here(w, command, payload))
            else:
                p: _Proc = w.handle
                try:
                    p.pipe.send(self._message(w, command, payload))
                except OSError:  # broken pipe: the worker is gone; poll sees its sentinel
                    p.dead = True
            if k == 0 and self.hook is not None:
                self.hook("handout")

    def _message(self, w: Worker, command: str, payload: Any) -> Any:
        if command == "step":
            return ("step", list(self.bufs.act[w.rows]))
        if command == "reset":
            seeds, which = payload
            plan = {s: seeds[k] for k, s in enumerate(w.sims) if which is None or which[k]}
            return ("reset", (None, {INFO_KEY: plan}))
        return ("env_is_wrapped", Command(command, payload))

    def _run_here(self, w: Worker, command: str, payload: Any) -> Reply:
        ss = w.handle
        message = self._message(w, command, payload)
        if message[0] == "step":
            obs, rew, term, trunc, infos = ss.step(np.asarray(message[1]))
            return self._absorb(w, obs, infos, rew, term, trunc)
        if message[0] == "reset":
            obs, infos = ss.reset(*message[1])
            return self._absorb(w, obs, infos)
        if command == "rebuild":
            return self._rebuilt(w, ss.env_is_wrapped(message[1]))
        return self._answers(w, ss.env_is_wrapped(message[1]))

    def poll(self, deadline: float, want: int) -> list[Reply]:
        out, self.replies = self.replies, []
        if out or self.in_process:
            return out
        waits: dict[Any, Worker] = {}
        for w in self.workers:
            if not w.busy or w.handle is None:
                continue
            p: _Proc = w.handle
            if p.dead and not p.proc.is_alive():
                out.append(_procs.died(w.index, p.proc))
                continue
            waits[p.pipe] = w
            waits[p.proc.sentinel] = w
        if out:
            return out
        remaining = max(0.0, deadline - time.monotonic())
        done: set[int] = set()
        for ready in multiprocessing.connection.wait(list(waits), remaining):
            w = waits[ready]
            if w.index in done:
                continue
            p = w.handle
            if ready is p.pipe or p.pipe.poll():
                try:
                    item = p.pipe.recv()
                except (EOFError, OSError):
                    out.append(_procs.died(w.index, p.proc))
                    done.add(w.index)
                    continue
                out.append(self._receive(w, item))
            else:
                out.append(_procs.died(w.index, p.proc))
            done.add(w.index)
        return out

    def _receive(self, w: Worker, item: Any) -> Reply:
        """One message of a SuperSuit worker, as the reply to its command in flight."""
        from supersuit.vector.multiproc_vec import numpy_deepcopy

        if isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], BaseException):
            exc, tb = item  # SuperSuit's loop ended on an exception (boot, or a bug)
            detail = f"{type(exc).__name__}: {exc}\nworker traceback:\n{tb}"
            if w.state is WorkerState.BOOT:
                return Reply(w.index, "boot_failed", detail=detail)
            return Reply(w.index, "died", detail=f" ({detail})")
        p: _Proc = w.handle
        if w.state is WorkerState.BOOT:  # its env count: answer with its first row
            try:
                p.pipe.send(p.start)
            except OSError:  # killed just after it sent its count
                return _procs.died(w.index, p.proc)
            return Reply(w.index, "booted")
        if w.state is WorkerState.STEP:
            rows = w.rows
            # As ProcConcatVec.step_wait does: decompress, deep-copy what the parent keeps.
            obs = numpy_deepcopy(self.obs_view[rows])
            infos = _copy.deepcopy(self._decompress(w, item))
            return self._absorb(w, obs, infos, self.shared_rews.np_arr[rows],
                                self.shared_terms.np_arr[rows],
                                self.shared_truncs.np_arr[rows])
        if w.state is WorkerState.RESET:
            obs = numpy_deepcopy(self.obs_view[w.rows])
            return self._absorb(w, obs, _copy.deepcopy(self._decompress(w, item)))
        if w.state is WorkerState.REBUILD:
            return self._rebuilt(w, item)
        return self._answers(w, item)

    def _decompress(self, w: Worker, comp: list) -> list[dict]:
        from supersuit.vector.multiproc_vec import decompress_info

        return decompress_info(w.count * self.n, [0], [comp])

    def _absorb(self, w: Worker, obs, infos, rew=None, term=None, trunc=None) -> Reply:
        """Copy a worker's results into the batch buffers; its env failures as a reply."""
        b, n = self.bufs, self.n
        failures: list[EnvFailure] = []
        for k, s in enumerate(w.sims):
            packed = infos[k * n].get(INFO_KEY)
            if packed is None:
                continue
            rows = slice(s * n, (s + 1) * n)
            local = slice(k * n, (k + 1) * n)
            mask, needs, live, invalid, count, now, events, final, found, state = packed
            b.obs[rows] = obs[local]
            if rew is not None:
                b.rew[rows], b.term[rows], b.trunc[rows] = rew[local], term[local], trunc[local]
            b.mask[rows], b.needs[rows], b.live[rows] = mask, needs, live
            b.invalid[rows], b.invalid_count[rows] = invalid, count
            b.sim_time[s], b.events[s] = now, events
            b.final[rows] = False
            if final is not None:
                b.final_obs[rows], b.final[rows], b.final_count[rows], b.final_time[s] = final
            if state is not None:
                b.state[s], b.final_state[s] = state
            failures += found
        return Reply(w.index, "ok", failures)

    def _rebuilt(self, w: Worker, items: list) -> Reply:
        """Replies to a rebuild: the failures, and the rows of envs rebuilt and reset at
        once (SameStep), which only the worker has (the parent's rows are copies)."""
        n = self.n
        obs = np.zeros((w.count * n, *self.bufs.obs.shape[1:]), self.bufs.obs.dtype)
        infos: list[dict] = [{} for _ in range(w.count * n)]
        failures: list[EnvFailure] = []
        for k in range(w.count):
            got = items[k * n]
            if got is None:
                continue
            found, value = got
            failures += found
            if value is not None:
                obs[k * n : (k + 1) * n], infos[k * n] = value[0], {INFO_KEY: value[1]}
        self._absorb(w, obs, infos)
        return Reply(w.index, "ok", failures)

    def _answers(self, w: Worker, items: list) -> Reply:
        """Replies to a command sent as ``env_is_wrapped``: one ``(failures, value)`` per
        env that ran it, at its first row."""
        failures, values = [], []
        for k in range(w.count):
            got = items[k * self.n]
            if got is None:
                continue
            found, value = got
            failures += found
            if value is not None:
                values += value
        return Reply(w.index, "ok", failures, values or None)

    def stop(self, w: Worker) -> None:
        if w.handle is None:
            return
        if self.in_process:
            w.handle.close()
        else:
            self.shared.procs.pop(w.index, None)
            _procs.end(w.handle.proc, w.handle.pipe)
        w.handle = None

    def close(self) -> None:
        if self.in_process:
            for w in self.workers:
                self.stop(w)
        self.finalizer()

    def describe(self, w: Worker) -> str:
        where = ""
        if not self.in_process and w.handle is not None:
            where = f"pid {w.handle.proc.pid}, "
        return f"supersuit worker {w.index} ({where}envs {w.first}..{w.first + w.count - 1})"

    def pids(self) -> list[int]:
        if self.in_process:
            return []
        return [w.handle.proc.pid for w in self.workers if w.handle is not None]


class SuperSuitVecEnv(DeszooVecEnv):
    """SuperSuit's concat vectorization over :class:`AgentVecEnv`; see ``make_vec``.

    ``num_workers`` is SuperSuit's ``num_cpus``: 0 or 1 runs in the parent, more starts that
    many worker processes (at most one per env).
    """

    backend = "supersuit"
    options = (
        option("num_workers", None, "int", "SuperSuit's num_cpus: 0 or 1 runs in the calling "
               "process (default: the usable cores, at most one per env)", minimum=0,
               none=True),
        _procs.START_METHOD,
        _procs.CLOSE_TIMEOUT,
    )

    @classmethod
    def build(cls, spec: VecSpec, seed: int | None, opts: dict[str, Any]) -> DeszooVecEnv:
        cpus = opts["num_workers"]
        if cpus != 0:
            cpus = cls.workers_for(spec, cpus)
        return cls(spec, seed, {**opts, "num_workers": max(1, cpus), "num_cpus": cpus})

    def _transport(self, opts: dict[str, Any]) -> Transport:
        self.num_cpus = opts["num_cpus"]
        t = SuperSuitTransport(self.sim_spec, self._workers, self.num_cpus, self._same_step,
                               opts["start_method"], opts["close_timeout"])
        if t.start_method is not None:
            self.start_method = t.start_method
        return t
