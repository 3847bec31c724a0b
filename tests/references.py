"""Slow references in the papers' notation, shared by the tests that check the fast math against
them (a test file never imports another test file)."""

from __future__ import annotations

import math

import torch

from distrl.data import keys


def slow_vtrace_targets(gamma, ratio, V, V_next, r, done, term, rho_bar, c_bar):
    """V-trace targets of one env's ``[T]`` lists by Espeholt et al. (2018), eq. (1):
    ``v_s = V(x_s) + sum_{t>=s} gamma^{t-s} (prod_{i=s}^{t-1} c_i) rho_t (r_t + gamma V(x_{t+1}) - V(x_t))``,
    ``rho_t = min(rho_bar, pi/mu)``, ``c_i = min(c_bar, pi/mu)``; an episode end at ``t`` stops the
    sum after ``t``, a termination also drops ``gamma V(x_{t+1})``."""
    T = len(r)
    rho = [min(rho_bar, x) for x in ratio]
    c = [min(c_bar, x) for x in ratio]
    delta = [rho[t] * (r[t] + gamma * (0.0 if term[t] else V_next[t]) - V[t]) for t in range(T)]
    v = []
    for s in range(T):
        total, trace = 0.0, 1.0
        for t in range(s, T):
            total += gamma ** (t - s) * trace * delta[t]
            if done[t]:
                break
            trace *= c[t]
        v.append(V[s] + total)
    return v


# ---- per-sample policy terms, from the densities' formulas -----------------------------------------

LOG_2PI = math.log(2 * math.pi)


def slow_gaussian_log_prob(mean, log_std, action):
    """``log pi(a|s)`` of one sample under a diagonal Gaussian, from the density, dimension by dimension:
    ``sum_j [-(a_j - mu_j)^2 / (2 sigma_j^2) - log sigma_j - log(2 pi) / 2]``, ``sigma_j = exp(log_std_j)``.
    ``mean``, ``log_std``: ``[A]`` tensors (their graph is kept); ``action``: ``[A]``."""
    total = 0.0
    for j in range(len(action)):
        sigma = torch.exp(log_std[j])
        total = total - (float(action[j]) - mean[j]) ** 2 / (2 * sigma**2) - log_std[j] - LOG_2PI / 2
    return total


def slow_gaussian_entropy(log_std):
    """``H = sum_j (1/2) log(2 pi e sigma_j^2)`` of one sample's ``[A]`` log-stds."""
    total = 0.0
    for j in range(len(log_std)):
        total = total + 0.5 * (LOG_2PI + 1.0 + 2 * log_std[j])
    return total


def slow_categorical_log_prob_entropy(logits, action: int):
    """``(log pi(a|s), H)`` of one sample's ``[K]`` logits ``z``: ``pi_k = exp(z_k) / sum_l exp(z_l)``,
    ``log pi(a|s) = z_a - log sum_l exp(z_l)``, ``H = -sum_k pi_k log pi_k``."""
    log_z = torch.log(sum(torch.exp(logits[k]) for k in range(len(logits))))
    log_pi = [logits[k] - log_z for k in range(len(logits))]
    return log_pi[int(action)], -sum(torch.exp(lp) * lp for lp in log_pi)


def slow_log_prob_entropy(model, out_row, action):
    """One sample's ``(log pi(a|s), H)`` by the formulas above: ``out_row`` is the policy's output for
    the sample, ``cat(mean, log_std) [2A]`` under a Gaussian head, logits ``[K]`` otherwise."""
    if model.head.continuous:
        A = model.head.action_dim
        mean, log_std = out_row[:A], out_row[A:]
        return slow_gaussian_log_prob(mean, log_std, action), slow_gaussian_entropy(log_std)
    return slow_categorical_log_prob_entropy(out_row, int(action))


# ---- returns and advantages of one env's [T] lists --------------------------------------------------


def slow_n_step_returns(gamma, V_next, r, done, term):
    """A3C's ``R_i`` (Mnih et al., 2016, Algorithm S3) of one env's segment by the backward loop
    ``R <- r_i + gamma R``, with ``R = V(s_t)`` at the segment's end; an episode end at ``i`` restarts
    ``R`` there: ``0`` after a termination, ``V(s'_i)`` after a truncation."""
    T = len(r)
    R, out = None, [0.0] * T
    for i in reversed(range(T)):
        if i == T - 1 or done[i]:
            R = 0.0 if term[i] else V_next[i]
        R = r[i] + gamma * R
        out[i] = R
    return out


def slow_gae(gamma, lam, V, V_next, r, done, term):
    """GAE (Schulman et al., 2016) of one env's ``[T]`` lists: ``A_t = sum_{l>=0} (gamma lambda)^l
    delta_{t+l}``, ``delta_t = r_t + gamma V(x_{t+1}) - V(x_t)`` (no ``V(x_{t+1})`` after a
    termination), the sum stopped after an episode end; the value target is ``A_t + V(x_t)``."""
    T = len(r)
    delta = [r[t] + gamma * (0.0 if term[t] else V_next[t]) - V[t] for t in range(T)]
    adv = []
    for t in range(T):
        total = 0.0
        for k in range(t, T):
            total += (gamma * lam) ** (k - t) * delta[k]
            if done[k]:
                break
        adv.append(total)
    return adv, [adv[t] + V[t] for t in range(T)]


def _standardise(A: list[float]) -> list[float]:
    """``(A - mean) / (std + 1e-8)`` with the sample (n - 1) standard deviation, as ``torch.std``."""
    n = len(A)
    mean = sum(A) / n
    std = math.sqrt(sum((a - mean) ** 2 for a in A) / (n - 1))
    return [(a - mean) / (std + 1e-8) for a in A]


# ---- whole losses, one sample at a time ---------------------------------------------------------------


def _rows(model, batch, b):
    """Env ``b``'s ``[T]`` rows in float64: policy outputs and values (with their graph), values of the
    next observations (without), and the reward, done and terminated lists."""
    out, values = model(batch[keys.OBSERVATION][b].double())
    with torch.no_grad():
        V_next = model.value(batch[keys.NEXT_OBSERVATION][b].double())[:, 0].tolist()
    r = batch[keys.REWARD][b, :, 0].double().tolist()
    return out, values, V_next, r, batch[keys.DONE][b, :, 0].tolist(), batch[keys.TERMINATED][b, :, 0].tolist()


def slow_a3c_loss(model, batch, hp) -> dict:
    """A3C's loss (Mnih et al., 2016, Algorithm S3) of a ``[B, T]`` batch by per-step python sums;
    ``model`` a float64 copy of the policy (its own critic bootstraps). With ``n = B T``,
    ``R_i`` from :func:`slow_n_step_returns` on rewards ``reward_scale * r_i`` and
    ``A_i = R_i - V(s_i)`` held constant (standardised first under ``normalize_advantage``):

        L_pi = -1/n sum A_i log pi(a_i|s_i);   L_v = 1/n sum (R_i - V(s_i))^2 / 2;   H = 1/n sum H(pi(s_i))
        loss = L_pi + value_coef L_v - entropy_coef H

    Returns float64 scalars named as ``a3c_loss``'s; ``loss`` keeps its graph."""
    B, T = batch.batch_size
    log_pi, H, V, R, A = [], [], [], [], []
    for b in range(B):
        out, values, V_next, r, done, term = _rows(model, batch, b)
        returns = slow_n_step_returns(hp.gamma, V_next, [hp.reward_scale * x for x in r], done, term)
        for i in range(T):
            lp, h = slow_log_prob_entropy(model, out[i], batch[keys.ACTION][b, i])
            log_pi.append(lp)
            H.append(h)
            V.append(values[i, 0])
            R.append(returns[i])
            A.append(returns[i] - values[i, 0].item())
    n = len(A)
    advantage_mean = sum(A) / n
    if hp.normalize_advantage:
        A = _standardise(A)
    loss_policy = -sum(A[i] * log_pi[i] for i in range(n)) / n
    loss_value = sum((R[i] - V[i]) ** 2 for i in range(n)) / (2 * n)
    entropy = sum(H) / n
    return {
        "loss": loss_policy + hp.value_coef * loss_value - hp.entropy_coef * entropy,
        "loss_policy": loss_policy,
        "loss_value": loss_value,
        "entropy": entropy,
        "advantage_mean": torch.tensor(advantage_mean, dtype=torch.float64),
    }


def slow_appo_loss(model, batch, algo) -> dict:
    """APPO's loss (Sample Factory's learner: PPO's clipped objective, Schulman et al., 2017, eq. 7,
    on V-trace or GAE targets) of a ``[B, T]`` batch by per-sample python sums; ``model`` a float64
    copy of the policy. Targets ``v_s`` and advantages ``A_s``, held constant, on rewards
    ``reward_scale * r_s``: V-trace's ``v_s`` (:func:`slow_vtrace_targets`) with
    ``A_s = r_s + gamma v'_{s+1} - V(x_s)``, ``v'_{s+1} = v_{s+1}`` inside the episode and the unroll,
    else ``V(x_{s+1})`` (nothing after a termination); or :func:`slow_gae`. With
    ``rho_s = pi(a_s|x_s) / mu(a_s|x_s)``:

        L_clip = -1/n sum min(rho_s A_s, clip(rho_s, 1 - eps, 1 + eps) A_s)
        L_v    =  1/n sum (V(x_s) - v_s)^2 / 2;   H = 1/n sum H(pi(x_s))
        loss   = L_clip + value_coef L_v - entropy_coef H
        approx_kl = 1/n sum ((rho_s - 1) - log rho_s);  clip_fraction = 1/n #{|rho_s - 1| > eps}

    Returns float64 scalars named as ``appo_loss``'s (``loss`` keeps its graph), and ``ratios``, the
    list of every ``rho_s``."""
    B, T = batch.batch_size
    log_pi, log_mu, rho, V, H, A, targets = [], [], [], [], [], [], []
    for b in range(B):
        out, values, V_next, r, done, term = _rows(model, batch, b)
        r = [algo.reward_scale * x for x in r]
        lp_h = [slow_log_prob_entropy(model, out[t], batch[keys.ACTION][b, t]) for t in range(T)]
        mu = batch[keys.ACTION_LOG_PROB][b].double().tolist()
        rho_b = [math.exp(lp_h[t][0].item() - mu[t]) for t in range(T)]
        Vb = values[:, 0].tolist()
        if algo.vtrace:
            v = slow_vtrace_targets(algo.gamma, rho_b, Vb, V_next, r, done, term, algo.rho_bar, algo.c_bar)
            for s in range(T):
                v_next = V_next[s] if (done[s] or s == T - 1) else v[s + 1]
                A.append(r[s] + algo.gamma * (0.0 if term[s] else v_next) - Vb[s])
            targets += v
        else:
            adv, target = slow_gae(algo.gamma, algo.gae_lambda, Vb, V_next, r, done, term)
            A += adv
            targets += target
        log_pi += [lp for lp, _ in lp_h]
        H += [h for _, h in lp_h]
        log_mu += mu
        rho += rho_b
        V += [values[t, 0] for t in range(T)]
    n, eps = len(A), algo.clip_eps
    mean_A = sum(A) / n
    std_A = math.sqrt(sum((a - mean_A) ** 2 for a in A) / (n - 1))
    if algo.normalize_advantage:
        A = _standardise(A)
    L_clip = 0.0
    for s in range(n):
        rho_s = torch.exp(log_pi[s] - log_mu[s])  # with its graph through log pi
        clipped = torch.clamp(rho_s, 1 - eps, 1 + eps)
        L_clip = L_clip - torch.minimum(rho_s * A[s], clipped * A[s]) / n
    L_v = sum((V[s] - targets[s]) ** 2 / 2 for s in range(n)) / n
    H_mean = sum(H) / n
    f64 = lambda x: torch.tensor(x, dtype=torch.float64)  # noqa: E731
    return {
        "loss": L_clip + algo.value_coef * L_v - algo.entropy_coef * H_mean,
        "loss_policy": L_clip,
        "loss_value": L_v,
        "entropy": H_mean,
        "approx_kl": f64(sum((x - 1) - math.log(x) for x in rho) / n),
        "clip_fraction": f64(sum(abs(x - 1) > eps for x in rho) / n),
        "advantage_std": f64(std_A),
        "value_mean": f64(sum(x.item() for x in V) / n),
        "ratios": rho,
    }


# ---- SAC (Haarnoja et al., 2018, "Soft Actor-Critic Algorithms and Applications") ------------------


def slow_squashed_log_prob(mean, log_std, u, low, high):
    """``log pi(a|s)`` of ``a_j = (high_j + low_j) / 2 + (high_j - low_j) / 2 tanh(u_j)``, ``u ~ N(mean, sigma)``,
    dimension by dimension, from the change of variables (appendix C): ``log N(u_j) - log |da_j / du_j|``,
    ``da_j / du_j = (high_j - low_j) / 2 (1 - tanh(u_j)^2)``. All ``[A]``."""
    total = 0.0
    for j in range(len(u)):
        sigma = torch.exp(log_std[j])
        log_normal = -((u[j] - mean[j]) ** 2) / (2 * sigma**2) - log_std[j] - LOG_2PI / 2
        jacobian = (high[j] - low[j]) / 2 * (1 - torch.tanh(u[j]) ** 2)
        total = total + log_normal - torch.log(jacobian)
    return total


def slow_sac_losses(model, target_q, batch, noise_next, noise, target_entropy):
    """SAC's three objectives over a batch, one transition at a time, with the policy's draws given
    as standard-normal ``noise_next [B, A]`` (at ``s'``) and ``noise [B, A]`` (at ``s``):

        y_b     = G_b + d_b (min_i Q'_i(s'_b, a'_b) - alpha log pi(a'_b|s'_b))
        J_Q     = sum_i (1/B) sum_b w_b (Q_i(s_b, a_b) - y_b)^2 / 2
        J_pi    = (1/B) sum_b [alpha log pi(a~_b|s_b) - min_i Q_i(s_b, a~_b)]
        J_alpha = (1/B) sum_b -log alpha (log pi(a~_b|s_b) + H_target)

    ``model`` is a :class:`distrl.nn.sac.SACNetwork` (its towers are evaluated row by row),
    ``target_q`` its target critic. The returned losses keep their graphs: ``J_Q`` to the critics,
    ``J_pi`` to the policy and (through ``Q_i``) the critics, ``J_alpha`` to ``log alpha``."""
    obs, act, G, d, w = (
        batch[k] for k in ("observation", "action", "nstep_return", "bootstrap_discount", "priority_weight")
    )
    next_obs = batch["next", "observation"]
    alpha = float(torch.exp(model.log_alpha.detach()))
    scale, bias = model.action_scale, model.action_bias
    low, high = bias - scale, bias + scale

    def policy(z, eps):
        out = model.actor(z)
        A = out.shape[-1] // 2
        mean, log_std = out[:A], out[A:].clamp(-5.0, 2.0)
        u = mean + torch.exp(log_std) * eps
        a = torch.stack([bias[j] + scale[j] * torch.tanh(u[j]) for j in range(A)])
        return a, slow_squashed_log_prob(mean, log_std, u, low, high)

    def q_min(critic, z, a):
        x = torch.cat([z, a])
        return torch.minimum(critic.q1(x)[0], critic.q2(x)[0]), (critic.q1(x)[0], critic.q2(x)[0])

    B = len(G)
    J_Q = J_pi = J_alpha = 0.0
    y = []
    for b in range(B):
        with torch.no_grad():
            z_next = model.features(next_obs[b])
            a_next, lp_next = policy(z_next, noise_next[b])
            y_b = G[b] + d[b] * (q_min(target_q, z_next, a_next)[0] - alpha * lp_next)
        y.append(float(y_b))
        z = model.features(obs[b])
        _, (q1, q2) = q_min(model.qvalue, z, act[b])
        J_Q = J_Q + w[b] * ((q1 - y_b) ** 2 / 2 + (q2 - y_b) ** 2 / 2) / B
        a_new, lp = policy(z, noise[b])
        J_pi = J_pi + (alpha * lp - q_min(model.qvalue, z, a_new)[0]) / B
        J_alpha = J_alpha - model.log_alpha * (float(lp.detach()) + target_entropy) / B
    return {"loss_qvalue": J_Q, "loss_actor": J_pi, "loss_alpha": J_alpha, "y": y}
