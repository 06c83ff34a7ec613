"""Why the learned cars of elevator_v1 keep episodes from ending: train one learner with the
settings of ``train_baselines`` and some overrides, then run its greedy policy on the
validation seeds 5000..5019 (never the held-out seeds) up to a cap of steps and measure.

Per run it prints: how many episodes ended within the cap, the mean return of those that
ended, the mean steps and simulated seconds of ended episodes, the deciding rows' shares
of park (the no-op), up and down, and the *boarding rate*: of the decisions of an empty car
standing at a floor where people wait, in the first 250 steps, the share whose direction
boards some of them (a car boards the queue of the direction it leaves in). For every
episode still running at the cap it describes the last decisions: who waits where, and
what the cars chose; and the sampled policy's probability of a boarding action in those
states. MaskablePPO runs are measured greedy and then with sampled actions (the
``-sampled`` entries). ``--env warehouse_v1`` (or another scenario) measures ended
episodes, returns and each action's share of the choices.

    python benchmarks/elevator_study.py --preset small --algo maskable
    python benchmarks/elevator_study.py --preset small --algo maskable --set env.ride_weight=0
    python benchmarks/elevator_study.py --preset default --algo maskable --set time_scale=10 \\
        --set gae_lambda=1.0
"""

from __future__ import annotations

import argparse
import ast
import functools
import importlib.util
import json
import sys
import time
from pathlib import Path

import numpy as np

from deszoo.envs.elevator.env import FLOOR, GLOBAL  # the observation's layout

ROOT = Path(__file__).resolve().parent.parent
VALIDATION = tuple(range(5000, 5020))


def _baselines():
    spec = importlib.util.spec_from_file_location("train_baselines",
                                                  ROOT / "benchmarks" / "train_baselines.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def measure(policy, probs, name: str, preset: str, cap: int, seeds=VALIDATION) -> dict:
    """Run ``policy`` greedily on ``seeds`` for at most ``cap`` steps and measure."""
    from deszoo.vector import make_vec

    vec = make_vec(name, len(seeds), backend="roundrobin", autoreset_mode="SameStep",
                   preset=preset)
    n_f = vec.n_actions - 1
    try:
        n, sims = vec.agents_per_sim, vec.num_sims
        obs, infos = vec.reset(seed=list(seeds))
        returns, done = np.zeros(sims), np.zeros(sims, dtype=bool)
        steps, secs = np.zeros(sims, dtype=int), np.zeros(sims)
        counts = {"park": 0, "up": 0, "down": 0}
        board = [0, 0]  # boarding decisions, decisions of empty cars where people wait
        board_p = []  # sampled probability of boarding, in the last 200 steps of a loop
        tail: dict[int, list[str]] = {}
        other = np.zeros(vec.n_actions, dtype=np.int64)  # other scenarios: choices per action
        for t in range(cap):
            mask = infos["action_mask"].astype(bool)
            act = np.asarray(policy(obs, mask), dtype=np.int64)
            if not name.startswith("elevator"):
                choosing = mask.sum(axis=1) > 1
                other += np.bincount(act[choosing], minlength=vec.n_actions)
                obs, rew, _, _, infos = vec.step(act)
                returns += np.where(done, 0.0, rew.reshape(sims, n).sum(axis=1))
                ended = infos["_final_obs"].reshape(sims, n).any(axis=1) & ~done
                steps[~done] += 1
                done |= ended
                if done.all():
                    break
                continue
            deciding = obs[:, 6] > 0.5
            floor = np.round(obs[:, 0] * (n_f - 1)).astype(int)
            empty = obs[:, 4] == 0
            blocks = obs[:, GLOBAL:].reshape(len(obs), n_f, FLOOR)
            here = blocks[np.arange(len(obs)), floor]  # [waiting up, waiting down, ...]
            target = act - 1
            moves = deciding & (act > 0)
            up, down = moves & (target > floor), moves & (target < floor)
            counts["park"] += int((deciding & (act == 0)).sum())
            counts["up"] += int(up.sum())
            counts["down"] += int(down.sum())
            waits = deciding & empty & ((here[:, 0] > 0) | (here[:, 1] > 0))
            boards = (up & (here[:, 0] > 0)) | (down & (here[:, 1] > 0))
            if t < 250:  # about one episode of random or heuristic cars; loops excluded
                board[0] += int((waits & boards).sum())
                board[1] += int(waits.sum())
            late = t >= cap - 200
            if late:
                rows = np.flatnonzero(waits & ~np.repeat(done, n))
                if len(rows) and probs is not None:
                    p = probs(obs[rows], mask[rows])
                    for r, pr in zip(rows, p, strict=True):
                        f = floor[r]
                        good = np.zeros(vec.n_actions, dtype=bool)
                        if here[r, 0] > 0:
                            good[f + 2:] = True
                        if here[r, 1] > 0:
                            good[1:f + 1] = True
                        board_p.append(float(pr[good & mask[r]].sum()))
                for s in np.flatnonzero(~done):
                    for a in range(n):
                        r = s * n + a
                        if deciding[r]:
                            w = [f"{g}{'^' if blocks[r, g, 0] > 0 else ''}"
                                 f"{'v' if blocks[r, g, 1] > 0 else ''}"
                                 for g in range(n_f) if blocks[r, g, 0] > 0 or blocks[r, g, 1] > 0]
                            tail.setdefault(int(s), []).append(
                                f"car{a}@{floor[r]} load{obs[r, 4]:.2f} -> "
                                f"{'park' if act[r] == 0 else target[r]} (waiting {' '.join(w)})")
            clock = infos["sim_time"].reshape(sims, n)[:, 0].copy()
            obs, rew, _, _, infos = vec.step(act)
            returns += np.where(done, 0.0, rew.reshape(sims, n).sum(axis=1))
            ended = infos["_final_obs"].reshape(sims, n).any(axis=1) & ~done
            steps[~done] += 1
            secs[ended] = clock[ended]
            done |= ended
            if done.all():
                break
    finally:
        vec.close()
    total = sum(counts.values())
    if not name.startswith("elevator"):
        return {"ended": int(done.sum()), "of": sims,
                "mean_ended": round(float(returns[done].mean()), 1) if done.any() else None,
                "returns": [round(float(x), 1) if d else None
                            for x, d in zip(returns, done, strict=True)],
                "steps_ended": round(float(steps[done].mean()), 1) if done.any() else None,
                "action_shares": [round(float(c), 3) for c in other / max(1, other.sum())],
                "loops": {}}
    return {
        "ended": int(done.sum()), "of": sims,
        "mean_ended": round(float(returns[done].mean()), 1) if done.any() else None,
        "returns": [round(float(x), 1) if d else None for x, d in zip(returns, done, strict=True)],
        "steps_ended": round(float(steps[done].mean()), 1) if done.any() else None,
        "sim_s_ended": round(float(secs[done].mean()), 1) if done.any() else None,
        "shares": {k: round(v / max(1, total), 3) for k, v in counts.items()},
        "boarding": round(board[0] / max(1, board[1]), 3), "boarding_n": board[1],
        "loop_board_p": (round(float(np.mean(board_p)), 3) if board_p else None),
        "loops": {int(VALIDATION[0] + s) if seeds == VALIDATION else int(s): v[-6:]
                  for s, v in tail.items()},
    }


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--env", default="elevator_v1",
                   help="another scenario: ended episodes, returns and each action's share of "
                   "the choices (rows with more than one legal action)")
    p.add_argument("--preset", default="small")
    p.add_argument("--algo", default="maskable", choices=["maskable", "loop", "mappo",
                                                          "random", "heuristic"])
    p.add_argument("--set", action="append", default=[],
                   help="KEY=VALUE overrides of the TUNED config (env.KEY for the training sims)")
    p.add_argument("--cap", type=int, default=3000)
    p.add_argument("--checkpoints", type=int, default=1,
                   help="measure after each of this many equal parts of the training")
    p.add_argument("--out", type=Path, default=None, help="append the results as JSON lines")
    args = p.parse_args(argv)
    tb = _baselines()
    cfg = tb.config(args.env, args.preset)
    cfg["env"] = dict(cfg["env"])
    for kv in args.set:
        key, value = kv.split("=", 1)
        try:
            value = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            pass
        if key.startswith("env."):
            cfg["env"][key[4:]] = value
        else:
            cfg[key] = value
    tb.Curve.maybe = lambda *a, **k: None  # no held-out evaluations while choosing
    results = []

    def report(steps: int, policy, probs, wall: float) -> None:
        start = time.perf_counter()
        r = measure(policy, probs, args.env, args.preset, args.cap)
        r.update(algo=args.algo, preset=args.preset, set=args.set, timesteps=steps,
                 train_s=round(wall, 1), eval_s=round(time.perf_counter() - start, 1))
        results.append(r)
        loops = r.pop("loops")
        print(json.dumps(r), flush=True)
        for s, lines in loops.items():
            print(f"  seed {s}:", *lines, sep="\n    ")
        if args.out:
            with args.out.open("a") as fh:
                fh.write(json.dumps({**r, "loops": loops}) + "\n")

    if args.algo in ("random", "heuristic"):
        from deszoo.policies import heuristic_policy, random_policy

        pol = random_policy(0) if args.algo == "random" else heuristic_policy(args.env)
        report(0, pol, None, 0.0)
        return
    total = cfg["timesteps"]
    start = time.perf_counter()
    if args.algo == "maskable":
        import torch

        for k in range(1, args.checkpoints + 1):
            cfg["timesteps"] = total * k // args.checkpoints
            if k == 1:
                policy, _ = tb.train_maskable(args.env, args.preset, cfg, save=None)
                model = policy.__closure__[0].cell_contents
            else:  # continue the same model: train_maskable rebuilt would restart it
                raise SystemExit("--checkpoints > 1 is for the loop")

            def probs(o, m, model=model):
                with torch.no_grad():
                    obs_t = model.policy.obs_to_tensor(o)[0]
                    d = model.policy.get_distribution(obs_t, action_masks=m)
                    return d.distribution.probs.numpy()

            report(model.num_timesteps, policy, probs, time.perf_counter() - start)
            torch.manual_seed(0)  # sampled actions: the entry's -sampled policy

            def sampled(o, m, model=model):
                return model.predict(o, action_masks=m, deterministic=False)[0]

            args.set = [*args.set, "sampled"]
            report(model.num_timesteps, sampled, None, time.perf_counter() - start)
    else:
        loop = tb._example("ppo_loop")
        marks = [total * k // args.checkpoints for k in range(1, args.checkpoints + 1)]
        sims = tb.num_sims(args.env, args.preset, cfg["rows"])
        eval_s = [0.0]

        def on_update(steps: int, net) -> None:
            if marks and steps >= marks[0] - cfg["n_steps"] * cfg["rows"] // 2:
                while marks and steps >= marks[0] - cfg["n_steps"] * cfg["rows"] // 2:
                    marks.pop(0)
                t0 = time.perf_counter()
                report(steps, functools.partial(net.act, greedy=True), _loop_probs(net),
                       t0 - start - eval_s[0])
                eval_s[0] += time.perf_counter() - t0

        net = loop.train(args.env, total, sims, seed=0, n_steps=cfg["n_steps"],
                         epochs=cfg["n_epochs"], minibatch=cfg["batch_size"], lr=cfg["lr"],
                         gamma=cfg["gamma"], lam=cfg["gae_lambda"], ent_coef=cfg["ent_coef"],
                         hidden=cfg["hidden"], time_scale=cfg["time_scale"],
                         reward_scale=cfg["reward_scale"] if cfg["norm_reward"] else 1.0,
                         num_workers=2, on_update=on_update, preset=args.preset,
                         centralised=args.algo == "mappo", **cfg["env"])
        if marks:
            report(total, functools.partial(net.act, greedy=True), _loop_probs(net),
                   time.perf_counter() - start - eval_s[0])


def _loop_probs(net):
    import torch

    def probs(o, m):
        with torch.no_grad():
            return net.dist(torch.as_tensor(o), torch.as_tensor(m, dtype=torch.bool)).probs.numpy()
    return probs


if __name__ == "__main__":
    sys.exit(main())
