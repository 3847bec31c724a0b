"""The next values impala_loss and appo_loss take (distrl/algorithms/estimators.py): reused from
the observations' values where the unroll continues, equal to a forward of every next observation."""

import torch

from distrl.algorithms.estimators import next_values
from distrl.algorithms.impala import impala_loss
from distrl.config import NetConfig
from distrl.data import keys
from distrl.nn.models import ActorCritic
from test_compact import rollout


def test_reused_values_equal_a_forward_of_every_next_observation():
    torch.manual_seed(0)
    model = ActorCritic((4, 10, 10), 3, NetConfig(encoder="minatar"))
    batch = rollout(6, 12, (4, 10, 10), torch.bool, p_end=0.2)
    batch[keys.ACTION] = batch[keys.ACTION] % 3
    with torch.no_grad():
        _, value = model(batch[keys.OBSERVATION])
        fast = next_values(
            model.value, value, batch[keys.NEXT_OBSERVATION], batch[keys.DONE], obs=batch[keys.OBSERVATION]
        )
        slow = model.value(batch[keys.NEXT_OBSERVATION])
    assert int(batch[keys.DONE][:, :-1].sum()) > 0  # some episodes ended inside the unroll
    # the same rows through the same layers, but in batches of other sizes: float32 reduction order
    torch.testing.assert_close(fast, slow, rtol=1e-5, atol=1e-6)


def test_a_batch_whose_next_observations_are_not_the_following_ones_is_evaluated_in_full():
    model = ActorCritic((4, 10, 10), 3, NetConfig(encoder="minatar"))
    batch = rollout(2, 5, (4, 10, 10), torch.bool, p_end=0.0)
    batch[keys.NEXT_OBSERVATION] = ~batch[keys.NEXT_OBSERVATION]  # not a contiguous unroll
    with torch.no_grad():
        _, value = model(batch[keys.OBSERVATION])
        got = next_values(
            model.value, value, batch[keys.NEXT_OBSERVATION], batch[keys.DONE], obs=batch[keys.OBSERVATION]
        )
        torch.testing.assert_close(got, model.value(batch[keys.NEXT_OBSERVATION]))


def test_the_loss_is_unchanged():
    class Full(torch.nn.Module):  # the same model, without the reuse (not an ActorCritic instance check)
        def __init__(self, m):
            super().__init__()
            self.m, self.recurrent = m, True

        def forward(self, obs):
            return self.m(obs)

        def value(self, obs):
            return self.m.value(obs)

    torch.manual_seed(1)
    model = ActorCritic((4, 10, 10), 3, NetConfig(encoder="minatar"))
    batch = rollout(4, 10, (4, 10, 10), torch.bool, p_end=0.2)
    batch[keys.ACTION] = batch[keys.ACTION] % 3
    batch[keys.ACTION_LOG_PROB] = torch.full((4, 10), -1.1)
    hp = type(
        "HP",
        (),
        dict(
            gamma=0.99,
            rho_bar=1.0,
            c_bar=1.0,
            value_coef=0.5,
            entropy_coef=0.01,
            normalize_advantage=False,
            reward_scale=1.0,
        ),
    )
    a, b = impala_loss(model, batch, hp), impala_loss(Full(model), batch, hp)
    for k in a.keys():
        torch.testing.assert_close(a[k], b[k], rtol=1e-5, atol=1e-6)
