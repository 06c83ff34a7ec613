"""A hand-written masked PPO loop (torch) on a deszoo vector env, parameter-shared;
``--centralised`` makes it MAPPO (the critic reads the global state).

The whole recipe: every row of ``make_vec`` is one agent of one simulation; the policy
sees ``obs`` and ``infos["action_mask"]`` for all rows at once and masks its logits. With
``centralised=True`` the vector env carries each simulation's ``state()``
(``make_vec(..., state=True)``) and the critic of each row reads its own observation and
the state of its simulation (an agent-specific global state, as MAPPO does); the actor
still sees only the observation, so the policy runs without the state. With
``autoreset_mode="SameStep"`` a finished simulation is reset inside ``step``:
``infos["_final_obs"]`` marks its rows (the episode boundary) and ``infos["final_obs"]``
holds their last observations, used to bootstrap truncated episodes.

    python examples/ppo_loop.py --timesteps 100000
    python examples/ppo_loop.py --timesteps 100000 --centralised

See docs/training.md.
"""

from __future__ import annotations

import argparse
import functools
import time
from collections.abc import Callable

import numpy as np
import torch
from torch import nn

import deszoo
from deszoo.policies import evaluate
from deszoo.vector import make_vec, step_seconds


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
        return torch.distributions.Categorical(logits=logits)

    def act(self, obs: np.ndarray, mask: np.ndarray, greedy: bool = False) -> np.ndarray:
        with torch.no_grad():
            d = self.dist(torch.as_tensor(obs), torch.as_tensor(mask, dtype=torch.bool))
            return (d.probs.argmax(-1) if greedy else d.sample()).numpy()


def train(name: str = "loadbalance_v0", timesteps: int = 100_000, num_envs: int = 16,
          seed: int = 0, n_steps: int = 128, epochs: int = 4, minibatch: int = 512,
          lr: float = 3e-4, gamma: float = 0.99, lam: float = 0.95, clip: float = 0.2,
          ent_coef: float = 0.0, hidden: int = 64, reward_scale: float = 1.0,
          time_scale: float | None = None, num_workers: int | None = None,
          on_update: Callable[[int, ActorCritic], None] | None = None,
          centralised: bool = False, **kw) -> ActorCritic:
    """Train a shared policy for ``timesteps`` rows (agent decisions offered, as SB3 counts).

    Rewards are multiplied by ``reward_scale`` for learning (returns in the thousands make
    the value loss swamp the policy's). ``on_update(timesteps_so_far, net)`` is called after
    every update (for a learning curve). With ``time_scale`` a step of ``dt`` simulated
    seconds is discounted by ``gamma ** (dt / time_scale)`` instead of ``gamma``. With
    ``centralised`` the critic also reads the global state (MAPPO).
    """
    torch.manual_seed(seed)
    torch.set_num_threads(1)  # the cores are better spent on the simulation workers
    vec = make_vec(name, num_envs, backend="shm", num_workers=num_workers, seed=seed,
                   autoreset_mode="SameStep", state=centralised, **kw)
    rows, n_act = vec.num_envs, vec.n_actions
    state_dim = vec.sim_spec.state_space.shape[0] if centralised else 0
    net = ActorCritic(vec.single_observation_space.shape[0], n_act, hidden, state_dim)
    opt = torch.optim.Adam(net.parameters(), lr=lr, eps=1e-5)
    buf = {k: [] for k in ("obs", "crit", "mask", "act", "logp", "val", "rew", "done", "disc")}

    def critic_input(o: np.ndarray, states: np.ndarray | None) -> torch.Tensor:
        return torch.as_tensor(np.concatenate([o, states], axis=1) if centralised else o)

    obs, infos = vec.reset()
    clock = infos["sim_time"]
    try:
        for update in range(max(1, timesteps // (n_steps * rows))):
            for b in buf.values():
                b.clear()
            for _ in range(n_steps):  # ---- rollout
                o = torch.as_tensor(obs)
                c = critic_input(obs, infos.get("state"))
                m = torch.as_tensor(infos["action_mask"], dtype=torch.bool)
                with torch.no_grad():
                    d, val = net.dist(o, m), net.v(c).squeeze(-1)
                    act = d.sample()
                    logp = d.log_prob(act)
                obs, rew, term, trunc, infos = vec.step(act.numpy())
                rew = rew * reward_scale
                done = infos["_final_obs"]  # the row's sim ended (and was reset) this step
                disc = np.full(rows, gamma)
                if time_scale is not None:  # discount by the step's simulated length
                    disc = gamma ** (step_seconds(infos, clock) / time_scale)
                clock = infos["sim_time"]
                cut = trunc & ~term  # truncated: bootstrap from the final observation
                if cut.any():
                    final = critic_input(infos["final_obs"], infos["final_info"].get("state"))
                    with torch.no_grad():
                        tail = net.v(final[cut]).squeeze(-1)
                    rew[cut] += disc[cut] * tail.numpy()
                for k, x in zip(buf, (o, c, m, act, logp, val, torch.as_tensor(rew),
                                      torch.as_tensor(done | term),
                                      torch.as_tensor(disc, dtype=torch.float32)), strict=True):
                    buf[k].append(x)
            with torch.no_grad():  # ---- advantages (GAE)
                next_val = net.v(critic_input(obs, infos.get("state"))).squeeze(-1)
            adv = torch.zeros(n_steps, rows)
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
                    d = net.dist(b_obs[idx], b_mask[idx])
                    ratio = (d.log_prob(b_act[idx]) - b_logp[idx]).exp()
                    a = b_adv[idx]
                    a = (a - a.mean()) / (a.std() + 1e-8)
                    pg = -torch.min(ratio * a, ratio.clamp(1 - clip, 1 + clip) * a).mean()
                    v_loss = (net.v(b_crit[idx]).squeeze(-1) - b_ret[idx]).pow(2).mean()
                    loss = pg + 0.5 * v_loss - ent_coef * d.entropy().mean()
                    opt.zero_grad()
                    loss.backward()
                    nn.utils.clip_grad_norm_(net.parameters(), 0.5)
                    opt.step()
            if on_update is not None:
                on_update((update + 1) * n_steps * rows, net)
    finally:
        vec.close()
    return net


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--env", default="loadbalance_v0", choices=deszoo.list_envs())
    p.add_argument("--preset", default="small")
    p.add_argument("--timesteps", type=int, default=100_000, help="rows stepped")
    p.add_argument("--num-envs", type=int, default=16, help="simulations in the batch")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--centralised", action="store_true",
                   help="MAPPO: the critic reads the global state too")
    args = p.parse_args(argv)
    start = time.perf_counter()
    net = train(args.env, args.timesteps, args.num_envs, args.seed, preset=args.preset,
                centralised=args.centralised)
    greedy = evaluate(functools.partial(net.act, greedy=True), args.env, preset=args.preset)
    print(f"trained in {time.perf_counter() - start:.1f} s; greedy mean return "
          f"{greedy.mean():.1f} over 20 held-out seeds")


if __name__ == "__main__":
    main()
