"""The work every benchmark row does, its hash, and the seeded random masked policy.

A *work definition* fixes what is simulated: scenario, preset, extra env arguments, the
total number of env steps, the env seed and the policy. It does not fix *how* the work is
sampled (mode, ``num_envs``, ``num_workers``); every configuration of a row does the same
work, so rows with the same work hash can be compared across modes and machines.

The policy is uniform over the legal actions of every agent. Its randomness is drawn outside
the timed region as priorities in ``(0, 1]``, one per env step, env, agent and action
(:class:`Priorities`); inside the timed region an action is ``argmax(mask * priorities)``,
which picks each legal action with equal probability for a cost of about one microsecond
per call (measured and reported as ``harness_us_per_step``).
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

__all__ = [
    "POLICY",
    "STANDARD_ENV_STEPS",
    "STANDARD_SEED",
    "Work",
    "BLOCK_BYTES",
    "Priorities",
    "masked_actions",
    "priorities",
    "standard_work",
    "steps_per_env",
]

POLICY = "uniform-masked/argmax-priorities/v1"
"""Name and version of the benchmark policy; part of every work hash."""

STANDARD_ENV_STEPS = 8192
"""Env steps per row in the standard (leaderboard) work."""

STANDARD_SEED = 0
"""Env and policy seed of the standard work."""


@dataclass(frozen=True)
class Work:
    """What one benchmark row simulates, independent of how it is sampled.

    Attributes:
        scenario: registered scenario name, e.g. ``"jobshop_v0"``.
        preset: the scenario preset.
        env_steps: total env steps to do, split evenly over ``num_envs`` envs (rounded up
            to a whole number of steps per env; rows report the steps actually done).
        seed: env ``i`` is reset with ``seed + i``; the policy's generator is seeded with
            ``seed`` as well.
        env_kwargs: extra scenario arguments (beyond ``preset``).
        policy: the policy name, always :data:`POLICY`.
    """

    scenario: str
    preset: str = "default"
    env_steps: int = STANDARD_ENV_STEPS
    seed: int = STANDARD_SEED
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    policy: str = POLICY

    def __post_init__(self) -> None:
        if not isinstance(self.env_steps, int) or self.env_steps < 1:
            raise ValueError(f"env_steps={self.env_steps!r} must be a positive integer")

    def to_dict(self) -> dict[str, Any]:
        """The work as a JSON-ready dict (the form stored in result files)."""
        d = asdict(self)
        d["env_kwargs"] = dict(sorted(self.env_kwargs.items()))
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Work:
        return cls(**d)

    @property
    def hash(self) -> str:
        """First 16 hex digits of the SHA-256 of the canonical JSON of :meth:`to_dict`."""
        return work_hash(self.to_dict())

    @property
    def label(self) -> str:
        return f"{self.scenario}/{self.preset}"


def work_hash(work: dict[str, Any]) -> str:
    """Hash of a work dict: stable across runs, machines and Python versions."""
    text = json.dumps(work, sort_keys=True, separators=(",", ":"), default=_jsonable)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _jsonable(value: Any) -> Any:
    if isinstance(value, tuple):
        return list(value)
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"work argument {value!r} of type {type(value).__name__} is not JSON-able")


def standard_work(scenario: str, preset: str = "default") -> Work:
    """The leaderboard's work for ``scenario`` at ``preset``."""
    return Work(scenario=scenario, preset=preset)


def steps_per_env(work: Work, num_envs: int) -> int:
    """Env steps each of ``num_envs`` envs does (the total rounded up)."""
    if num_envs < 1:
        raise ValueError(f"num_envs={num_envs!r} must be at least 1")
    return math.ceil(work.env_steps / num_envs)


BLOCK_BYTES = 64 * 2**20
"""Largest block of priorities held at once; bigger works draw block by block."""


class Priorities:
    """The policy's random priorities, in ``(0, 1]``, float32, drawn outside the timed region.

    Env ``i`` draws from its own generator, ``default_rng(SeedSequence(seed).spawn(n)[i])``,
    ``n_agents * n_actions`` values per step in step order, so env ``i`` sees the same
    priorities at its ``t``-th step in every mode and whatever the block size. Values lie in
    ``(0, 1]`` so that a legal action always beats a masked one under
    ``argmax(mask * priorities)``. A work whose priorities exceed :data:`BLOCK_BYTES` is
    drawn in blocks of ``block`` steps; the caller pauses its clocks while a block is drawn.
    """

    def __init__(
        self,
        work: Work,
        num_envs: int,
        n_agents: int,
        n_actions: int,
        block_bytes: int | None = None,
    ):
        self.seed = work.seed
        self.num_envs = num_envs
        self.shape = (n_agents, n_actions)
        self.steps = steps_per_env(work, num_envs)
        per_step = num_envs * n_agents * n_actions * 4
        limit = BLOCK_BYTES if block_bytes is None else block_bytes
        self.block = int(max(1, min(self.steps, limit // per_step)))
        self._cache: np.ndarray | None = None
        self.restart()

    def restart(self) -> None:
        """Back to step 0 (every repeat replays the same priorities)."""
        seqs = np.random.SeedSequence(self.seed).spawn(self.num_envs)
        self._rngs = [np.random.default_rng(s) for s in seqs]

    def _draw(self, i: int, steps: int, out: np.ndarray) -> None:
        self._rngs[i].random(out=out, dtype=np.float32)
        np.subtract(np.float32(1.0), out, out=out)  # [0, 1) -> (0, 1]

    def env_block(self, i: int, steps: int) -> np.ndarray:
        """Env ``i``'s next ``steps`` steps: ``(steps, n_agents, n_actions)``."""
        out = np.empty((steps, *self.shape), dtype=np.float32)
        self._draw(i, steps, out)
        return out

    def all_block(self, steps: int) -> np.ndarray:
        """Every env's next ``steps`` steps: ``(steps, num_envs, n_agents, n_actions)``."""
        if steps == self.steps and self._cache is not None:
            return self._cache  # the whole work fits in one block: draw it once
        out = np.empty((steps, self.num_envs, *self.shape), dtype=np.float32)
        for i in range(self.num_envs):
            block = np.empty((steps, *self.shape), dtype=np.float32)
            self._draw(i, steps, block)
            out[:, i] = block
        if steps == self.steps:
            self._cache = out
        return out


def priorities(work: Work, num_envs: int, n_agents: int, n_actions: int) -> np.ndarray:
    """All priorities of a work at once: ``(steps_per_env, num_envs, n_agents, n_actions)``."""
    return Priorities(work, num_envs, n_agents, n_actions).all_block(steps_per_env(work, num_envs))


def masked_actions(mask: np.ndarray, prio: np.ndarray, scratch: np.ndarray) -> np.ndarray:
    """Uniform random legal action per row: ``argmax(mask * prio)``.

    Args:
        mask: ``(rows, n_actions)`` 0/1 action mask.
        prio: ``(rows, n_actions)`` priorities in ``(0, 1]``.
        scratch: ``(rows, n_actions)`` float32 buffer, overwritten.
    """
    np.multiply(mask, prio, out=scratch)
    return scratch.argmax(axis=1)
