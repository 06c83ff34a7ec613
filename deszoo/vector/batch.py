"""A vector env's rows: actions checked in, Gymnasium's results out, restarts marked."""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from gymnasium import spaces

from deszoo.errors import ConfigError, InvalidActionError, ResetNeededError
from deszoo.vector._host import Buffers

__all__ = ["Batch"]


class Batch:
    """The rows of ``num_sims`` envs of ``n`` agents each, env-major, over ``bufs``.

    Attributes:
        restarted: per row, its env was rebuilt after a fault (for one step).
        any_restarted: ``restarted.any()`` (hot-path shortcut).
        held: per row, rebuilt outside a step; the next step reports it.
    """

    def __init__(self, spec: Any, bufs: Buffers, copy: bool, same_step: bool):
        self.spec = spec
        self.layout = spec.layout
        self.bufs = bufs
        self.copy = copy
        self.same_step = same_step
        self.mask_in_obs = spec.mask_in_obs  # PettingZoo's {"observation", "action_mask"}
        self.agents = list(spec.agents)
        self.n = n = len(self.agents)
        self.num_sims = spec.num_sims
        self.num_rows = self.num_sims * n
        rows = spec.rows
        self.act_type = rows.type
        self.n_actions = int(rows.mask_dim) if rows.type is spaces.Discrete else 0
        self.noop_mask = rows.noop_mask()
        self.kind = np.tile(rows.kind, self.num_sims)  # each row's kind (group index)
        self.row_sim = np.repeat(np.arange(self.num_sims), n)
        self.restarted = np.zeros(self.num_rows, dtype=bool)
        self.held = np.zeros(self.num_rows, dtype=bool)
        self.any_restarted = False
        self.hook: Callable[[str], None] | None = None

    # ---- actions --------------------------------------------------------------------
    def check_actions(self, actions: Any, out: np.ndarray, rows: Any = None) -> None:
        """Check ``actions`` (for ``rows``, default all) and write them into ``out``."""
        if isinstance(actions, np.ndarray):
            a = actions
        else:
            try:
                a = np.asarray(actions)
            except ValueError as exc:  # ragged nested lists
                raise InvalidActionError(
                    f"actions must be an array of shape {out.shape}: {exc}"
                ) from None
        if a.shape != out.shape:
            raise InvalidActionError(
                f"actions must have shape {out.shape} (one action per row: "
                f"{out.shape[0] // self.n} envs x {self.n} agents), "
                f"got shape {a.shape}"
            )
        if self.act_type is spaces.Box:
            self._check_box(a, out, rows)
            return
        if a.dtype.kind not in "iu":
            raise InvalidActionError(
                f"actions must be an integer array, got dtype {a.dtype}"
                + (f"; valid actions are 0..{self.n_actions - 1}"
                   if self.act_type is spaces.Discrete else "")
            )
        np.copyto(out, a, casting="unsafe")
        if self.act_type is spaces.Discrete:
            # One reduction checks both ends: negatives wrap to huge unsigned values.
            if out.view(np.uint64).max() >= self.n_actions:
                bad = int(np.flatnonzero((a < 0) | (a >= self.n_actions))[0])
                row = bad if rows is None else int(rows[bad])  # its row in the full batch
                raise InvalidActionError(
                    f"row {row} (env {row // self.n}, agent "
                    f"{self.agents[row % self.n]!r}) got action "
                    f"{a[bad]}; the action space is Discrete({self.n_actions}), valid actions "
                    f"are 0..{self.n_actions - 1}"
                )
            return
        nvec = self.spec.rows.nvec
        bad_rows = np.flatnonzero(((a < 0) | (a >= nvec)).any(axis=1))
        if len(bad_rows):
            bad = int(bad_rows[0])
            raise InvalidActionError(
                f"row {bad if rows is None else int(rows[bad])} got action "
                f"{a[bad].tolist()}; the action space is "
                f"MultiDiscrete({nvec.tolist()})"
            )

    def _check_box(self, a: np.ndarray, out: np.ndarray, rows: Any) -> None:
        if a.dtype.kind not in "iuf":
            raise InvalidActionError(f"actions must be a float array, got dtype {a.dtype}")
        r = self.spec.rows
        n = self.n
        idx = np.arange(self.num_rows) if rows is None else np.asarray(rows)
        agent = idx % n
        own = np.arange(r.act_dim)[None, :] < r.act_dims[agent][:, None]  # not padding
        low, high = r.act_low[agent], r.act_high[agent]
        # Compared as the buffer stores them (as Box.contains does): 0.7 is in Box(0, 0.7).
        f = a.astype(out.dtype, copy=False)
        bad = own & ~(np.isfinite(a) & (f >= low) & (f <= high))
        if bad.any():
            row = int(np.flatnonzero(bad.any(axis=1))[0])
            raise InvalidActionError(
                f"row {idx[row]} (agent {self.agents[idx[row] % n]!r}) got action "
                f"{a[row].tolist()}, outside its Box [{low[row].tolist()}, "
                f"{high[row].tolist()}] (actions are not clipped; NaN is refused)"
            )
        np.copyto(out, np.where(own, f, 0.0), casting="unsafe")

    # ---- results --------------------------------------------------------------------
    def results(self, rows: Any = None) -> tuple:
        """``(obs, rew, term, trunc, infos)`` for ``rows`` (all rows when ``None``)."""
        bufs = self.bufs
        if self.hook is not None:
            self.hook("after")
        take: Callable[[np.ndarray], np.ndarray]
        if rows is None:
            take = np.ndarray.copy if self.copy else np.ndarray.view  # (C: no frame)
            sim_time = bufs.sim_time[self.row_sim]
            restarted = take(self.restarted)
        else:
            take = operator.itemgetter(rows)  # fancy indexing copies anyway
            sim_time = bufs.sim_time[rows // self.n]
            restarted = self.restarted[rows]
        infos = {
            "action_mask": take(bufs.mask),
            "needs_action": take(bufs.needs),
            "live": take(bufs.live),
            "sim_time": sim_time,
            "restarted": restarted,
            "invalid_action": take(bufs.invalid),
            "invalid_count": take(bufs.invalid_count),
            "kind": take(self.kind),
        }
        if self.layout.state_dim:  # every row gets its env's state, as sim_time
            infos["state"] = bufs.state[self.row_sim if rows is None
                                        else rows // self.n]
        obs = take(bufs.obs)
        if self.same_step:
            final_obs = take(bufs.final_obs)
            if self.mask_in_obs:  # an ended episode's agents decide nothing: no-op masks
                noop = np.broadcast_to(self.noop_mask, infos["action_mask"].shape).copy()
                final_obs = {"observation": final_obs, "action_mask": noop}
            final = take(bufs.final)
            infos["final_obs"] = final_obs
            infos["_final_obs"] = final
            # Gymnasium's final_info: what the ended episodes' rows reported last (their
            # clock and invalid-action count; every agent of an ended episode is gone).
            n = self.n
            final_time = (bufs.final_time.repeat(n) if rows is None
                          else bufs.final_time[rows // n])
            infos["final_info"] = {
                "sim_time": final_time,
                "invalid_count": take(bufs.final_count),
                "_sim_time": final,
                "_invalid_count": final,
            }
            if self.layout.state_dim:
                infos["final_info"]["state"] = bufs.final_state[
                    self.row_sim if rows is None else rows // n]
                infos["final_info"]["_state"] = final
            infos["_final_info"] = final
        if self.mask_in_obs:
            obs = {"observation": obs, "action_mask": infos["action_mask"].copy()}
        return obs, take(bufs.rew), take(bufs.term), take(bufs.trunc), infos

    def mark_restarted(self, sims: Sequence[int], reset_now: bool, held: bool = False) -> None:
        """Report the episodes of rebuilt envs ``sims`` as truncated; their rows show the
        new episode (``reset_now``) or are dead until the next step. ``held``: rebuilt
        outside a step, reported by the next (:meth:`begin_step`)."""
        if self.hook is not None:
            self.hook("marked")
        bufs, n = self.bufs, self.n
        for s in sims:
            rows = slice(s * n, (s + 1) * n)
            bufs.rew[rows] = 0.0
            bufs.term[rows] = False
            bufs.trunc[rows] = True
            # The lost episode's last values went with the env: SameStep reports zeros.
            bufs.final_obs[rows] = 0.0
            bufs.final_count[rows] = 0
            bufs.final_time[s] = 0.0
            bufs.final_state[s] = 0.0
            bufs.final[rows] = self.same_step
            if not reset_now:
                bufs.obs[rows] = 0.0
                bufs.live[rows] = False
                bufs.needs[rows] = False
                bufs.mask[rows] = self.noop_mask
                bufs.invalid[rows] = False
                bufs.invalid_count[rows] = 0
            self.restarted[rows] = True
            self.held[rows] = held
        self.any_restarted = True

    def begin_step(self, ws: Sequence[Any], hold: bool = True) -> list[Any]:
        """Clear the restart flags of ``ws``'s rows; return the workers that step. With
        ``hold`` (a sync step) a worker whose envs were all rebuilt outside a step sits it
        out instead: its rows report the restart, as if the fault had struck this step."""
        out = []
        for w in ws:
            rows = w.rows
            held = self.held[rows]
            if held.any():
                whole = bool(held.all())
                held[...] = False
                if hold and whole:
                    continue
            self.restarted[rows] = False
            out.append(w)
        self.any_restarted = bool(self.restarted.any())
        return out

    def clear_restarted(self, rows: Any = None) -> None:
        """A reset of ``rows`` (default all) clears their restart flags."""
        rows = slice(None) if rows is None else rows
        self.restarted[rows] = False
        self.held[rows] = False
        self.any_restarted = bool(self.restarted.any())

    def check_no_pending_reset(self) -> None:
        """Disabled autoreset: an env whose episode ended must be reset before a step."""
        ended = ~self.bufs.live.reshape(self.num_sims, self.n).any(axis=1)
        # Rebuilt outside a step (a worker lost in a call): this step reports the restart.
        ended &= ~self.held.reshape(self.num_sims, self.n).any(axis=1)
        if ended.any():
            env = int(np.flatnonzero(ended)[0])
            raise ResetNeededError(
                f"env {env} ended its episode and autoreset_mode='Disabled': reset it with "
                "reset(options={'reset_mask': mask}) before the next step"
            )

    def reset_mask(self, options: dict | None, first: bool) -> np.ndarray | None:
        """Per-env booleans from Gymnasium's ``reset_mask`` option (per row), or None."""
        if options and set(options) - {"reset_mask"}:
            other = sorted(set(options) - {"reset_mask"})
            raise ConfigError(f"reset(options=...): {other} would not reach the envs (only "
                              "'reset_mask' is read); set what they change with set_attr or "
                              "env_kwargs")
        if not options or "reset_mask" not in options:  # read, never pop: callers reuse it
            return None
        mask = options["reset_mask"]
        if not isinstance(mask, np.ndarray) or mask.dtype != np.bool_:
            raise ConfigError("options['reset_mask'] must be a numpy bool array, one per row")
        if mask.shape != (self.num_rows,):
            raise ConfigError(
                f"options['reset_mask'] has shape {mask.shape}; expected ({self.num_rows},) "
                f"(one per row: {self.num_sims} envs x {self.n} agents)"
            )
        per_env = mask.reshape(self.num_sims, self.n)
        if not (per_env.all(axis=1) | ~per_env.any(axis=1)).all():
            bad = int(np.flatnonzero(per_env.any(axis=1) & ~per_env.all(axis=1))[0])
            raise ConfigError(
                f"options['reset_mask'] selects some rows of env {bad} but not all; an env "
                "resets as a whole (all its agents' rows)"
            )
        if not mask.any():
            raise ConfigError("options['reset_mask'] selects no env")
        if first and not mask.all():
            raise ResetNeededError("reset the whole batch once before a partial reset")
        which = per_env[:, 0].copy()
        return None if which.all() else which
