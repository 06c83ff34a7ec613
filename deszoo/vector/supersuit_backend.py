"""``supersuit``: SuperSuit's vectorization (``concat_vec_envs_v1``), done correctly.

SuperSuit's pieces are used as they are, ``ConcatVecEnv`` (``num_cpus`` 0 or 1) and
``ProcConcatVec`` (``num_cpus`` >= 2: one process per CPU, observations in shared memory,
actions and infos pickled through one pipe per worker), with these fixes:

* Seeding. ``ProcConcatVec.reset(seed=s)`` sends ``s + worker_index`` to each worker, which
  then seeds its own envs ``s + worker_index + j``: with ``num_cpus=2`` and 4 envs the seeds
  are 100, 101, 101, 102 (two envs replay one trajectory) and differ from ``num_cpus=0``.
  Here worker ``w`` gets ``s + first_env(w)``, so env ``i`` always gets ``s + i``.
* The per-env adapter. ``pettingzoo_env_to_vec_env_v1`` autoresets in the same step and
  needs a black-death wrapper when agents leave; it is replaced by :class:`AgentVecEnv`,
  which runs the same :class:`~deszoo.vector._host.EnvGroup` as the other backends
  (next-step autoreset, fixed rows, masks), so results are bit-identical to them.
* Reset infos come back decompressed (SuperSuit returns its compressed per-worker form).
* Faults: a worker error is re-raised as :class:`~deszoo.errors.SubEnvError` naming the env
  (no ``print``), a dead or silent worker raises instead of blocking in ``recv``, workers are
  daemonic (an unclosed vector env cannot block interpreter exit), and ``close`` closes the
  envs and ends the workers cleanly (SuperSuit's ``close`` sends ``("close", None)``, which
  its own worker loop does not understand: the workers end by raising ``AssertionError``,
  without closing their envs).
"""

from __future__ import annotations

import copy as _copy
import functools
import time
import weakref
from typing import Any

import gymnasium.vector
import numpy as np
from supersuit.vector import ConcatVecEnv, ProcConcatVec
from supersuit.vector.constructors import call_wrap
from supersuit.vector.multiproc_vec import async_loop, decompress_info, numpy_deepcopy
from supersuit.vector.utils.shared_array import SharedArray

from deszoo.errors import (
    ConfigError,
    SubEnvError,
    VectorEnvError,
    WorkerDiedError,
    WorkerTimeoutError,
)
from deszoo.vector._host import Buffers, EnvGroup, Layout
from deszoo.vector.base import DeszooVecEnv, State, VecSpec

__all__ = ["AgentVecEnv", "SeededProcConcatVec", "SuperSuitVecEnv"]

INFO_KEY = "deszoo"


class AgentVecEnv:
    """One env as a SuperSuit-style vector env over its agents (``num_envs`` = agents)."""

    def __init__(self, factory: Any, env_index: int, layout: Layout, same_step: bool):
        self._args = (factory, env_index, layout, same_step)
        self.env_index = env_index
        self.same_step = same_step
        self.bufs = Buffers(Layout(1, layout.n_agents, layout.obs_dim, layout.n_actions))
        self.group = EnvGroup(factory, self.bufs, 0, 1)
        env = self.group.envs[0]
        agent = env.possible_agents[0]
        self.num_envs = layout.n_agents
        self.observation_space = env._box
        self.action_space = env.action_space(agent)
        self.metadata = env.metadata
        self.render_mode = None

    def __reduce__(self):
        # Rebuild from the arguments: pickled numpy views would lose their shared base.
        return (AgentVecEnv, self._args)

    def _raise(self, failures: list) -> None:
        f = failures[0]
        raise SubEnvError(
            f"env {self.env_index} raised {f.error_type}: {f.message}\n"
            f"worker traceback:\n{f.traceback}",
            env_index=self.env_index,
            error_type=f.error_type,
            worker_traceback=f.traceback,
        )

    def _infos(self) -> list[dict]:
        b = self.bufs
        final = (b.final_obs.copy(), b.final.copy()) if self.same_step else None
        packed = (
            b.mask.copy(), b.needs.copy(), b.live.copy(), b.invalid.copy(),
            b.invalid_count.copy(), float(b.sim_time[0]), int(b.events[0]), final,
        )
        return [{INFO_KEY: packed}] + [{} for _ in range(self.num_envs - 1)]

    def reset(self, seed: int | None = None, options: dict | None = None):
        failures = self.group.reset([seed])
        if failures:
            self._raise(failures)
        return self.bufs.obs.copy(), self._infos()

    def step(self, actions):
        b = self.bufs
        b.act[:] = actions
        failures = self.group.step(self.same_step)
        if failures:
            self._raise(failures)
        return b.obs.copy(), b.rew.copy(), b.term.copy(), b.trunc.copy(), self._infos()

    def step_async(self, actions):
        self._saved = actions

    def step_wait(self):
        return self.step(self._saved)

    def render(self):
        return None

    def close(self):
        self.group.close()

    def env_is_wrapped(self, wrapper_class):
        return [False] * self.num_envs


def _stop_procs(pipes: list, procs: list, timeout: list[float]) -> None:
    """Close SuperSuit workers: ``close``, read the ack, ``terminate``, join, kill."""
    for pipe, proc in zip(pipes, procs, strict=True):
        if proc.is_alive():
            try:
                pipe.send("close")  # the worker closes its envs and acknowledges
            except (OSError, ValueError):
                pass
    deadline = time.monotonic() + timeout[0]
    for pipe, proc in zip(pipes, procs, strict=True):
        try:
            if proc.is_alive() and pipe.poll(max(0.0, deadline - time.monotonic())):
                pipe.recv()
            pipe.send("terminate")
        except (OSError, EOFError, ValueError):
            pass
    for proc in procs:
        proc.join(max(0.0, deadline - time.monotonic()))
    for pipe, proc in zip(pipes, procs, strict=True):
        if proc.is_alive():
            proc.kill()
            proc.join(1.0)
        pipe.close()


class SeededProcConcatVec(ProcConcatVec):
    """SuperSuit's ``ProcConcatVec`` with per-env seeds, typed faults and a start method."""

    def __init__(
        self, vec_env_constrs, observation_space, action_space, tot_num_envs, metadata,
        rows_per_env: int, ctx: Any, timeout: float,
    ):
        # Same as ProcConcatVec.__init__, but with a multiprocessing context and daemonic
        # workers (an unclosed vector env must not block interpreter exit).
        self.observation_space = observation_space
        self.action_space = action_space
        self.num_envs = num_envs = tot_num_envs
        self.metadata = metadata
        self.rows_per_env = rows_per_env
        self.timeout = timeout
        self._closed = False
        self.pipes, self.procs = [], []
        self.shared_obs = gymnasium.vector.utils.create_shared_memory(
            observation_space, n=num_envs, ctx=ctx
        )
        self.shared_act = gymnasium.vector.utils.create_shared_memory(
            action_space, n=num_envs, ctx=ctx
        )
        self.shared_rews = SharedArray((num_envs,), dtype=np.float32)
        self.shared_terms = SharedArray((num_envs,), dtype=np.uint8)
        self.shared_truncs = SharedArray((num_envs,), dtype=np.uint8)
        self.observations_buffers = gymnasium.vector.utils.read_from_shared_memory(
            observation_space, self.shared_obs, n=num_envs
        )
        self.graceful_shutdown_timeout = timeout
        for constr in vec_env_constrs:
            inpt, outpt = ctx.Pipe()
            constr = gymnasium.vector.async_vector_env.CloudpickleWrapper(constr)
            proc = ctx.Process(
                target=async_loop,
                args=(constr, inpt, outpt, self.shared_obs, self.shared_rews,
                      self.shared_terms, self.shared_truncs),
                daemon=True,
            )
            proc.start()
            outpt.close()
            self.pipes.append(inpt)
            self.procs.append(proc)
        self.close_timeout = [5.0]  # drops after a fault: a hung worker is not waited for
        self._finalizer = weakref.finalize(
            self, _stop_procs, self.pipes, self.procs, self.close_timeout
        )
        env_nums = self._receive_info()
        idx_starts, total = [], 0
        for pipe, count in zip(self.pipes, env_nums, strict=True):
            pipe.send(total)
            idx_starts.append(total)
            total += count
        idx_starts.append(total)
        assert total == tot_num_envs
        self.idx_starts = idx_starts

    def _send(self, i: int, message: Any) -> None:
        try:
            self.pipes[i].send(message)
        except OSError:  # broken pipe: the worker is gone
            self.procs[i].join(1.0)
            raise WorkerDiedError(
                f"supersuit worker {i} (pid {self.procs[i].pid}) died (exit code "
                f"{self.procs[i].exitcode}); close() the vector env"
            ) from None

    def step_async(self, actions):
        actions = list(actions)
        for i in range(len(self.pipes)):
            start, end = self.idx_starts[i : i + 2]
            self._send(i, ("step", actions[start:end]))

    def reset(self, seed=None, options=None):
        for i in range(len(self.pipes)):
            # The fix: worker i's first env is env idx_starts[i] // rows_per_env.
            s = None if seed is None else seed + self.idx_starts[i] // self.rows_per_env
            self._send(i, ("reset", (s, options)))
        infos = decompress_info(self.num_envs, self.idx_starts, self._receive_info())
        return numpy_deepcopy(self.observations_buffers), _copy.deepcopy(infos)

    def _receive_info(self):
        data, errors = [], []
        deadline = time.monotonic() + self.timeout
        for i, pipe in enumerate(self.pipes):
            if not pipe.poll(max(0.0, deadline - time.monotonic())):
                raise WorkerTimeoutError(
                    f"supersuit worker {i} (pid {self.procs[i].pid}) gave no answer within "
                    f"timeout={self.timeout:g} s; close() the vector env"
                )
            try:
                item = pipe.recv()
            except (EOFError, OSError):
                self.procs[i].join(1.0)
                raise WorkerDiedError(
                    f"supersuit worker {i} (pid {self.procs[i].pid}) died (exit code "
                    f"{self.procs[i].exitcode}); close() the vector env"
                ) from None
            if isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], BaseException):
                errors.append(item)
                continue
            data.append(item)
        if errors:
            exc, tb = errors[0]
            if isinstance(exc, SubEnvError):
                raise exc
            raise SubEnvError(
                f"supersuit worker raised {type(exc).__name__}: {exc}\nworker traceback:\n{tb}",
                error_type=type(exc).__name__,
                worker_traceback=tb,
            )
        return data

    def close(self):
        if self._closed:
            return
        self._closed = True
        self._finalizer()

    def __del__(self):
        pass  # the weakref finalizer does the cleanup; never block in a destructor


class SuperSuitVecEnv(DeszooVecEnv):
    """SuperSuit's concat vectorization over :class:`AgentVecEnv`; see ``make_vec``."""

    backend = "supersuit"

    def __init__(
        self,
        spec: VecSpec,
        seed: int | None = 0,
        num_cpus: int = 0,
        timeout: float = 60.0,
        start_method: str | None = None,
        **options: Any,
    ):
        import multiprocessing as mp

        super().__init__(spec, seed=seed, **options)
        if self.on_error == "restart":
            raise ConfigError(
                "backend 'supersuit' has no on_error='restart'; use 'shm' or 'roundrobin'"
            )
        same_step = self.autoreset_mode.value == "SameStep"
        fns = [
            functools.partial(AgentVecEnv, spec.factory, i, self.layout, same_step)
            for i in range(self.num_sims)
        ]
        self.num_cpus = min(int(num_cpus), self.num_sims)
        self._bufs = Buffers(self.layout)
        obs_space, act_space = spec.obs_box, spec.action_space
        if self.num_cpus <= 1:
            self._ss = ConcatVecEnv(fns, obs_space, act_space)
        else:
            # The same split as supersuit's MakeCPUAsyncConstructor: ceil(n / cpus) per worker.
            per = -(-self.num_sims // self.num_cpus)
            groups = [fns[i : i + per] for i in range(0, self.num_sims, per)]
            self._ss = SeededProcConcatVec(
                [call_wrap(ConcatVecEnv, g) for g in groups], obs_space, act_space,
                self.num_envs, {"name": spec.name}, self.agents_per_sim,
                mp.get_context(start_method), float(timeout),
            )

    def _absorb(self, obs, infos, rew=None, term=None, trunc=None) -> None:
        b, n = self._bufs, self.agents_per_sim
        b.obs[:] = obs
        if rew is not None:
            b.rew[:] = rew
            b.term[:] = term
            b.trunc[:] = trunc
        else:
            b.rew[:] = 0.0
            b.term[:] = False
            b.trunc[:] = False
        for s in range(self.num_sims):
            mask, needs, live, invalid, count, now, events, final = infos[s * n][INFO_KEY]
            rows = slice(s * n, (s + 1) * n)
            b.mask[rows], b.needs[rows], b.live[rows] = mask, needs, live
            b.invalid[rows], b.invalid_count[rows] = invalid, count
            b.sim_time[s], b.events[s] = now, events
            if final is not None:
                b.final_obs[rows], b.final[rows] = final

    def _guard(self, fn, *args):
        try:
            return fn(*args)
        except SubEnvError:
            # In-process envs are intact enough to reset; a SuperSuit worker that raised
            # has exited, so the vector env cannot go on.
            self._state = State.NEEDS_RESET if self.num_cpus <= 1 else State.FAILED
            raise
        except VectorEnvError:
            self._state = State.FAILED
            if isinstance(self._ss, SeededProcConcatVec):
                self._ss.close_timeout[0] = 0.2
            raise

    def reset(self, *, seed=None, options=None):
        self._check_state(stepping=False)
        seeds = self._seeds(seed)
        if all(s is None for s in seeds):
            first = None
        elif seeds == list(range(seeds[0], seeds[0] + self.num_sims)):
            first = seeds[0]
        else:
            raise ConfigError("backend 'supersuit' takes an int seed (env i gets seed + i)")
        obs, infos = self._guard(self._ss.reset, first, options)
        self._absorb(obs, infos)
        self._state = State.READY
        obs, _, _, _, infos = self._results(self._bufs)
        return obs, infos

    def step(self, actions):
        self._check_state()
        self._check_actions(actions, self._bufs.act)
        obs, rew, term, trunc, infos = self._guard(self._ss.step, self._bufs.act)
        self._absorb(obs, infos, rew, term, trunc)
        return self._results(self._bufs)

    def worker_pids(self) -> list[int]:
        """Process ids of SuperSuit's workers (empty with ``num_cpus`` 0 or 1)."""
        return [p.pid for p in getattr(self._ss, "procs", [])]

    def close_extras(self, **kwargs: Any) -> None:
        self._ss.close()
