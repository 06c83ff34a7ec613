"""What the bridge costs on top of SimPy: a minimal model, per agent count, both APIs.

The model: ``n`` agents; each decides between two actions, then ``yield sim.timeout(1.0)``;
``_observe_all`` writes one column. Its raw-SimPy twin does the same events with no bridge:
per agent and step one ``succeed()``ed decision event and one timeout, driven by the same
peek/step loop. Figures are CPU microseconds per env step (``time.process_time``), the best
of ``--repeats`` runs of ``--steps`` steps each::

    python benchmarks/bridge.py                          # this tree
    python benchmarks/bridge.py --rev 6a88602 --rev .    # two trees, alternating

Columns: ``arrays`` is ``step_arrays``, ``dict`` is PettingZoo's ``step`` (an action dict
built once, outside the timing), ``raw`` the twin; then the ratios the issue tracks.
``floor`` is what any dict API must add to an array step, timed alone: read the action
dict into a list and build PettingZoo's five return dicts (fresh copies of observations and
masks, the info keys deszoo reports) from the arrays, with no checks and no stepping; so
``(arrays + floor) / arrays`` is the lowest ``dict / arrays`` a facade can reach.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

AGENTS = (1, 4, 16)


def minimal_env_class():
    """The minimal model as a ``SimPyParallelEnv`` (imported here: the tree under test's)."""
    import numpy as np

    from deszoo.core import Param, SimPyParallelEnv, discrete
    from deszoo.core.params import integer

    class Minimal(SimPyParallelEnv):
        metadata = {"name": "minimal", "render_modes": []}
        params = {"n_agents": Param(4, integer(1), "agents")}

        def _setup(self):
            names = [f"agent_{i}" for i in range(self.p.n_agents)]
            return discrete(names, [0.0], [np.inf], 2)

        def _build(self):
            for i in range(self.p.n_agents):
                self.sim.process(self._agent(i))

        def _agent(self, i):
            sim = self.sim
            while True:
                yield self.decide(i)
                yield sim.timeout(1.0)

        def _observe_all(self, obs):
            obs[:, 0] = self.sim.now

    return Minimal


def raw_steps(n: int, steps: int) -> float:
    """CPU seconds for ``steps`` steps of the raw-SimPy twin with ``n`` agents."""
    import simpy

    sim = simpy.Environment()
    waiting: dict[int, simpy.Event] = {}

    def agent(i):
        while True:
            event = sim.event()
            waiting[i] = event
            yield event
            yield sim.timeout(1.0)

    for i in range(n):
        sim.process(agent(i))

    def advance():
        peek, step = sim.peek, sim.step
        while True:
            t = peek()
            if waiting and t > sim.now:
                return
            step()

    advance()
    t0 = time.process_time()
    for _ in range(steps):
        deciding = list(waiting.items())
        waiting.clear()
        for _i, event in deciding:
            event.succeed(1)
        advance()
    return time.process_time() - t0


def bridge_steps(n: int, steps: int, api: str) -> float:
    """CPU seconds for ``steps`` steps of the minimal env (``api``: arrays or dict)."""
    import numpy as np

    env = minimal_env_class()(n_agents=n)
    env.reset(seed=0)
    if api == "arrays":
        acts = np.ones(n, dtype=np.int64)
        step = env.step_arrays
        t0 = time.process_time()
        for _ in range(steps):
            step(acts)
        return time.process_time() - t0
    actions = {a: 1 for a in env.agents}
    step = env.step
    t0 = time.process_time()
    for _ in range(steps):
        step(actions)
    return time.process_time() - t0


def floor_steps(n: int, steps: int) -> float:
    """CPU seconds for ``steps`` rounds of the dict API's unavoidable work (see above)."""
    env = minimal_env_class()(n_agents=n)
    env.reset(seed=0)
    names = list(env.agents)
    actions = {a: 1 for a in names}
    obs_buf, mask_buf, rew_buf, term_buf = env.obs_buf, env.mask_buf, env.rew_buf, env.term_buf
    t0 = time.process_time()
    for _ in range(steps):
        acts = [actions[a] for a in names]  # noqa: F841  (what the array step would take)
        obs, masks = obs_buf.copy(), mask_buf.copy()
        out_obs = {a: obs[i] for i, a in enumerate(names)}  # noqa: F841
        rew = dict(zip(names, rew_buf.tolist(), strict=True))  # noqa: F841
        term = dict(zip(names, term_buf.tolist(), strict=True))  # noqa: F841
        trunc = dict.fromkeys(names, False)  # noqa: F841
        infos = {a: {"sim_time": 0.0, "needs_action": True, "action_mask": masks[i],  # noqa: F841
                     "invalid_action": False, "invalid_count": 0}
                 for i, a in enumerate(names)}
    return time.process_time() - t0


def measure(steps: int, repeats: int) -> dict[str, float]:
    """Best-of-``repeats`` CPU microseconds per step, keyed ``"<what>_<n>"``."""
    out: dict[str, float] = {}
    for n in AGENTS:
        runs = {"raw": [], "arrays": [], "dict": [], "floor": []}
        for _ in range(repeats):  # interleaved, so a burst of load hits all four
            runs["raw"].append(raw_steps(n, steps))
            runs["arrays"].append(bridge_steps(n, steps, "arrays"))
            runs["dict"].append(bridge_steps(n, steps, "dict"))
            runs["floor"].append(floor_steps(n, steps))
        for what, seconds in runs.items():
            out[f"{what}_{n}"] = min(seconds) / steps * 1e6
    return out


def table(results: dict[str, dict[str, float]]) -> str:
    lines = ["| tree | agents | arrays us | dict us | raw us | floor us | arrays / raw | "
             "dict / arrays | lowest dict / arrays |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for rev, r in results.items():
        for n in AGENTS:
            a, d, raw = r[f"arrays_{n}"], r[f"dict_{n}"], r[f"raw_{n}"]
            f = r.get(f"floor_{n}")  # (absent from a tree whose copy of this file has none)
            floor = "-" if f is None else f"{f:.1f}"
            lowest = "-" if f is None else f"{(a + f) / a:.2f}x"
            lines.append(f"| {rev} | {n} | {a:.1f} | {d:.1f} | {raw:.1f} | {floor} | "
                         f"{a / raw:.2f}x | {d / a:.2f}x | {lowest} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    from revisions import add_options, report

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=20000, help="steps per run")
    parser.add_argument("--repeats", type=int, default=5, help="runs per figure (best kept)")
    add_options(parser)
    args = parser.parse_args(argv)
    report(Path(__file__), args, ["--steps", str(args.steps), "--repeats", str(args.repeats)],
           lambda: measure(args.steps, args.repeats), table)


if __name__ == "__main__":
    main()
