"""Slow references in the papers' notation, shared by the tests that check the fast math against
them (a test file never imports another test file)."""
from __future__ import annotations


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
