"""Ape-X with a SAC learner (Haarnoja et al., 2018) for continuous actions: the Ape-X actor and learner
with SAC's networks and losses plugged in, everything else theirs (the replay service and its wire
format, the rate limiter, parameter pulls, checkpoints with the replay, fault handling).

``algo.learner`` picks (:func:`distrl.recipes.apex.config.learner_kind`): a ``Box`` action space gets
these roles, a discrete one double DQN's; :func:`learner` and :func:`actor` are what the recipe's rank
table builds.

- The actor plays its own copy of the policy (sampled, squashed to the box), refreshed on Ape-X's
  schedule (``algo.params_interval_s`` / ``params_interval_frames``), after ``algo.random_steps`` env
  steps of uniform random actions shared out over the actors. Its initial priorities are
  ``max_i |Q_i(s, a) - y|`` under its own copy when sampling is prioritized (``algo.alpha > 0``), 1
  otherwise (uniform sampling reads none).
- The learner takes one Adam step on SAC's three losses per sampled batch
  (:func:`distrl.algorithms.sac.sac_loss`), moves the target critics by Polyak averaging
  (``algo.tau``), sends the new priorities (prioritized sampling only), folds the batch's
  observations into the normaliser and publishes. The update-to-data ratio is the replay's rate
  limiter: ``algo.samples_per_insert / algo.batch_size`` updates per env step. The target critics
  travel in the checkpoint beside the replay.
"""

from __future__ import annotations

import copy
from typing import Optional

import torch

from distrl.algorithms.sac import polyak_update, sac_loss
from distrl.data import keys
from distrl.envs import torchrl_env
from distrl.envs.gym import is_factory, make_env
from distrl.nn.sac import ActionHead, SACNetwork
from distrl.recipes.apex.actor import ApexActor
from distrl.recipes.apex.config import learner_kind
from distrl.recipes.apex.learner import ApexLearner
from distrl.runtime import faults
from distrl.runtime.context import RoleContext


def action_box(env_id: str) -> tuple[torch.Tensor, torch.Tensor]:
    """``(low [A], high [A])`` of a gymnasium id's ``Box`` action space (builds one env and closes it), or
    of a TorchRL env factory's bounded box (:func:`distrl.envs.torchrl_env.action_box`)."""
    if is_factory(env_id):
        return torchrl_env.action_box(env_id)
    env = make_env(env_id)
    try:
        space = env.action_space
        return torch.as_tensor(space.low, dtype=torch.float32), torch.as_tensor(space.high, dtype=torch.float32)
    finally:
        env.close()


def sac_network(cfg, info) -> SACNetwork:
    """The SAC networks of ``cfg`` for ``info`` (:class:`~distrl.envs.info.EnvInfo`), actor and learner alike."""
    low, high = action_box(cfg.run.env)
    algo = cfg.algo
    return SACNetwork(info.shape, info.action_dim, low, high, cfg.net, algo.init_temperature, algo.critic_layer_norm)


class ApexSACLearner(ApexLearner):
    """Rank 0 of ``apex`` for continuous actions; see the module docstring."""

    def build(self, info) -> Optional[dict]:
        model = sac_network(self.cfg, info).to(self.device)
        # one Adam over policy, critics and temperature: Adam is per-parameter, so this is SB3's three
        # optimizers at one rate, and each loss reaches only its own parameters (sac_loss). foreach: the
        # same update over the 19 tensors in a few multi-tensor ops, not ~10 ops each (CPU's default is
        # the loop): 8.1 -> 6.6 ms an update at HalfCheetah's sizes in bfloat16 (docs/apex.md)
        optim = torch.optim.Adam(model.parameters(), lr=self.algo.lr, eps=self.algo.adam_eps, foreach=True)
        state = self.setup(model, optim)
        self.session.policy_network = "sac"  # load_policy rebuilds a SACNetwork (distrl/nn/trained_policy.py)
        # a resumed run's own target critics are loaded by ApexLearner.__init__ (checkpoints before it
        # held them under "target_qvalue")
        self.target = copy.deepcopy(self.model.qvalue).requires_grad_(False)
        restored = (state or {}).get("extra", {}).get("target_qvalue")
        if restored is not None:
            self.target.load_state_dict(restored)
        self.target_entropy = -float(info.action_dim)  # -|A| (Haarnoja et al., 2018, section 5)
        return state

    def _learn(self, batch) -> None:
        faults.maybe_signal(self.ctx.rank, self.tracker.updates)
        out = sac_loss(self.model, self.target, batch, self.target_entropy)
        grad_norm = self.apply_loss(out[keys.LOSS], towers=self.model.tower_parameters())
        if grad_norm is None:
            return
        polyak_update(self.target.parameters(), self.model.qvalue.parameters(), self.algo.tau)
        td = out[keys.TD_ERROR]
        if self.algo.alpha > 0:  # uniform sampling (alpha 0) reads no priority: no message, no tree update
            self.replay.update_priorities(batch, td)
        # the normaliser's statistics move after the step that trained on them; then publish (learned())
        stats = out.exclude(keys.TD_ERROR)
        self.learned(stats, grad_norm, batch[keys.OBSERVATION], **self.replay_metrics(batch, td))

    def evaluate(self) -> list[float]:
        return self.session.greedy_returns(self.model.greedy, head=ActionHead)


class ApexSACActor(ApexActor):
    """An Ape-X actor that plays SAC's policy; see the module docstring."""

    def __init__(self, ctx: RoleContext):
        # before the base class builds the env runner: a TorchRL factory's Collector calls _act as it is built
        self.low, self.high = action_box(ctx.cfg.run.env)
        actors = len(ctx.ranks_of("actor"))
        self.random_left = -(-ctx.cfg.algo.random_steps // actors)  # this actor's share, rounded up
        super().__init__(ctx)
        self.epsilon = 0.0  # no ladder: every actor samples its policy, and every episode counts
        self._greeted = False

    def build_model(self, info) -> torch.nn.Module:
        return sac_network(self.cfg, info)

    def _act(self, obs: torch.Tensor) -> dict:
        if self.random_left > 0:
            self.random_left -= obs.shape[0]
            u = torch.rand((obs.shape[0], self.low.shape[0]), generator=self.generator)
            return {keys.ACTION: self.low + (self.high - self.low) * u}
        return {keys.ACTION: self.model.act(obs, self.generator)}

    def _load(self, reply) -> None:
        if not self._greeted and keys.PARAMS in reply.keys():
            self.random_left = 0  # the learner's hello carries parameters only when it resumed a trained run
        self._greeted = True
        super()._load(reply)

    def priorities(self, window, G, discount, last) -> torch.Tensor:
        """``max_i |Q_i(s, a) - y|`` with ``y`` SAC's target under this actor's copy (prioritized
        sampling), or ones (uniform: ``algo.alpha = 0`` reads no priority, so none is computed)."""
        B, Tp = G.shape
        if self.algo.alpha == 0:
            return torch.ones(B * Tp)
        m = self.model
        obs = m.features(window[keys.OBSERVATION][:, :Tp].flatten(0, 1))
        rows = torch.arange(B)[:, None]
        z_next = m.features(window[keys.NEXT][keys.OBSERVATION][rows, last].flatten(0, 1))
        next_action, next_log_prob = m.sample(z_next, self.generator)
        soft_value = m.qvalue(z_next, next_action).min(0).values - m.alpha * next_log_prob
        y = G.reshape(-1) + discount.reshape(-1) * soft_value
        q = m.qvalue(obs, window[keys.ACTION][:, :Tp].flatten(0, 1))
        return (q - y).abs().max(0).values


def learner(ctx: RoleContext) -> ApexLearner:
    """Rank 0 of ``apex``: SAC's learner or double DQN's, as ``algo.learner`` picks."""
    return ApexSACLearner(ctx) if learner_kind(ctx.cfg) == "sac" else ApexLearner(ctx)


def actor(ctx: RoleContext) -> ApexActor:
    """An actor rank of ``apex``: SAC's policy or epsilon-greedy Q-values, as ``algo.learner`` picks."""
    return ApexSACActor(ctx) if learner_kind(ctx.cfg) == "sac" else ApexActor(ctx)
