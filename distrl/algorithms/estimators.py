"""Value estimators: the targets and advantages a loss regresses on, as pure functions of tensors.

TorchRL's split (``torchrl/objectives/value/functional.py`` beside ``torchrl/objectives/a2c.py``):
an estimator turns rewards, episode ends and critic values into targets; the loss of each algorithm
(:mod:`distrl.algorithms.impala`, ``appo``, ``ppo``, ``a3c``, ``apex``) only reads them.

* :func:`vtrace_targets` (IMPALA, Espeholt et al. 2018) and :func:`vtrace_pg_advantage` (APPO's
  advantage on V-trace targets);
* :func:`gae` (Schulman et al. 2016), TorchRL's ``generalized_advantage_estimate``;
* :func:`n_step_advantage` (A3C's longest n-step return inside a segment, Mnih et al. 2016);
* :func:`nstep_returns` (Ape-X's fixed-n returns across episode ends, Horgan et al. 2018);
* :func:`next_values`: ``V(x_{s+1})`` of a ``[B, T]`` unroll, one critic pass saved.

Episode ends, one convention everywhere: ``done`` is any end (it cuts a trace or a sum),
``terminated`` a true terminal state (nothing is bootstrapped after it); a truncation bootstraps
from the value of the true final observation. Each function is checked against a slow loop in its
paper's notation (``tests/test_impala_math.py``, ``test_vecenv_ppo.py``, ``test_a3c_math.py``,
``test_apex_math.py``, ``test_sf_units.py``).
"""

from __future__ import annotations

from typing import Callable, Optional

import torch
from torchrl.objectives.value.functional import generalized_advantage_estimate, td_lambda_return_estimate


def vtrace_targets(
    gamma: float,
    target_log_prob: torch.Tensor,
    behaviour_log_prob: torch.Tensor,
    value: torch.Tensor,
    next_value: torch.Tensor,
    reward: torch.Tensor,
    done: torch.Tensor,
    terminated: torch.Tensor,
    rho_bar: float = 1.0,
    c_bar: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """V-trace value targets ``v_s`` and policy-gradient advantages.

    All tensors are ``[B, T, 1]``; ``done`` marks any episode end (terminal or truncated) and
    cuts the trace, ``terminated`` alone stops bootstrapping from ``next_value``.

    Written here rather than taken from TorchRL's ``vtrace_advantage_estimate`` for speed alone: the
    two agree to 1e-6, but TorchRL's reverse scan makes six small ops a step and this one one, and
    on these CPUs a small torch op costs several us whatever its size: on sf's ``[64, 32]`` batch
    0.29 ms against 0.13 ms, of a 4.2 ms update (``python experiments/bench_learner.py``, 2026-12-02).

    Returns:
        ``(advantage [B, T, 1], vs [B, T, 1])`` with
        ``advantage_s = min(rho_bar, rho_s) (r_s + gamma v_{s+1} - V(x_s))``.
    """
    rho = (target_log_prob - behaviour_log_prob).exp()
    clipped_rho = rho.clamp_max(rho_bar)
    bootstrap = torch.where(terminated, 0.0, next_value)  # V(x_{s+1}); nothing after a termination
    delta = clipped_rho * (reward + gamma * bootstrap - value)  # rho_s (r_s + gamma V(x_{s+1}) - V(x_s))
    trace = (gamma * rho.clamp_max(c_bar)).masked_fill_(done, 0.0)  # gamma c_s, cut at every episode end
    # vs_s - V(x_s) = delta_s + gamma c_s (vs_{s+1} - V(x_{s+1})), scanned back over time-major rows
    d, c = delta.squeeze(-1).t().contiguous(), trace.squeeze(-1).t().contiguous()  # [T, B]
    acc = torch.empty_like(d)
    d_s, c_s, acc_s = d.unbind(0), c.unbind(0), acc.unbind(0)
    acc_s[-1].copy_(d_s[-1])
    for s in range(d.shape[0] - 2, -1, -1):
        torch.addcmul(d_s[s], c_s[s], acc_s[s + 1], out=acc_s[s])
    vs = acc.t().unsqueeze(-1) + value
    # v_{s+1}: the next target inside an episode, V(x_{s+1}) at the unroll's end and at episode ends
    vs_next = torch.where(done, next_value, torch.cat([vs[:, 1:], next_value[:, -1:]], dim=1))
    advantage = clipped_rho * (reward + gamma * torch.where(terminated, 0.0, vs_next) - value)
    return advantage, vs


def vtrace_pg_advantage(
    vs: torch.Tensor,
    next_value: torch.Tensor,
    value: torch.Tensor,
    reward: torch.Tensor,
    done: torch.Tensor,
    terminated: torch.Tensor,
    gamma: float,
) -> torch.Tensor:
    """``r_s + gamma (1 - term_s) v'_{s+1} - V(x_s)``, all ``[B, T, 1]``: :func:`vtrace_targets`'
    advantage without its ``rho`` (APPO, Sample Factory's choice: the importance ratio enters once,
    through PPO's clipped ratio).

    ``v'_{s+1}`` is ``vs[:, s+1]`` inside an episode and the unroll, ``next_value[:, s]`` (the
    critic at the true next observation) at the unroll's last step and where the episode ended.
    """
    vs_next = torch.cat([vs[:, 1:], next_value[:, -1:]], dim=1)
    vs_next = torch.where(done, next_value, vs_next)
    return reward + gamma * (~terminated).float() * vs_next - value


def gae(
    gamma: float,
    lmbda: float,
    value: torch.Tensor,
    next_value: torch.Tensor,
    reward: torch.Tensor,
    done: torch.Tensor,
    terminated: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GAE(gamma, lambda) advantages and value targets of a time-major rollout.

    Args:
        value, next_value: ``V(s_t)`` and ``V(s_{t+1})`` ``[T, B]``; ``next_value`` is the value of
            the true next observation, also where the episode was truncated.
        reward: ``r_t`` ``[T, B]``.
        done: ``[T, B]`` bool, any episode end (cuts the trace); ``terminated`` ``[T, B]`` bool,
            a true terminal state (no bootstrap from ``next_value``).

    Returns:
        ``(advantage [T, B], value_target [T, B])`` with ``value_target = advantage + value``.
    """
    adv, target = generalized_advantage_estimate(
        gamma,
        lmbda,
        value.unsqueeze(-1),
        next_value.unsqueeze(-1),
        reward.unsqueeze(-1),
        done.unsqueeze(-1),
        terminated.unsqueeze(-1),
        time_dim=0,
    )
    return adv.squeeze(-1), target.squeeze(-1)


def n_step_advantage(
    gamma: float,
    value: torch.Tensor,
    next_value: torch.Tensor,
    reward: torch.Tensor,
    done: torch.Tensor,
    terminated: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """A3C's advantages ``R_i - V(s_i)`` and n-step returns ``R_i`` of a batch of segments.

    ``R_i = r_i + gamma R_{i+1}``, bootstrapped from ``V(s'_i)`` at the segment's end and at
    truncations: TD(lambda) with ``lambda = 1``, so TorchRL's ``td_lambda_return_estimate`` (not
    GAE with lambda 1, which equals it only when ``V(s'_i)`` and ``V(s_{i+1})`` agree bit for bit).

    Args:
        value: ``V(s_i)`` ``[B, T, 1]``.
        next_value: ``V(s'_i)`` ``[B, T, 1]``, the value of the observation after step ``i`` (the
            true final one where an episode ended); read only at the segment's last step (the
            bootstrap) and at truncations.
        reward: ``r_i`` ``[B, T, 1]``.
        done: ``[B, T, 1]`` bool, any episode end (restarts the return).
        terminated: ``[B, T, 1]`` bool, a true terminal state (nothing is bootstrapped after it).

    Returns:
        ``(advantage [B, T, 1], returns [B, T, 1])`` with ``returns = advantage + value``.
    """
    returns = td_lambda_return_estimate(gamma, 1.0, next_value, reward, done, terminated, time_dim=-2)
    return returns - value, returns


def nstep_returns(
    reward: torch.Tensor, terminated: torch.Tensor, truncated: torch.Tensor, gamma: float, n: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Ape-X's n-step returns of every start ``t`` whose window fits in the ``T`` steps given.

    ``G_t = sum_{k=0}^{m-1} gamma^k r_{t+k}`` with ``m = min(n, steps to the episode's end)``; the
    target built on it is ``G_t + gamma^m (1 - terminated_{t+m-1}) Q(s_{t+m}, .)``: a truncated
    episode still bootstraps from its true final observation ``s_{t+m}``, only a termination stops it.

    Args:
        reward, terminated, truncated: ``[B, T]`` per-step outcomes of ``B`` envs (bools for the ends).
        gamma: discount; n: steps per return (``1 <= n <= T``).

    Returns:
        ``(G [B, T'], discount [B, T'], last [B, T'])`` with ``T' = T - n + 1``: the return
        ``G_t``, the bootstrap factor ``gamma^m (1 - terminated_{t+m-1})`` and the step
        ``t + m - 1`` whose next observation ``s_{t+m}`` the target bootstraps from (int64).
    """
    B, T = reward.shape
    if not 1 <= n <= T:
        raise ValueError(f"n={n} must be in [1, T={T}]")
    Tp = T - n + 1
    ret = torch.zeros(B, Tp, dtype=reward.dtype, device=reward.device)
    scale = torch.ones_like(ret)  # gamma^k, frozen at gamma^m once the episode has ended
    last = torch.arange(Tp, device=reward.device).expand(B, Tp).clone()
    ended = torch.zeros(B, Tp, dtype=torch.bool, device=reward.device)
    term_at_end = torch.zeros_like(ended)
    for k in range(n):
        running = ~ended
        ret += torch.where(running, scale * reward[:, k : k + Tp], 0.0)
        last = torch.where(running, torch.arange(k, k + Tp, device=reward.device).expand(B, Tp), last)
        term_at_end = torch.where(running, terminated[:, k : k + Tp], term_at_end)
        ended = ended | terminated[:, k : k + Tp] | truncated[:, k : k + Tp]
        scale = torch.where(running, scale * gamma, scale)
    discount = scale * (~term_at_end).to(reward.dtype)
    return ret, discount, last


def next_values(
    value_fn: Callable[[torch.Tensor], torch.Tensor],
    value: torch.Tensor,
    next_obs: torch.Tensor,
    done: torch.Tensor,
    obs: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    """``V(x_{s+1})`` ``[B, T, 1]`` of ``next_obs [B, T, *F]``, reusing ``value = V(x_s)`` ``[B, T, 1]``.

    Inside an unroll a step's next observation *is* the following step's observation (an actor
    writes both from one env output) except where an episode ended, so the critic only runs on the
    last column and the ended steps (the true final observation, not the reset one): on CartPole's
    ``T = 32`` about 1/30 of the rows, over a conv torso most of a forward saved per update.

    Args:
        value_fn: the critic, ``[N, *F] -> [N, 1]`` (and ``[B, T, *F] -> [B, T, 1]``).
        done: ``[B, T, 1]`` bool, any episode end.
        obs: ``x_s`` ``[B, T, *F]``: given, the layout is checked first and every next observation
            evaluated when it does not hold (a batch from a user's sampler); omitted, the caller
            vouches for it (sf's slots are whole unrolls by construction, and the check would cost
            a compare of the whole observation tensor per update).
    """
    fresh = done.squeeze(-1).clone()  # [B, T]: steps whose next observation is not the next step's
    fresh[:, -1] = True
    if obs is not None:
        inner = ~fresh[:, :-1]
        if not torch.equal(next_obs[:, :-1][inner], obs[:, 1:][inner]):
            return value_fn(next_obs)
    out = torch.cat([value[:, 1:], value[:, -1:]], dim=1).detach()
    out[fresh] = value_fn(next_obs[fresh]).to(out.dtype)
    return out
