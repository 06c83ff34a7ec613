"""A hand-written masked PPO loop (torch) on deszoo vector envs, parameter-shared;
``centralised=True`` makes it MAPPO (the critic reads the global state). Needs torch.

The whole recipe: every row of ``make_vec`` is one agent of one simulation; the policy
sees ``obs`` and ``infos["action_mask"]`` for all rows at once and masks its logits. With
``centralised=True`` the vector env carries each simulation's ``state()``
(``make_vec(..., state=True)``) and the critic of each row reads its own observation and
the state of its simulation (an agent-specific global state, as MAPPO does); the actor
still sees only the observation, so the policy runs without the state. With
``autoreset_mode="SameStep"`` a finished simulation is reset inside ``step``:
``infos["_final_obs"]`` marks its rows (the episode boundary) and ``infos["final_obs"]``
holds their last observations, used to bootstrap truncated episodes.

How the rollout is collected (``collect``):

* ``"sync"``: one vector env of all simulations, ``vec.step`` per step.
* ``"pipelined"``: two vector envs of half the simulations each (seeded so that together
  they are the simulations of ``"sync"``), driven with ``send``/``recv``: the policy acts on
  one half while the other half's workers step (EnvPool and PufferLib's double buffering).
* ``"halves"``: the same two halves and the same order of policy calls, but each ``send``
  is followed at once by its ``recv``: the synchronous form of ``"pipelined"``. The two
  give bit-identical results for a fixed seed (the policy draws its samples in the same
  order; only the waiting moves). ``"sync"`` samples all rows at once, so it draws
  other samples than the two.

``examples/ppo_loop.py`` runs it from the command line; ``deszoo bench --train`` times it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

try:
    import torch
    from torch import nn
except ImportError as exc:  # the README's install has no torch
    raise ImportError("deszoo.ppo needs torch: pip install torch --index-url "
                      "https://download.pytorch.org/whl/cpu") from exc

from deszoo.core.config import MAX_SEED
from deszoo.core.params import Param, check_all, integer, optional, real
from deszoo.errors import ConfigError
from deszoo.vector import make_vec, step_seconds, usable_cores

__all__ = ["COLLECT", "PHASES", "ActorCritic", "Phases", "train"]

COLLECT = ("sync", "halves", "pipelined")
"""How :func:`train` collects its rollouts (see the module's docstring)."""

# train's numbers, checked before anything is built (a 0 crashed deep inside, a negative
# time_scale or a gamma above 1 trained on silently wrong returns).
_ARGS = {
    "timesteps": Param(100_000, integer(1), "rows to train for"),
    "num_envs": Param(16, integer(1), "simulations"),
    "seed": Param(0, integer(0, MAX_SEED), "seed of torch and of the first sim"),
    "n_steps": Param(128, integer(1), "steps per rollout"),
    "epochs": Param(4, integer(0), "passes over each rollout"),
    "minibatch": Param(512, integer(1), "rows per gradient step"),
    "lr": Param(3e-4, real(0, open_min=True), "Adam's learning rate"),
    "gamma": Param(0.99, real(0, 1), "discount"),
    "lam": Param(0.95, real(0, 1), "GAE lambda"),
    "clip": Param(0.2, real(0, open_min=True), "PPO's clip range"),
    "ent_coef": Param(0.0, real(), "entropy bonus"),
    "hidden": Param(64, integer(1), "units per hidden layer"),
    "reward_scale": Param(1.0, real(), "reward multiplier"),
    "time_scale": Param(None, optional(real(0, open_min=True)), "simulated seconds per gamma"),
    "num_workers": Param(None, optional(integer(1)), "workers in all"),
}

PHASES = ("env", "inference", "update")
"""The phases :class:`Phases` times; the rest of the wall time is ``other``."""


class Phases:
    """Wall time of a training run by phase, measured by wrapping the calls of each phase.

    ``env``: the vector env's calls (``step``, ``reset``, ``send``, ``recv``: in pipelined
    collection only the waiting that is left); ``inference``: the policy's forward passes in
    the rollout; ``update``: advantages and gradient steps. ``wall`` is set by whoever owns
    the run (:func:`train` sets it from its first reset to its last update).
    """

    def __init__(self) -> None:
        self.seconds = dict.fromkeys(PHASES, 0.0)
        self.calls = dict.fromkeys(PHASES, 0)
        self.wall = 0.0

    def wrap(self, fn: Callable[..., Any], phase: str) -> Callable[..., Any]:
        """``fn``, adding its wall time to ``phase``."""
        if phase not in self.seconds:
            raise ConfigError(f"Phases.wrap: unknown phase {phase!r}; phases are {PHASES}")
        seconds, calls, clock = self.seconds, self.calls, time.perf_counter

        def timed(*args: Any, **kwargs: Any) -> Any:
            t0 = clock()
            try:
                return fn(*args, **kwargs)
            finally:
                seconds[phase] += clock() - t0
                calls[phase] += 1

        return timed

    def shares(self) -> dict[str, float]:
        """Each phase's share of ``wall``, and ``other`` for the rest."""
        if self.wall <= 0:
            return {**dict.fromkeys(PHASES, 0.0), "other": 0.0}
        out = {p: s / self.wall for p, s in self.seconds.items()}
        out["other"] = max(0.0, 1.0 - sum(out.values()))
        return out


class ActorCritic(nn.Module):
    """Actor on the observation; critic on the observation and, with ``state_dim``, the
    global state after it (MAPPO)."""

    def __init__(self, obs_dim: int, n_actions: int, hidden: int = 64, state_dim: int = 0):
        super().__init__()
        self.pi = nn.Sequential(nn.Linear(obs_dim, hidden), nn.Tanh(),
                                nn.Linear(hidden, hidden), nn.Tanh(), nn.Linear(hidden, n_actions))
        self.v = nn.Sequential(nn.Linear(obs_dim + state_dim, hidden), nn.Tanh(),
                               nn.Linear(hidden, hidden), nn.Tanh(), nn.Linear(hidden, 1))

    def dist(self, obs: torch.Tensor, mask: torch.Tensor) -> torch.distributions.Categorical:
        logits = self.pi(obs).masked_fill(~mask, -1e8)  # masked-out actions get probability 0
        # No argument checks: they cost more than the small forward pass (rows of a batch).
        return torch.distributions.Categorical(logits=logits, validate_args=False)

    def log_probs(self, obs: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Each row's log-probabilities of the actions: the logits of :meth:`dist`, computed
        as it does, without building a distribution (the training loop's hot path)."""
        logits = self.pi(obs).masked_fill(~mask, -1e8)
        return logits - logits.logsumexp(dim=-1, keepdim=True)

    def act(self, obs: np.ndarray, mask: np.ndarray, greedy: bool = False) -> np.ndarray:
        with torch.no_grad():
            d = self.dist(torch.as_tensor(obs), torch.as_tensor(mask, dtype=torch.bool))
            return (d.probs.argmax(-1) if greedy else d.sample()).numpy()


def _adam(net: nn.Module, lr: float) -> torch.optim.Adam:
    """Adam, fused where torch has it for the CPU (torch >= 2.4): a third of the time of
    its per-tensor loop on small networks."""
    try:
        return torch.optim.Adam(net.parameters(), lr=lr, eps=1e-5, fused=True)
    except (RuntimeError, TypeError):
        return torch.optim.Adam(net.parameters(), lr=lr, eps=1e-5)


def _in_order(out: tuple) -> tuple:
    """``recv``'s results with their rows in row order (several workers of a half may
    answer in any order); unchanged if they already are."""
    ids = out[4]["env_id"]
    if ids.size < 2 or bool((ids[1:] > ids[:-1]).all()):
        return out
    order = np.argsort(ids, kind="stable")

    def sort(x: Any) -> Any:
        if isinstance(x, dict):
            return {k: sort(v) for k, v in x.items()}
        if isinstance(x, np.ndarray) and x.shape[:1] == ids.shape:
            return x[order]
        return x

    return tuple(sort(x) for x in out)


class _Part:
    """One vector env of the rollout and how it is stepped (see ``collect``)."""

    def __init__(self, vec, how: str, phases: Phases | None):
        self.vec, self.how = vec, how
        wrap = (lambda f: phases.wrap(f, "env")) if phases is not None else (lambda f: f)
        self._step, self._reset = wrap(vec.step), wrap(vec.reset)
        self._send, self._recv = wrap(vec.send), wrap(vec.recv)
        self._async_reset = wrap(vec.async_reset)
        self.ids: np.ndarray | None = None  # the row order the last recv() gave
        self.out: tuple | None = None  # the last step's results, once taken
        self.sent: tuple | None = None  # what the policy saw and did at the step in flight
        self.obs: np.ndarray | None = None  # what the policy acts on next
        self.infos: dict = {}
        self.clock: np.ndarray | None = None  # the rows' sim_time before the step in flight

    def reset(self) -> tuple[np.ndarray, dict]:
        if self.how == "sync":
            return self._reset()
        self._async_reset()
        obs, _, _, _, infos = self._receive()
        return obs, infos

    def _receive(self) -> tuple:
        out = self._recv()
        self.ids = out[4]["env_id"]
        return _in_order(out)

    def send(self, act: np.ndarray, seen: tuple) -> None:
        self.sent = seen
        if self.how == "sync":
            self.out = self._step(act)
            return
        ids = self.ids
        self._send(act if ids is None else act[ids])  # for the rows in recv()'s order
        self.out = self._receive() if self.how == "halves" else None

    def take(self) -> tuple:
        """The results of the step in flight (waiting for them in pipelined collection)."""
        if self.out is None:
            self.out = self._receive()
        out, self.out = self.out, None
        return out


def _make_parts(name: str, num_envs: int, collect: str, backend: str,
                num_workers: int | None, seed: int, phases: Phases | None,
                vec_kw: dict[str, Any]) -> list[_Part]:
    if collect not in COLLECT:
        raise ConfigError(f"train: collect={collect!r}; expected one of {COLLECT}")
    in_process = backend == "roundrobin"
    if collect == "sync":
        vec = make_vec(name, num_envs, backend=backend,
                       num_workers=None if in_process else num_workers, seed=seed, **vec_kw)
        return [_Part(vec, "sync", phases)]
    if num_envs < 2:
        raise ConfigError(f"train: collect={collect!r} needs at least 2 simulations, "
                          f"got num_envs={num_envs}")
    if not in_process and num_workers is not None and num_workers > num_envs:
        raise ConfigError(f"train: num_workers={num_workers} is more than num_envs="
                          f"{num_envs}: each worker hosts at least one simulation")
    sizes = (num_envs // 2, num_envs - num_envs // 2)
    workers = num_workers if num_workers is not None else min(usable_cores(), num_envs)
    parts: list[_Part] = []
    try:
        for i, size in enumerate(sizes):  # the second half's sims get seeds size0 + i
            # An odd worker goes to the second half, the larger one: no half gets more
            # workers than sims.
            w = None if in_process else max(1, workers // 2 + (i == 1 and workers % 2))
            vec = make_vec(name, size, backend=backend, num_workers=w,
                           seed=seed + i * sizes[0], **vec_kw)
            parts.append(_Part(vec, collect, phases))
    except BaseException:
        for p in parts:
            p.vec.close()
        raise
    return parts


def train(name: str = "loadbalance_v0", timesteps: int = 100_000, num_envs: int = 16,
          seed: int = 0, n_steps: int = 128, epochs: int = 4, minibatch: int = 512,
          lr: float = 3e-4, gamma: float = 0.99, lam: float = 0.95, clip: float = 0.2,
          ent_coef: float = 0.0, hidden: int = 64, reward_scale: float = 1.0,
          time_scale: float | None = None, num_workers: int | None = None,
          on_update: Callable[[int, ActorCritic], None] | None = None,
          centralised: bool = False, backend: str = "shm", collect: str = "sync",
          phases: Phases | None = None, **kw: Any) -> ActorCritic:
    """Train a shared policy for ``timesteps`` rows (agent decisions offered, as SB3 counts).

    ``num_envs`` simulations on ``backend`` (``num_workers`` workers in all; at least one per
    half with two halves), collected as
    ``collect`` says (module docstring). Rewards are multiplied by ``reward_scale`` for
    learning (returns in the thousands make the value loss swamp the policy's).
    ``on_update(timesteps_so_far, net)`` is called after every update (for a learning
    curve). With ``time_scale`` a step of ``dt`` simulated seconds is discounted by
    ``gamma ** (dt / time_scale)`` instead of ``gamma``. With ``centralised`` the critic
    also reads the global state (MAPPO). With ``phases``, the run's wall time by phase is
    added to it. ``kw`` goes to the scenario (``preset="small"``, ...).
    """
    given = dict(timesteps=timesteps, num_envs=num_envs, seed=seed, n_steps=n_steps,
                 epochs=epochs, minibatch=minibatch, lr=lr, gamma=gamma, lam=lam, clip=clip,
                 ent_coef=ent_coef, hidden=hidden, reward_scale=reward_scale,
                 time_scale=time_scale, num_workers=num_workers)
    check_all("train", _ARGS, given)
    for k in ("autoreset_mode", "state"):
        if k in kw:
            raise ConfigError(f"train: {k}={kw[k]!r} is train's to set (autoreset_mode="
                              "'SameStep'; state=True with centralised=True); leave it out")
    torch.manual_seed(seed)
    torch.set_num_threads(1)  # the cores are better spent on the simulation workers
    vec_kw = dict(autoreset_mode="SameStep", state=centralised, **kw)
    parts = _make_parts(name, num_envs, collect, backend, num_workers, seed, phases, vec_kw)
    first = parts[0].vec
    kind = first.sim_spec.rows.type
    if kind.__name__ != "Discrete":  # the policy is a Categorical over Discrete actions
        for p in parts:
            p.vec.close()
        raise ConfigError(f"train: {first.sim_spec.name} has {kind.__name__} actions; the "
                          "loop's policy needs Discrete ones (SB3's PPO through to_sb3 takes "
                          "Box and MultiDiscrete)")
    rows = sum(p.vec.num_envs for p in parts)
    state_dim = first.sim_spec.state_space.shape[0] if centralised else 0
    net = ActorCritic(first.single_observation_space.shape[0], first.n_actions, hidden,
                      state_dim)
    opt = _adam(net, lr)
    keys = ("obs", "crit", "mask", "act", "logp", "val", "rew", "done", "disc")

    def critic_input(o: np.ndarray, states: np.ndarray | None) -> torch.Tensor:
        return torch.as_tensor(np.concatenate([o, states], axis=1) if centralised else o)

    def policy(obs: np.ndarray, infos: dict) -> tuple:
        o = torch.as_tensor(obs)
        c = critic_input(obs, infos.get("state"))
        m = torch.as_tensor(infos["action_mask"], dtype=torch.bool)
        with torch.no_grad():  # Categorical's sample and log_prob, without its overhead
            lp, val = net.log_probs(o, m), net.v(c).squeeze(-1)
            act = torch.multinomial(lp.softmax(-1), 1, True)
            logp = lp.gather(-1, act).squeeze(-1)
        return o, c, m, act.squeeze(-1), logp, val

    def bootstrap(infos: dict, cut: np.ndarray) -> np.ndarray:
        final = critic_input(infos["final_obs"], infos["final_info"].get("state"))
        with torch.no_grad():
            return net.v(final[cut]).squeeze(-1).numpy()

    def values(obs: np.ndarray, infos: dict) -> torch.Tensor:
        with torch.no_grad():
            return net.v(critic_input(obs, infos.get("state"))).squeeze(-1)

    if phases is not None:
        policy = phases.wrap(policy, "inference")
        bootstrap = phases.wrap(bootstrap, "inference")
        values = phases.wrap(values, "inference")

    def record(part: _Part, buf: dict[str, list]) -> None:
        """Store the step that ``part`` has in flight, once its results are in."""
        o, c, m, act, logp, val = part.sent
        obs, rew, term, trunc, infos = part.take()
        part.sent = None
        rew = rew * reward_scale
        done = infos["_final_obs"]  # the row's sim ended (and was reset) this step
        disc = np.full(len(rew), gamma)
        if time_scale is not None:  # discount by the step's simulated length
            disc = gamma ** (step_seconds(infos, part.clock) / time_scale)
        part.clock = infos["sim_time"]
        cut = trunc & ~term  # truncated: bootstrap from the final observation
        if cut.any():
            rew[cut] += disc[cut] * bootstrap(infos, cut)
        for k, x in zip(keys, (o, c, m, act, logp, val, torch.as_tensor(rew),
                               torch.as_tensor(done | term),
                               torch.as_tensor(disc, dtype=torch.float32)), strict=True):
            buf[k].append(x)
        part.obs, part.infos = obs, infos

    def update(buf: dict[str, list[torch.Tensor]], next_val: torch.Tensor) -> None:
        adv = torch.zeros(n_steps, rows)  # ---- advantages (GAE)
        last = torch.zeros(rows)
        for t in reversed(range(n_steps)):
            nonterminal = 1.0 - buf["done"][t].float()
            nv = next_val if t == n_steps - 1 else buf["val"][t + 1]
            g = buf["disc"][t]
            delta = buf["rew"][t] + g * nv * nonterminal - buf["val"][t]
            last = delta + g * lam * nonterminal * last
            adv[t] = last
        b_obs, b_crit, b_mask, b_act, b_logp, b_val = (
            torch.cat(buf[k]) for k in ("obs", "crit", "mask", "act", "logp", "val"))
        b_adv = adv.reshape(-1)
        b_ret = b_adv + b_val
        for _ in range(epochs):  # ---- clipped PPO update
            for idx in torch.randperm(len(b_adv)).split(minibatch):
                lp = net.log_probs(b_obs[idx], b_mask[idx])
                ratio = (lp.gather(-1, b_act[idx].unsqueeze(-1)).squeeze(-1) - b_logp[idx]).exp()
                a = b_adv[idx]
                a = (a - a.mean()) / (a.std() + 1e-8)
                pg = -torch.min(ratio * a, ratio.clamp(1 - clip, 1 + clip) * a).mean()
                v_loss = (net.v(b_crit[idx]).squeeze(-1) - b_ret[idx]).pow(2).mean()
                loss = pg + 0.5 * v_loss
                if ent_coef:  # Categorical's entropy (with 0, the same loss and gradients)
                    p_log_p = lp.clamp(min=torch.finfo(lp.dtype).min) * lp.softmax(-1)
                    loss = loss + ent_coef * p_log_p.sum(-1).mean()
                opt.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(net.parameters(), 0.5)
                opt.step()

    if phases is not None:
        update = phases.wrap(update, "update")

    pipelined = collect == "pipelined"
    start = time.perf_counter()
    try:
        for part in parts:
            part.obs, part.infos = part.reset()
            part.clock = part.infos["sim_time"]
        for upd in range(max(1, timesteps // (n_steps * rows))):
            bufs = [{k: [] for k in keys} for _ in parts]
            for _ in range(n_steps):  # ---- rollout
                for part, buf in zip(parts, bufs, strict=True):
                    if part.sent is not None:  # pipelined: its step is in, or nearly
                        record(part, buf)
                    out = policy(part.obs, part.infos)
                    part.send(out[3].numpy(), out)
                    if not pipelined:
                        record(part, buf)
            for part, buf in zip(parts, bufs, strict=True):
                if part.sent is not None:
                    record(part, buf)
            # The halves' rows side by side at every step: the layout of "sync".
            buf = {k: [torch.cat([b[k][t] for b in bufs]) for t in range(n_steps)]
                   for k in keys}
            next_val = torch.cat([values(p.obs, p.infos) for p in parts])
            update(buf, next_val)
            if on_update is not None:
                on_update((upd + 1) * n_steps * rows, net)
    finally:
        if phases is not None:
            phases.wall += time.perf_counter() - start
        for part in parts:
            part.vec.close()
    return net
