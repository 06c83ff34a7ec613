"""Training helpers for MaskablePPO (sb3-contrib) on deszoo scenarios (extra ``deszoo[sb3]``).

Two problems of event-driven environments that the standard tools do not handle:

* **Discounting by steps.** PPO discounts by ``gamma`` per step. Here a step lasts until the
  next decision point, so its length in simulated time depends on the policy: an agent
  that takes an action which makes decision points often (a robot that waits 10 s and
  decides again) shortens every step, and the same simulated future counts for less. The
  per-step discounted return can then prefer a policy that is worse in simulated time
  (benchmarks/NOTES.md has the measurement on ``warehouse_v0``). :class:`SimTimeRolloutBuffer`
  with :class:`SimTimeCallback` discount by simulated time instead: a step of ``dt``
  seconds is discounted by ``gamma ** (dt / time_scale)``; a decision that takes no
  simulated time is not discounted.
* **Actions that name an entity.** In several scenarios action ``k >= 1`` names entity
  ``k - 1`` (a floor, an open order) whose features are block ``k - 1`` of the observation
  (or, with ``n_noops`` actions outside the entities, action ``k >= n_noops`` names entity
  ``k - n_noops``: warehouse_v1's wait and go come before its order slots).
  An MLP must learn the same rule once per block, and rarely seen blocks stay untrained
  (an elevator car that never serves the top floors). :class:`EntityPolicy` scores every
  block with one shared network.

    model = MaskablePPO(EntityPolicy, env, gamma=0.99,
                        policy_kwargs={"entity": (19, 8)},
                        rollout_buffer_class=SimTimeRolloutBuffer,
                        rollout_buffer_kwargs={"time_scale": 10.0})
    model.learn(400_000, callback=SimTimeCallback())

``env`` is ``to_sb3(make_vec(...))``, optionally wrapped (``VecNormalize``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch as th
from sb3_contrib.common.maskable.buffers import MaskableRolloutBuffer
from sb3_contrib.common.maskable.policies import MaskableActorCriticPolicy
from stable_baselines3.common.callbacks import BaseCallback
from torch import nn

from deszoo.errors import ConfigError

__all__ = ["EntityPolicy", "SimTimeCallback", "SimTimeRolloutBuffer"]


class SimTimeRolloutBuffer(MaskableRolloutBuffer):
    """A rollout buffer whose GAE discounts by simulated time (``gamma`` per ``time_scale`` s).

    ``dts[t]`` is the simulated length of step ``t`` of each row, filled by
    :class:`SimTimeCallback`. SB3's own bootstrap of truncated episodes (in
    ``collect_rollouts``) still adds ``gamma * V(final obs)`` per step.
    """

    def __init__(self, *args: Any, time_scale: float = 1.0, **kwargs: Any):
        if not time_scale > 0:
            raise ConfigError(f"SimTimeRolloutBuffer: time_scale must be > 0, got {time_scale}")
        self.time_scale = float(time_scale)
        super().__init__(*args, **kwargs)

    def reset(self) -> None:
        super().reset()
        self.dts = np.full((self.buffer_size, self.n_envs), np.nan, dtype=np.float32)

    def compute_returns_and_advantage(self, last_values: th.Tensor, dones: np.ndarray) -> None:
        if np.isnan(self.dts).any():
            raise ConfigError("SimTimeRolloutBuffer: step lengths are missing; pass "
                              "callback=SimTimeCallback() to learn()")
        last_values = last_values.clone().cpu().numpy().flatten()
        discount = self.gamma ** (self.dts / self.time_scale)
        last = np.zeros(self.n_envs, dtype=np.float32)
        for step in reversed(range(self.buffer_size)):
            if step == self.buffer_size - 1:
                not_done, next_values = 1.0 - dones.astype(np.float32), last_values
            else:
                not_done, next_values = 1.0 - self.episode_starts[step + 1], self.values[step + 1]
            g = discount[step]
            delta = self.rewards[step] + g * next_values * not_done - self.values[step]
            last = delta + g * self.gae_lambda * not_done * last
            self.advantages[step] = last
        self.returns = self.advantages + self.values


class SimTimeCallback(BaseCallback):
    """Copies each step's simulated length (``step_seconds`` of ``to_sb3``'s env) into a
    :class:`SimTimeRolloutBuffer`."""

    def _on_training_start(self) -> None:
        if not isinstance(self.model.rollout_buffer, SimTimeRolloutBuffer):
            raise ConfigError("SimTimeCallback needs the model built with "
                              "rollout_buffer_class=SimTimeRolloutBuffer")
        env = self.model.get_env()
        while env is not None and not hasattr(env, "step_seconds"):
            env = getattr(env, "venv", None)
        if env is None:
            raise ConfigError("SimTimeCallback needs an env made by deszoo.vector.to_sb3 "
                              "(it reports step_seconds)")
        self._source = env

    def _on_step(self) -> bool:
        buf = self.model.rollout_buffer
        buf.dts[buf.pos] = self._source.step_seconds
        return True


class EntityNet(nn.Module):
    """The actor and critic of :class:`EntityPolicy`; see there."""

    def __init__(self, obs_dim: int, n_global: int, n_entities: int, hidden: int = 64,
                 home: int | None = None, n_noops: int = 1):
        super().__init__()
        G, E = n_global, n_entities
        D = (obs_dim - G) // E if E > 0 else 0
        if E < 1 or G < 0 or G + E * D != obs_dim:
            raise ConfigError(f"EntityPolicy: an observation of {obs_dim} features is not "
                              f"{G} global features and {E} equal blocks")
        if home is not None and not 0 <= home < G:
            raise ConfigError(f"EntityPolicy: home={home} is not a global feature (0..{G - 1})")
        if n_noops < 1:
            raise ConfigError(f"EntityPolicy: n_noops={n_noops}, at least 1")
        self.G, self.E, self.D, self.home, self.K = G, E, D, home, n_noops
        H = hidden
        self.glob = nn.Sequential(nn.Linear(G + (D if home is not None else 0), H), nn.Tanh())
        self.ent = nn.Sequential(nn.Linear(D + 1, H), nn.Tanh())
        self.pair = nn.Sequential(nn.Linear(2 * H, H), nn.Tanh())
        self.score = nn.Linear(H, 1)
        self.noop = nn.Sequential(nn.Linear(2 * H, H), nn.Tanh(), nn.Linear(H, n_noops))
        self.critic = nn.Sequential(nn.Linear(obs_dim, H), nn.Tanh(), nn.Linear(H, H), nn.Tanh())
        self.register_buffer("pos", th.linspace(0.0, 1.0, E).view(1, E, 1))
        self.latent_dim_pi, self.latent_dim_vf = E + n_noops, H

    def global_input(self, features: th.Tensor) -> th.Tensor:
        """The global features, and with ``home`` the block of the entity the agent is at."""
        g = features[:, : self.G]
        if self.home is None:
            return g
        B = features.shape[0]
        blocks = features[:, self.G :].reshape(B, self.E, self.D)
        at = th.round(features[:, self.home] * (self.E - 1)).long().clamp(0, self.E - 1)
        return th.cat([g, blocks[th.arange(B), at]], dim=1)

    def forward_actor(self, features: th.Tensor) -> th.Tensor:
        B = features.shape[0]
        blocks = features[:, self.G :].reshape(B, self.E, self.D)
        g = self.glob(self.global_input(features))
        e = self.ent(th.cat([blocks, self.pos.expand(B, -1, -1)], dim=2))
        z = self.pair(th.cat([g.unsqueeze(1).expand(-1, self.E, -1), e], dim=2))
        noop = self.noop(th.cat([g, e.mean(dim=1)], dim=1))
        return th.cat([noop, self.score(z).squeeze(2)], dim=1)

    def forward_critic(self, features: th.Tensor) -> th.Tensor:
        return self.critic(features)

    def forward(self, features: th.Tensor) -> tuple[th.Tensor, th.Tensor]:
        return self.forward_actor(features), self.forward_critic(features)


class EntityPolicy(MaskableActorCriticPolicy):
    """A masked actor-critic for observations ``[n_global features, n_entities blocks]``
    where action ``k >= 1`` names entity ``k - 1``; with ``entity=(n_global, n_entities,
    n_noops)``, actions ``0 .. n_noops - 1`` name no entity and ``k >= n_noops`` names entity
    ``k - n_noops``.

    Logit ``k`` is one shared network applied to (the global features, block ``k - 1`` and
    its index scaled to [0, 1]); the no-op's logit (the logits of the ``n_noops`` actions
    outside the entities: one head of that width) comes from the global features and the
    mean of the blocks' embeddings. With ``home=i``, global feature ``i`` times
    ``n_entities - 1`` is the index of the entity the agent is at (an elevator car's floor),
    whose block joins the global features. The critic is a plain two-layer MLP.

    ``policy_kwargs={"entity": (n_global, n_entities), "hidden": 64, "home": None}``
    (``(n_global, n_entities, n_noops)`` for more than one action outside the entities;
    ``(G, E)`` is ``(G, E, 1)``, the same network).
    """

    def __init__(self, *args: Any, entity: tuple[int, int] = (0, 1), hidden: int = 64,
                 home: int | None = None, **kwargs: Any):
        self.entity, self.hidden, self.home = tuple(entity), int(hidden), home
        if len(self.entity) not in (2, 3):
            raise ConfigError(f"EntityPolicy: entity={entity} is not (n_global, n_entities) "
                              "or (n_global, n_entities, n_noops)")
        super().__init__(*args, **kwargs)
        noops = self.entity[2] if len(self.entity) == 3 else 1
        if self.action_space.n != self.entity[1] + noops:
            raise ConfigError(f"EntityPolicy: {self.action_space.n} actions, expected {noops} "
                              f"outside the entities and one per entity "
                              f"({self.entity[1] + noops})")

    def _build_mlp_extractor(self) -> None:
        G, E = self.entity[:2]
        noops = self.entity[2] if len(self.entity) == 3 else 1
        self.mlp_extractor = EntityNet(self.features_dim, G, E, self.hidden, self.home, noops)

    def _build(self, lr_schedule) -> None:
        super()._build(lr_schedule)
        self.action_net = nn.Identity()  # the extractor's actor output is the logits
        for layer in (self.mlp_extractor.score, self.mlp_extractor.noop[-1]):
            nn.init.orthogonal_(layer.weight, gain=0.01)  # near-uniform first policy
            nn.init.zeros_(layer.bias)
        self.optimizer = self.optimizer_class(self.parameters(), lr=lr_schedule(1),
                                              **self.optimizer_kwargs)

    def _get_constructor_parameters(self) -> dict[str, Any]:
        data = super()._get_constructor_parameters()
        data.update(entity=self.entity, hidden=self.hidden, home=self.home)
        return data
