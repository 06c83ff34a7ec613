"""Issue 9 side measurement: mask-unaware SB3 ``PPO`` under ``invalid_action="random"``.

Plain ``PPO`` never sees the mask; a masked-out action of a deciding agent is replaced by a
random legal one and charged ``invalid_penalty``. Trained through ``to_sb3`` on a small
preset (default loadbalance_v0) for each penalty, then evaluated on the held-out seeds with
``invalid_penalty=0`` (the task's return, comparable to random and the heuristic), twice:
as trained (unmasked; the env replaces invalid actions) and masked at evaluation (greedy
over the legal actions).

    python benchmarks/mask_unaware_ppo.py --penalties 0,0.5,2 --timesteps 100000
    python benchmarks/mask_unaware_ppo.py --env jobshop_v0 --penalties 0,0.5
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import torch
from stable_baselines3 import PPO

from deszoo.policies import HELD_OUT_SEEDS, evaluate, heuristic_policy, random_policy
from deszoo.scores import t_interval
from deszoo.vector import make_vec, to_sb3

PRESET = "small"


def _invalid_share(model: PPO, name: str) -> float:
    """Share of deciding agents' greedy actions that the mask forbids, on the held-out seeds."""
    vec = make_vec(name, len(HELD_OUT_SEEDS), backend="roundrobin", autoreset_mode="SameStep",
                   preset=PRESET)
    try:
        obs, infos = vec.reset(seed=list(HELD_OUT_SEEDS))
        bad = decided = 0
        done = np.zeros(vec.num_sims, dtype=bool)
        while not done.all():
            act = model.predict(obs, deterministic=True)[0]
            deciding = infos["needs_action"].astype(bool) & ~np.repeat(done, vec.agents_per_sim)
            mask = infos["action_mask"].astype(bool)
            bad += int((~mask[np.arange(len(act)), act] & deciding).sum())
            decided += int(deciding.sum())
            obs, _, _, _, infos = vec.step(act)
            done |= infos["_final_obs"].reshape(vec.num_sims, -1).any(axis=1)
    finally:
        vec.close()
    return bad / max(decided, 1)


def run(name: str, penalty: float, timesteps: int, seed: int = 0) -> dict:
    """Train plain PPO with ``invalid_penalty=penalty``; evaluate it two ways."""
    torch.set_num_threads(1)
    vec = make_vec(name, 16, backend="shm", num_workers=2, seed=seed, autoreset_mode="SameStep",
                   preset=PRESET, invalid_penalty=penalty)
    env = to_sb3(vec)
    start = time.perf_counter()
    model = PPO("MlpPolicy", env, n_steps=128, batch_size=512, n_epochs=4, learning_rate=3e-4,
                gamma=0.99, seed=seed, device="cpu")
    try:
        model.learn(timesteps)
    finally:
        env.close()
    wall = time.perf_counter() - start

    def unmasked(obs, mask):
        return model.predict(obs, deterministic=True)[0]

    def masked(obs, mask):
        obs_t = model.policy.obs_to_tensor(obs)[0]
        with torch.no_grad():
            logits = model.policy.get_distribution(obs_t).distribution.logits.numpy()
        return np.where(mask, logits, -np.inf).argmax(axis=1)

    out = {"penalty": penalty, "timesteps": model.num_timesteps, "train_wall_s": round(wall, 1),
           "invalid_share_greedy": round(_invalid_share(model, name), 3)}
    for label, pol in (("unmasked", unmasked), ("masked_at_eval", masked)):
        r = evaluate(pol, name, preset=PRESET)
        lo, hi = t_interval(r)
        out[label] = {"mean": round(float(r.mean()), 1), "ci95": [round(lo, 1), round(hi, 1)]}
    return out


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--penalties", default="0,0.5,2")
    p.add_argument("--timesteps", type=int, default=100_000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--env", default="loadbalance_v0")
    args = p.parse_args(argv)
    for label, pol in (("random", random_policy()), ("heuristic", heuristic_policy(args.env))):
        r = evaluate(pol, args.env, preset=PRESET)
        print(json.dumps({"env": args.env, "policy": label, "mean": round(float(r.mean()), 1),
                          "ci95": [round(x, 1) for x in t_interval(r)]}), flush=True)
    for pen in (float(x) for x in args.penalties.split(",")):
        print(json.dumps(run(args.env, pen, args.timesteps, args.seed)), flush=True)


if __name__ == "__main__":
    main()
