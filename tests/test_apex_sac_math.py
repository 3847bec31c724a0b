"""SAC's math (distrl/algorithms/sac.py, distrl/nn/sac.py) against independent references: the
squashed log-probability against ``torch.distributions`` with a tanh and an affine transform, the
losses and their gradients against a slow loop in the paper's notation (tests/references.py) and,
for 1-step returns, against TorchRL's ``SACLoss``; the Polyak update against its formula."""

from __future__ import annotations

import copy

import pytest
import torch
from tensordict import TensorDict
from torch.distributions import AffineTransform, Normal, TanhTransform, TransformedDistribution

from distrl.algorithms.sac import polyak_update, sac_loss, soft_targets
from distrl.config import NetConfig
from distrl.data import keys
from distrl.nn.sac import SACNetwork, squashed_log_prob, squashed_sample
from references import slow_sac_losses, slow_squashed_log_prob

B, F, A = 6, 5, 3
LOW, HIGH = torch.tensor([-1.0, -2.0, 0.0]), torch.tensor([1.0, 0.5, 3.0])


def _dist(mean, log_std, low=LOW, high=HIGH):
    """torch.distributions' squashed Gaussian: tanh, then the affine map onto the box."""
    affine = AffineTransform(loc=(high + low) / 2, scale=(high - low) / 2)
    return TransformedDistribution(Normal(mean, log_std.exp()), [TanhTransform(), affine])


def test_squashed_log_prob_matches_torch_distributions():
    g = torch.Generator().manual_seed(0)
    mean, log_std = torch.randn(B, A, generator=g), torch.randn(B, A, generator=g) * 0.5
    u = mean + log_std.exp() * torch.randn(B, A, generator=g)
    scale, bias = (HIGH - LOW) / 2, (HIGH + LOW) / 2
    ours = squashed_log_prob(mean, log_std, u, scale)
    action = bias + scale * torch.tanh(u)
    theirs = _dist(mean, log_std).log_prob(action).sum(-1)
    torch.testing.assert_close(ours, theirs, atol=1e-4, rtol=1e-4)
    slow = torch.stack([slow_squashed_log_prob(mean[b], log_std[b], u[b], LOW, HIGH) for b in range(B)])
    torch.testing.assert_close(ours, slow, atol=1e-5, rtol=1e-5)


def test_squashed_log_prob_stays_finite_where_tanh_saturates():
    """At ``u = 20`` ``tanh(u)`` is 1 in float32 and ``log(1 - tanh^2)`` would be ``-inf``; the softplus
    form is exact."""
    mean, log_std = torch.full((1, A), 20.0), torch.zeros(1, A)
    lp = squashed_log_prob(mean, log_std, mean.clone(), (HIGH - LOW) / 2)
    assert torch.isfinite(lp).all()
    exact = (-0.5 * torch.log(torch.tensor(2 * torch.pi)) - (torch.log(torch.tensor(4.0)) - 40.0)) * A
    torch.testing.assert_close(lp, exact.expand(1) - torch.log((HIGH - LOW) / 2).sum(), atol=1e-3, rtol=1e-5)


def test_squashed_sample_in_the_box_and_reparameterised():
    mean = torch.randn(1000, A, requires_grad=True)
    action, log_prob = squashed_sample(mean, torch.zeros(1000, A), (HIGH - LOW) / 2, (HIGH + LOW) / 2)
    assert ((action >= LOW) & (action <= HIGH)).all() and log_prob.shape == (1000,)
    action.sum().backward()
    assert mean.grad is not None and (mean.grad > 0).all()  # a = bias + scale tanh(u) grows with the mean


def _model_and_batch(seed: int = 0):
    torch.manual_seed(seed)
    model = SACNetwork((F,), A, LOW, HIGH, NetConfig(hidden=(8, 8), activation="relu"), init_temperature=0.3)
    model.obs_norm.update_batch(torch.randn(50, F) * 3 + 1)  # statistics that change the features
    target = copy.deepcopy(model.qvalue).requires_grad_(False)
    with torch.no_grad():
        for p in target.parameters():
            p.add_(0.1 * torch.randn_like(p))  # a target that lags the online critic
    batch = TensorDict(
        {
            keys.OBSERVATION: torch.randn(B, F),
            keys.ACTION: LOW + (HIGH - LOW) * torch.rand(B, A),
            keys.NSTEP_RETURN: torch.randn(B),
            # gamma^m per item (shorter windows at episode ends), 0 after a termination
            keys.BOOTSTRAP_DISCOUNT: torch.tensor([0.99**3, 0.99**3, 0.99, 0.0, 0.99**2, 0.99**3]),
            keys.NEXT_OBSERVATION: torch.randn(B, F),
            keys.PRIORITY_WEIGHT: torch.rand(B) + 0.5,
        },
        batch_size=[B],
    )
    return model, target, batch


def test_sac_losses_and_gradients_match_the_papers_loop():
    model, target, batch = _model_and_batch()
    H = -float(A)
    torch.manual_seed(1)
    out = sac_loss(model, target, batch, H)
    torch.manual_seed(1)  # the same draws, in sac_loss's order: a' at s' first, then a~ at s
    noise_next, noise = torch.randn(B, A), torch.randn(B, A)
    ref = slow_sac_losses(model, target, batch, noise_next, noise, H)
    for k in ("loss_qvalue", "loss_actor", "loss_alpha"):
        torch.testing.assert_close(out[k], ref[k].detach().reshape(()), atol=1e-5, rtol=1e-5)
    # the priorities: the larger of the two critics' |Q_i - y|
    q = model.qvalue(model.features(batch[keys.OBSERVATION]), batch[keys.ACTION]).detach()
    y = torch.tensor(ref["y"])
    torch.testing.assert_close(out[keys.TD_ERROR], (q - y).abs().max(0).values, atol=1e-5, rtol=1e-5)

    # one backward of the sum gives each tower the gradient of its own objective only
    critic, actor = list(model.qvalue.parameters()), list(model.actor.parameters())
    model.zero_grad()
    out[keys.LOSS].backward()
    want_critic = torch.autograd.grad(ref["loss_qvalue"], critic, retain_graph=True)
    want_actor = torch.autograd.grad(ref["loss_actor"], actor, retain_graph=True)
    (want_alpha,) = torch.autograd.grad(ref["loss_alpha"], [model.log_alpha])
    for got, want in zip(critic + actor + [model.log_alpha], list(want_critic) + list(want_actor) + [want_alpha]):
        torch.testing.assert_close(got.grad, want, atol=1e-5, rtol=1e-4)
    assert all(p.grad is None for p in model.obs_norm.parameters())


def test_temperature_moves_toward_the_target_entropy():
    """Entropy below the target (``log pi > -H_target``) raises ``alpha``; above it, lowers it."""
    model, target, batch = _model_and_batch()
    for H, sign in ((1e3, -1.0), (-1e3, 1.0)):  # an unreachable target above, one far below
        model.zero_grad()
        sac_loss(model, target, batch, H)[keys.LOSS].backward()
        assert float(model.log_alpha.grad) * sign > 0  # gradient descent moves log alpha by -grad


def test_soft_targets_formula():
    G, d = torch.tensor([1.0, 2.0]), torch.tensor([0.9, 0.0])
    next_q, lp = torch.tensor([[3.0, 5.0], [4.0, 1.0]]), torch.tensor([-1.0, 2.0])
    y = soft_targets(G, d, next_q, lp, 0.5)
    torch.testing.assert_close(y, torch.tensor([1.0 + 0.9 * (3.0 + 0.5), 2.0]))


@pytest.mark.parametrize("tau", [0.005, 0.5, 1.0])
def test_polyak_update(tau):
    online, target = torch.nn.Linear(4, 3), torch.nn.Linear(4, 3)
    before = [p.detach().clone() for p in target.parameters()]
    polyak_update(target.parameters(), online.parameters(), tau)
    for new, old, p in zip(target.parameters(), before, online.parameters()):
        torch.testing.assert_close(new.detach(), tau * p.detach() + (1 - tau) * old)


def test_greedy_is_the_squashed_scaled_mean():
    model, _, batch = _model_and_batch()
    obs = batch[keys.OBSERVATION]
    mean, _ = model.dist_params(model.features(obs))
    want = (HIGH + LOW) / 2 + (HIGH - LOW) / 2 * torch.tanh(mean)
    torch.testing.assert_close(model.greedy(obs), want)
    assert ((model.act(obs) >= LOW) & (model.act(obs) <= HIGH)).all()


@pytest.mark.filterwarnings("ignore:No target network updater")  # distrl moves its target itself
def test_one_step_losses_match_torchrls_sac_loss():
    """With 1-step transitions (one ``gamma`` for every item) the same networks give TorchRL's ``SACLoss``
    (``loss_function="l2"``: its critic loss is ``sum_i mean (Q_i - y)^2``, twice ``J_Q``) the same
    three losses, from the same draws (TorchRL's ``TanhNormal`` over the same mean and std)."""
    from tensordict.nn import TensorDictModule
    from torchrl.modules import ProbabilisticActor, TanhNormal, ValueOperator
    from torchrl.objectives import SACLoss, ValueEstimators

    from distrl.nn.sac import LocScale

    model, _, batch = _model_and_batch()
    target = copy.deepcopy(model.qvalue).requires_grad_(False)  # SACLoss's target starts as a copy too
    gamma = 0.99
    batch[keys.BOOTSTRAP_DISCOUNT] = torch.tensor([gamma, gamma, 0.0, gamma, 0.0, gamma])
    batch[keys.PRIORITY_WEIGHT] = torch.ones(B)

    class Q(torch.nn.Module):  # one of the twin critics, on the normalised observation
        def __init__(self, q):
            super().__init__()
            self.q = q

        def forward(self, obs, action):
            return self.q(torch.cat([model.features(obs), action], -1))

    box = {"low": LOW, "high": HIGH}
    actor = ProbabilisticActor(
        TensorDictModule(LocScale(model), in_keys=["observation"], out_keys=["loc", "scale"]),
        in_keys=["loc", "scale"],
        distribution_class=TanhNormal,
        distribution_kwargs=box,
        return_log_prob=True,
    )
    critics = [ValueOperator(Q(q), in_keys=["observation", "action"]) for q in (model.qvalue.q1, model.qvalue.q2)]
    loss = SACLoss(actor, critics, loss_function="l2", alpha_init=0.3, target_entropy=-float(A))
    loss.make_value_estimator(ValueEstimators.TD0, gamma=gamma)
    terminated = (batch[keys.BOOTSTRAP_DISCOUNT] == 0)[:, None]
    td = TensorDict(
        {
            "observation": batch[keys.OBSERVATION],
            "action": batch[keys.ACTION],
            "next": {
                "observation": batch[keys.NEXT_OBSERVATION],
                "reward": batch[keys.NSTEP_RETURN][:, None],
                "done": terminated,
                "terminated": terminated,
            },
        },
        batch_size=[B],
    )
    torch.manual_seed(2)
    theirs = loss(td)
    torch.manual_seed(2)
    ours = sac_loss(model, target, batch, -float(A))
    torch.testing.assert_close(theirs["loss_qvalue"], 2 * ours["loss_qvalue"], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(theirs["loss_actor"], ours["loss_actor"], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(theirs["loss_alpha"], ours["loss_alpha"], atol=1e-5, rtol=1e-5)


def test_critic_layer_norm_puts_layer_norms_in_the_critics_only_and_loads_back():
    """``algo.critic_layer_norm``: each critic reads ``Linear, LayerNorm, activation`` per hidden width,
    the policy keeps its plain layout, and ``sac_from_state`` rebuilds the same model from the weights."""
    from distrl.nn.sac import sac_from_state

    net = NetConfig(hidden=(8, 8), activation="relu")
    torch.manual_seed(0)
    model = SACNetwork((5,), 3, LOW, HIGH, net, critic_layer_norm=True)
    norms = [name for name, m in model.named_modules() if isinstance(m, torch.nn.LayerNorm)]
    assert sorted(norms) == ["qvalue.q1.1", "qvalue.q1.4", "qvalue.q2.1", "qvalue.q2.4"], norms
    assert [type(m) for m in model.actor] == [torch.nn.Linear, torch.nn.ReLU] * 2 + [torch.nn.Linear]
    again = sac_from_state(model.state_dict(), net)
    obs, act = torch.randn(4, 5), torch.rand(4, 3)
    z = model.features(obs)
    torch.testing.assert_close(again.qvalue(again.features(obs), act), model.qvalue(z, act))
    torch.testing.assert_close(again.greedy(obs), model.greedy(obs))
