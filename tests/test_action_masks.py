"""Action masks (docs/action-masks.md): the env contract, the masked heads against slow loops, and
the actors that must never act illegally.

The slow loops restrict each row to its legal set ``L`` and do what the paper does there:
    pi_L(a|s) = exp(z_a) / sum_{b in L} exp(z_b)  (a in L), the entropy -sum_{a in L} pi_L log pi_L;
    double DQN: y = G + d Q_target(s', argmax_{a in L(s')} Q(s', a)).
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import gymnasium as gym
import numpy as np
import pytest
import torch
from tensordict import TensorDict

from distrl.algorithms.apex import double_dqn_loss
from distrl.algorithms.impala import impala_loss
from distrl.config import NetConfig, override
from distrl.data import keys
from distrl.envs.action_mask import MaskedObservation, wrap_action_mask
from distrl.envs.gym import env_info, make_vector_env
from distrl.nn.action_mask import MaskBeside, legal_actions, masked_value, random_legal
from distrl.nn.models import ActorCritic, QNetwork
from distrl.recipes import get_recipe
from distrl.recipes.base import RoleContext
from distrl.roles.epsilon_greedy import EpsilonGreedyHead
from distrl.transport.local import LocalHub

A = 4  # MaskedPick's actions
MASKED, INFO, BLIND = "distrl/MaskedPick-v0", "distrl/MaskedPickInfo-v0", "distrl/MaskedPickBlind-v0"


def random_legal_sets(N: int, seed: int = 0) -> torch.Tensor:
    """``[N, A]`` bool, each entry legal with probability 1/2, at least one per row."""
    g = torch.Generator().manual_seed(seed)
    legal = torch.rand(N, A, generator=g) < 0.5
    legal[torch.arange(N), torch.randint(A, (N,), generator=g)] = True
    return legal


def masked_obs(legal: torch.Tensor, seed: int = 1) -> torch.Tensor:
    """Observations ``[N, 4 + A]`` as the env wrapper writes them: 4 features, then the mask as 0/1."""
    g = torch.Generator().manual_seed(seed)
    return torch.cat([torch.randn(legal.shape[0], 4, generator=g), legal.float()], dim=-1)


def perturbed(model: torch.nn.Module, seed: int) -> torch.nn.Module:
    """``model`` with its weights shaken, so its outputs differ a lot between actions."""
    torch.manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p))
    return model


# ---- the env contract --------------------------------------------------------------------------------
def test_a_dict_and_an_info_mask_become_the_same_flat_observation():
    info = env_info(MASKED)
    assert info.action_mask and env_info(INFO).action_mask and not env_info(BLIND).action_mask
    assert info.shape == (4 + A,) and env_info(BLIND).shape == (4,)
    (dict_env, info_env, blind) = (make_vector_env(e, 3, seed=5) for e in (MASKED, INFO, BLIND))
    for _ in range(30):
        a = np.zeros(3, dtype=np.int64)
        (o1, r1, *_), (o2, r2, *_), (o3, r3, *_) = (e.step(a) for e in (dict_env, info_env, blind))
        assert np.array_equal(o1, o2) and np.array_equal(o1[:, :4], o3) and np.array_equal(r1, r2)
        assert set(np.unique(o1[:, 4:])) <= {0.0, 1.0} and (o1[:, 4:].sum(-1) >= 1).all()
    for e in (dict_env, info_env, blind):
        e.close()


class _ImageWithMask(gym.Env):
    observation_space = gym.spaces.Dict(
        {"observation": gym.spaces.Box(0, 255, (8, 8, 3), np.uint8), "action_mask": gym.spaces.MultiBinary(3)}
    )
    action_space = gym.spaces.Discrete(3)


class _Board(gym.Env):
    """A [2, 3] board observation and a mask of the wrong length in its info (3 entries for 2 actions)."""

    observation_space = gym.spaces.Box(0.0, 1.0, (2, 3), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        return np.ones((2, 3), np.float32), {"action_mask": np.array([1, 0, 1], np.int8)}


class _ExtraKey(gym.Env):
    observation_space = gym.spaces.Dict(
        {
            "observation": gym.spaces.Box(0, 1, (2,), np.float32),
            "action_mask": gym.spaces.MultiBinary(3),
            "turn": gym.spaces.Discrete(2),
        }
    )
    action_space = gym.spaces.Discrete(3)


def test_what_cannot_carry_a_mask_is_refused_in_one_line():
    with pytest.raises(ValueError, match="image") as e:
        wrap_action_mask(_ImageWithMask(), "test/Image-v0")
    assert "\n" not in str(e.value)
    with pytest.raises(ValueError, match="nothing else"):
        wrap_action_mask(_ExtraKey(), "test/ExtraKey-v0")
    env = wrap_action_mask(_Board(), "test/Board-v0")  # a small array is flattened beside its mask
    assert isinstance(env, MaskedObservation) and env.observation_space.shape == (6 + 2,)
    with pytest.raises(ValueError, match="3 entries for 2 actions"):
        env.reset()
    cartpole = wrap_action_mask(gym.make("CartPole-v1"), "CartPole-v1")
    assert cartpole.observation_space.shape == (4,)  # no mask: as it was


# ---- the heads against slow loops ------------------------------------------------------------------
def test_a_masked_policy_never_samples_nor_takes_an_illegal_action_and_its_log_probs_are_over_legal_ones():
    legal = random_legal_sets(4096)
    obs = masked_obs(legal)
    model = perturbed(ActorCritic(4 + A, A, NetConfig(obs_norm="off"), action_mask=True), 0)
    logits = model.policy(obs)
    action, log_prob = model.head.sample(logits, torch.Generator().manual_seed(0))
    assert legal.gather(-1, action[:, None]).all() and legal.gather(-1, model.greedy(obs)[:, None]).all()
    lp, entropy = model.head.log_prob_entropy(logits, action)
    assert torch.isfinite(lp).all() and torch.isfinite(entropy).all()
    raw = model.policy.tower(obs)  # the unmasked logits
    for n in range(0, 4096, 97):  # the slow loop: the distribution over the legal set alone
        z = {a: raw[n, a].item() for a in range(A) if legal[n, a]}
        norm = math.log(sum(math.exp(v) for v in z.values()))
        pi = {a: math.exp(v - norm) for a, v in z.items()}
        assert lp[n].item() == pytest.approx(z[int(action[n])] - norm, abs=1e-5)
        assert log_prob[n].item() == pytest.approx(lp[n].item(), abs=1e-5)
        assert entropy[n].item() == pytest.approx(-sum(p * math.log(p) for p in pi.values()), abs=1e-5)


def test_a_row_without_a_legal_action_counts_every_action_legal():
    obs = torch.cat([torch.zeros(2, 4), torch.tensor([[0.0, 0, 0, 0], [0, 1, 0, 0]])], dim=-1)
    assert legal_actions(obs, A).tolist() == [[True] * 4, [False, True, False, False]]


def test_the_impala_loss_reads_the_masked_distribution():
    legal = random_legal_sets(6 * 5, seed=3).reshape(6, 5, A)
    obs, nxt = masked_obs(legal.reshape(-1, A), 4).reshape(6, 5, -1), masked_obs(legal.reshape(-1, A), 5)
    model = perturbed(ActorCritic(4 + A, A, NetConfig(obs_norm="off"), action_mask=True), 1)
    with torch.no_grad():
        action, log_mu = model.act(obs, torch.Generator().manual_seed(1))
    g = torch.Generator().manual_seed(2)
    batch = TensorDict(
        {
            keys.OBSERVATION: obs,
            keys.ACTION: action,
            keys.ACTION_LOG_PROB: log_mu,
            keys.NEXT: TensorDict(
                {
                    keys.OBSERVATION: nxt.reshape(6, 5, -1),
                    keys.STEP_REWARD: torch.randn(6, 5, 1, generator=g),
                    keys.STEP_DONE: torch.zeros(6, 5, 1, dtype=torch.bool),
                    keys.STEP_TERMINATED: torch.zeros(6, 5, 1, dtype=torch.bool),
                },
                batch_size=[6, 5],
            ),
        },
        batch_size=[6, 5],
    )
    hp = SimpleNamespace(
        gamma=0.9, rho_bar=1.0, c_bar=1.0, value_coef=0.5, entropy_coef=0.01, normalize_advantage=False, reward_scale=1
    )
    out = impala_loss(model, batch, hp)
    out[keys.LOSS].backward()
    assert out["rho_mean"].item() == pytest.approx(1.0, abs=1e-5)  # on-policy: the learner's pi is the actor's mu
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


def test_the_double_dqn_target_maxes_over_legal_actions_only():
    N, gamma = 512, 0.9
    legal = random_legal_sets(N, seed=7)
    obs, nxt = masked_obs(random_legal_sets(N, seed=8), 9), masked_obs(legal, 10)
    net = NetConfig(hidden=(16,), obs_norm="off")
    model = perturbed(QNetwork(4 + A, A, net, dueling=True, action_mask=True), 2)
    target = perturbed(QNetwork(4 + A, A, net, dueling=True, action_mask=True), 3)
    g = torch.Generator().manual_seed(4)
    batch = TensorDict(
        {
            keys.OBSERVATION: obs,
            keys.ACTION: random_legal(obs[:, 4:] > 0.5, g),
            keys.NEXT_OBSERVATION: nxt,
            keys.NSTEP_RETURN: torch.randn(N, generator=g),
            keys.BOOTSTRAP_DISCOUNT: torch.full((N,), gamma),
            keys.PRIORITY_WEIGHT: torch.ones(N),
        },
        batch_size=[N],
    )
    td = double_dqn_loss(model, target, batch, SimpleNamespace(huber_delta=1.0))[keys.TD_ERROR]
    with torch.no_grad():
        q_next, qt_next = model.q.tower(nxt), target.q.tower(nxt)  # unmasked
        q_taken = model(obs).gather(-1, batch[keys.ACTION][:, None]).squeeze(-1)
    illegal_best = 0
    for n in range(N):  # the slow loop
        best = max((a for a in range(A) if legal[n, a]), key=lambda a: q_next[n, a].item())
        y = batch[keys.NSTEP_RETURN][n].item() + gamma * qt_next[n, best].item()
        assert td[n].item() == pytest.approx(y - q_taken[n].item(), abs=1e-4)
        illegal_best += not legal[n, q_next[n].argmax()]
    assert illegal_best > N // 10  # the unmasked argmax would have bootstrapped from illegal actions this often


def test_epsilon_greedy_explores_among_legal_actions_only():
    legal = random_legal_sets(20_000, seed=11)
    q = torch.randn(20_000, A).masked_fill(~legal, masked_value(torch.float32))
    head = EpsilonGreedyHead(A, epsilon=1.0, masked=True)
    action, log_prob = head.sample(q, torch.Generator().manual_seed(0))
    assert legal.gather(-1, action[:, None]).all()
    L = legal.sum(-1).float()
    # eps = 1: each legal action with probability 1/L (the greedy one too: 1 - eps + eps/L = 1/L)
    assert torch.allclose(log_prob, -torch.log(L))
    two = legal.sum(-1) == 2  # rows of two legal actions: each drawn about half the time
    first = legal[two].float().argmax(-1)
    assert (action[two] == first).float().mean().item() == pytest.approx(0.5, abs=0.03)


def test_a_mask_read_beside_the_observation_gives_the_same_outputs():
    legal = random_legal_sets(64, seed=12)
    obs = masked_obs(legal)
    model = ActorCritic(4 + A, A, NetConfig(), action_mask=True)
    beside = MaskBeside(model.policy)(obs[:, :4], legal)
    assert torch.equal(beside, model.policy(obs))


# ---- the actors: untrained, sampling, on the env that punishes illegal actions -----------------------
@pytest.mark.parametrize("recipe", ["impala", "apex"])
def test_the_behaviour_policy_never_acts_illegally(tmp_path, recipe):
    """An untrained impala actor (near-uniform sampling) and an apex actor exploring at epsilon 1:
    every action they take is legal under the mask they acted on."""
    changes = {"run.env": MASKED, "run.logger": "none", "run.run_dir": str(tmp_path), "algo.envs_per_actor": 8}
    if recipe == "apex":
        changes |= {"algo.eps_base": 1.0, "algo.n_step": 1}
    cfg = override(get_recipe(recipe).default_config(), **changes)
    roles = {0: "learner", 1: "actor"} if recipe == "impala" else {0: "learner", 1: "replay", 2: "actor"}
    rank = max(roles)
    ctx = RoleContext(cfg, LocalHub(rank + 1).endpoint(rank), rank, roles, tmp_path)
    actor = get_recipe(recipe).builders["actor"](ctx)
    try:
        traj = actor.runner.unroll(actor._act, 50)[0]  # [8, 50]: 400 steps, many episodes
    finally:
        actor.runner.close()
    legal = traj[keys.OBSERVATION][..., -A:] > 0.5
    assert legal.gather(-1, traj[keys.ACTION][..., None]).all()
    assert (traj[keys.REWARD] >= 0).all()  # -1 is the illegal action's


def test_the_numpy_policy_masks_as_the_torch_one():
    """The actors' numpy fast path (distrl/nn/numpy_policy.py) runs a masked MLP too: its samples are
    legal and its log-probabilities those of the torch module's masked logits."""
    from distrl.nn.numpy_policy import NumpyPolicy

    legal = random_legal_sets(2048, seed=13)
    obs = masked_obs(legal)
    model = perturbed(ActorCritic(4 + A, A, NetConfig(obs_norm="off"), action_mask=True), 4)
    assert NumpyPolicy.supports(model.policy)
    action, log_prob = NumpyPolicy(model.policy, 0).act(obs)
    assert legal.gather(-1, action[:, None]).all()
    assert torch.allclose(log_prob, model.head.log_prob(model.policy(obs), action), atol=1e-5)


def test_evaluation_explores_among_legal_actions():
    """``distrl eval --policy epsilon`` (``play_episodes``' random actions) never plays an illegal one:
    at epsilon 1 every episode of the masked env runs its 20 steps without the -1 that ends it."""
    from distrl.envs.gym import play_episodes

    played = play_episodes(lambda obs: torch.zeros(obs.shape[0], dtype=torch.int64), MASKED, 8, seed=0, epsilon=1.0)
    assert played.lengths == [20] * 8 and min(played.returns) >= 0


def masked_pick_factory():
    """A TorchRL env with an ``action_mask`` key (GymEnv of the Dict-observation env): refused."""
    from torchrl.envs import GymEnv

    return GymEnv(MASKED)


def test_what_does_not_read_masks_says_so_in_one_line():
    from distrl.cli.options import build_config, make_parser
    from distrl.cli.runner import plan
    from distrl.envs.torchrl_env import check_factory

    with pytest.raises(ValueError, match="reads action masks from gymnasium envs") as e:
        check_factory(f"{__name__}:masked_pick_factory")
    assert "\n" not in str(e.value)
    args = ["seed", "--experiment", "debug_lstm", "--env", MASKED, "--logger", "none"]
    with pytest.raises(ValueError, match="algo.core=lstm does not read action masks"):
        plan(build_config(make_parser().parse_args(args)), 1)
