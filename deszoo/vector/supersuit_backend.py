"""``supersuit``: SuperSuit's vectorization (``concat_vec_envs_v1``), done correctly.

SuperSuit's pieces are used as they are: ``ConcatVecEnv`` (in the parent when
``num_workers`` is 0 or 1), and with ``num_workers >= 2`` its worker loop
(``supersuit.vector.multiproc_vec.async_loop``, one process per worker, observations,
rewards and flags in SuperSuit's shared arrays, actions and infos pickled through one pipe
per worker, deep copies on the parent's side as ``ProcConcatVec.step_wait`` makes them).
The lifecycle around them is deszoo's own (see :mod:`deszoo.vector.base`). What it fixes:

* Seeding. ``ProcConcatVec.reset(seed=s)`` sends ``s + worker_index`` to each worker, which
  then seeds its own envs ``s + worker_index + j``: with ``num_cpus=2`` and 4 envs the seeds
  are 100, 101, 101, 102 (two envs replay one trajectory) and differ from ``num_cpus=0``.
  Here each env gets its own seed (``s + i``), passed in the reset options.
* The per-env adapter. ``pettingzoo_env_to_vec_env_v1`` autoresets in the same step and
  needs a black-death wrapper when agents leave; it is replaced by :class:`AgentVecEnv`,
  which runs the same :class:`~deszoo.vector._host.EnvGroup` as the other backends
  (next-step autoreset, fixed rows, masks), so results are bit-identical to them.
* Faults. An env exception travels back in the infos instead of ending the worker (its
  loop exits on any exception); a dead or silent worker is detected instead of blocking in
  ``recv``; workers are daemonic; ``close`` closes the envs and ends the workers cleanly
  (SuperSuit's ``close`` sends ``("close", None)``, which its own worker loop does not
  understand: its workers end by raising ``AssertionError`` without closing their envs).
* Calls. SuperSuit's worker loop knows no generic call; ``call``/``get_attr``/``set_attr``
  and rebuilds travel as its ``("env_is_wrapped", data)`` message, which it hands to the
  envs and answers with their replies.
"""

from __future__ import annotations

import copy as _copy
import dataclasses
import multiprocessing.connection
import time
import traceback
import weakref
from dataclasses import dataclass
from typing import Any

import gymnasium.vector
import numpy as np
from supersuit.vector import ConcatVecEnv
from supersuit.vector.multiproc_vec import async_loop, decompress_info, numpy_deepcopy
from supersuit.vector.utils.shared_array import SharedArray

from deszoo.errors import ConfigError
from deszoo.vector._host import Buffers, Call, EnvFailure, EnvGroup, Layout
from deszoo.vector.base import DeszooVecEnv, Reply, VecSpec, Worker

__all__ = ["AgentVecEnv", "SuperSuitVecEnv"]

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
        packed = (
            b.mask.copy(), b.needs.copy(), b.live.copy(), b.invalid.copy(),
            b.invalid_count.copy(), float(b.sim_time[0]), int(b.events[0]), final,
            self._global(failures),
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


def _concat(fns: list) -> ConcatVecEnv:
    """A worker's SuperSuit ``ConcatVecEnv`` (module level: picklable under spawn)."""
    return ConcatVecEnv(fns)


@dataclass
class _Proc:
    proc: Any
    pipe: Any
    start: int = 0  # its first row in SuperSuit's shared arrays
    dead: bool = False


class _Shared:
    """SuperSuit's shared arrays and the workers, for the finalizer (no env reference)."""

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
            _end(p)


def _end(p: _Proc) -> None:
    if p.proc.is_alive():
        p.proc.kill()
        p.proc.join(1.0)
    p.pipe.close()


class SuperSuitVecEnv(DeszooVecEnv):
    """SuperSuit's concat vectorization over :class:`AgentVecEnv`; see ``make_vec``.

    Args:
        num_cpus: SuperSuit's ``num_cpus``: 0 or 1 runs in the parent, more starts that
            many worker processes (at most one per env).
    """

    backend = "supersuit"

    def __init__(
        self,
        spec: VecSpec,
        seed: int | None = 0,
        num_cpus: int = 0,
        timeout: float = 60.0,
        start_method: str | None = None,
        close_timeout: float = 5.0,
        **options: Any,
    ):
        import multiprocessing as mp

        self.num_cpus = min(int(num_cpus), spec.num_sims)
        super().__init__(spec, seed=seed, num_workers=max(1, self.num_cpus), timeout=timeout,
                         **options)
        self._bufs = Buffers(self.layout)
        self._in_process = self.num_cpus <= 1
        self._replies: list[Reply] = []
        self._shared = _Shared(float(close_timeout))
        self._finalizer = weakref.finalize(self, self._shared.stop)
        if not self._in_process:
            try:
                self._ctx = mp.get_context(start_method)
            except ValueError:
                raise ConfigError(
                    f"start_method={start_method!r}; valid: None or one of "
                    f"{mp.get_all_start_methods()}"
                ) from None
            self.start_method = self._ctx.get_start_method()
            box = spec.obs_box
            rows = self.num_envs
            # SuperSuit's own shared buffers, as ProcConcatVec makes them, but without the
            # lock gymnasium's create_shared_memory puts on the observations (no one takes
            # it): a lock is a named POSIX semaphore, which under spawn or forkserver stays
            # in /dev/shm (sem.mp-*) until the array is garbage collected, after close().
            self._shared_obs = _Unlocked(self._ctx.RawArray(
                np.ctypeslib.as_ctypes_type(box.dtype), rows * int(np.prod(box.shape))))
            self._obs_view = gymnasium.vector.utils.read_from_shared_memory(
                box, self._shared_obs, n=rows
            )
            self._shared_rews = SharedArray((rows,), dtype=np.float32)
            self._shared_terms = SharedArray((rows,), dtype=np.uint8)
            self._shared_truncs = SharedArray((rows,), dtype=np.uint8)
        self._boot()

    def _fns(self, w: Worker, reset_seeds: list | None) -> list:
        import functools

        seeds = [NO_RESTART] * w.count if reset_seeds is None else reset_seeds
        return [
            functools.partial(AgentVecEnv, self.sim_spec.factory, s, self.layout,
                              self._same_step, seeds[k], self.sim_spec.obs_box,
                              self.sim_spec.action_space)
            for k, s in enumerate(w.sims)
        ]

    # ---- transport ------------------------------------------------------------------
    def _launch(self, w: Worker, reset_seeds: list | None) -> None:
        fns = self._fns(w, reset_seeds)
        if self._in_process:
            try:
                w.handle = ConcatVecEnv(fns)
                self._replies.append(Reply(w.index, "booted"))
            except Exception as exc:
                detail = f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"
                self._replies.append(Reply(w.index, "boot_failed", detail=detail))
            return
        import functools

        inpt, outpt = self._ctx.Pipe()
        constr = gymnasium.vector.async_vector_env.CloudpickleWrapper(
            functools.partial(_concat, fns)
        )
        proc = self._ctx.Process(
            target=async_loop,
            args=(constr, inpt, outpt, self._shared_obs, self._shared_rews,
                  self._shared_terms, self._shared_truncs),
            daemon=True,
            name=f"deszoo-supersuit-{w.index}",
        )
        proc.start()
        outpt.close()
        p = w.handle = _Proc(proc, inpt, start=w.first * self.agents_per_sim)
        self._shared.procs[w.index] = p

    def _post(self, w: Worker, command: str, payload: Any) -> None:
        if self._in_process:
            self._replies.append(self._run_here(w, command, payload))
            return
        p: _Proc = w.handle
        try:
            p.pipe.send(self._message(w, command, payload))
        except OSError:  # broken pipe: the worker is gone; _poll sees its sentinel
            p.dead = True

    def _message(self, w: Worker, command: str, payload: Any) -> Any:
        if command == "step":
            return ("step", list(self._bufs.act[w.rows]))
        if command == "reset":
            seeds, which = payload
            plan = {s: seeds[k] for k, s in enumerate(w.sims) if which is None or which[k]}
            return ("reset", (None, {INFO_KEY: plan}))
        return ("env_is_wrapped", Command(command, payload))

    def _run_here(self, w: Worker, command: str, payload: Any) -> Reply:
        ss: ConcatVecEnv = w.handle
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

    def _poll(self, deadline: float, want: int = 1) -> list[Reply]:
        out, self._replies = self._replies, []
        if out or self._in_process:
            return out
        busy = [w for w in self._workers if w.busy and w.handle is not None]
        waits: dict[Any, Worker] = {}
        for w in busy:
            p: _Proc = w.handle
            if p.dead and not p.proc.is_alive():
                out.append(Reply(w.index, "died", detail=self._exit_detail(p)))
                continue
            waits[p.pipe] = w
            waits[p.proc.sentinel] = w
        if out:
            return out
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return []
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
                    p.proc.join(1.0)
                    out.append(Reply(w.index, "died", detail=self._exit_detail(p)))
                    done.add(w.index)
                    continue
                out.append(self._receive(w, item))
            else:
                p.proc.join(1.0)
                out.append(Reply(w.index, "died", detail=self._exit_detail(p)))
            done.add(w.index)
        return out

    def _receive(self, w: Worker, item: Any) -> Reply:
        """One message of a SuperSuit worker, as the reply to its command in flight."""
        if isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], BaseException):
            exc, tb = item  # SuperSuit's loop ended on an exception (boot, or a bug)
            detail = f"{type(exc).__name__}: {exc}\nworker traceback:\n{tb}"
            if w.busy == "boot":
                return Reply(w.index, "boot_failed", detail=detail)
            return Reply(w.index, "died", detail=f" ({detail})")
        p: _Proc = w.handle
        if w.busy == "boot":  # its env count: answer with its first row
            p.pipe.send(p.start)
            return Reply(w.index, "booted")
        if w.busy == "step":
            rows = w.rows
            # As ProcConcatVec.step_wait does: decompress, deep-copy what the parent keeps.
            obs = numpy_deepcopy(self._obs_view[rows])
            infos = _copy.deepcopy(self._decompress(w, item))
            return self._absorb(w, obs, infos, self._shared_rews.np_arr[rows],
                                self._shared_terms.np_arr[rows],
                                self._shared_truncs.np_arr[rows])
        if w.busy == "reset":
            obs = numpy_deepcopy(self._obs_view[w.rows])
            return self._absorb(w, obs, _copy.deepcopy(self._decompress(w, item)))
        if w.busy == "rebuild":
            return self._rebuilt(w, item)
        return self._answers(w, item)

    def _decompress(self, w: Worker, comp: list) -> list[dict]:
        return decompress_info(w.count * self.agents_per_sim, [0], [comp])

    def _absorb(self, w: Worker, obs, infos, rew=None, term=None, trunc=None) -> Reply:
        """Copy a worker's results into the batch buffers; its env failures as a reply."""
        b, n = self._bufs, self.agents_per_sim
        failures: list[EnvFailure] = []
        for k, s in enumerate(w.sims):
            packed = infos[k * n].get(INFO_KEY)
            if packed is None:
                continue
            rows = slice(s * n, (s + 1) * n)
            local = slice(k * n, (k + 1) * n)
            mask, needs, live, invalid, count, now, events, final, found = packed
            b.obs[rows] = obs[local]
            if rew is not None:
                b.rew[rows], b.term[rows], b.trunc[rows] = rew[local], term[local], trunc[local]
            b.mask[rows], b.needs[rows], b.live[rows] = mask, needs, live
            b.invalid[rows], b.invalid_count[rows] = invalid, count
            b.sim_time[s], b.events[s] = now, events
            b.final[rows] = False
            if final is not None:
                b.final_obs[rows], b.final[rows], b.final_count[rows], b.final_time[s] = final
            failures += found
        return Reply(w.index, "ok", failures)

    def _rebuilt(self, w: Worker, items: list) -> Reply:
        """Replies to a rebuild: the failures, and the rows of envs rebuilt and reset at
        once (SameStep), which only the worker has (the parent's rows are copies)."""
        n = self.agents_per_sim
        obs = np.zeros((w.count * n, *self._bufs.obs.shape[1:]), self._bufs.obs.dtype)
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
            got = items[k * self.agents_per_sim]
            if got is None:
                continue
            found, value = got
            failures += found
            if value is not None:
                values += value
        return Reply(w.index, "ok", failures, values or None)

    @staticmethod
    def _exit_detail(p: _Proc) -> str:
        code = p.proc.exitcode
        signal_note = ", killed by a signal" if code is not None and code < 0 else ""
        return f" (exit code {code}{signal_note}); its envs were lost"

    def _kill(self, w: Worker) -> None:
        if w.handle is None:
            return
        if self._in_process:
            w.handle.close()
        else:
            self._shared.procs.pop(w.index, None)
            _end(w.handle)
        w.handle = None

    def _shutdown(self) -> None:
        if self._in_process:
            for w in self._workers:
                self._kill(w)
        finalizer = getattr(self, "_finalizer", None)  # absent if __init__ failed early
        if finalizer is not None:
            finalizer()

    def describe(self, w: Worker) -> str:
        where = ""
        if not self._in_process and w.handle is not None:
            where = f"pid {w.handle.proc.pid}, "
        return f"supersuit worker {w.index} ({where}envs {w.first}..{w.first + w.count - 1})"

    def worker_pids(self) -> list[int]:
        """Process ids of SuperSuit's workers (empty with ``num_cpus`` 0 or 1)."""
        if self._in_process:
            return []
        return [w.handle.proc.pid for w in self._workers if w.handle is not None]
