"""Custom recipes by path (``path/to/file.py:NAME``) and the one shipped, experiments/examples/custom/seed_apex.py:
loading (and each bad spec in one line), the spec's round trip through a saved config, role files
named by path, seed_apex's pieces against slow loops, and seed_apex end to end at world size 1."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

from distrl.algorithms.apex import epsilon_ladder
from distrl.config import Config, from_dict
from distrl.data import keys
from distrl.recipes import RECIPE_NAMES, Recipe, get_recipe, recipe_module, recipe_spec
from distrl.data.transitions import unpack_transitions
from distrl.recipes.base import RoleContext, role
from distrl.recipes.files import load_file, module_name
from distrl.roles.epsilon_greedy import EpsilonGreedyHead, env_ladder
from distrl.roles.nstep import NStepTrajectories, ended_envs, nstep_insert

ROOT = Path(__file__).resolve().parent.parent
SPEC = "experiments/examples/custom/seed_apex.py:recipe"
ABS_SPEC = f"{ROOT / 'experiments/examples/custom/seed_apex.py'}:recipe"


@pytest.fixture
def at_root(monkeypatch):
    monkeypatch.chdir(ROOT)  # the spec is relative, as a user in a checkout types it


# ---------------------------------------------------------------- loading by path


def test_a_recipe_loads_by_path(at_root):
    recipe = get_recipe(SPEC)
    assert isinstance(recipe, Recipe) and recipe.name == "seed_apex"
    assert get_recipe(ABS_SPEC) is recipe  # one file, one module, whatever the spelling
    module = recipe_module(SPEC)
    assert sys.modules[module.__name__] is module and module.__name__ == module_name(ROOT / SPEC.split(":")[0])
    assert recipe_spec(SPEC) == recipe_spec(ABS_SPEC) == ABS_SPEC
    assert recipe_spec("seed") == "seed" and get_recipe("seed").name == "seed"
    cfg = module.debug()
    assert cfg.recipe == ABS_SPEC and get_recipe(cfg.recipe) is recipe
    assert recipe.rank_table(4, module.default()) == {0: "learner", 1: "replay", 2: "env_worker", 3: "env_worker"}
    assert recipe.rank_table(1, cfg) == {0: "learner", 1: "replay", 2: "env_worker", 3: "env_worker"}


@pytest.mark.parametrize(
    "spec, says",
    [
        ("no_such_recipe", "unknown recipe 'no_such_recipe'"),
        ("experiments/examples/custom/missing.py:recipe", "no such file"),
        ("experiments/examples/custom/seed_apex.txt:recipe", "must be a .py file"),
        ("experiments/examples/custom/seed_apex.py", "name the object in the file"),
        ("experiments/examples/custom/seed_apex.py:", "name the object in the file"),
        ("experiments/examples/custom/seed_apex.py:nothing", "defines no 'nothing'"),
        ("experiments/examples/custom/seed_apex.py:SeedApexConfig", "not a distrl.recipes.Recipe"),
        ("experiments/examples/custom/seed_apex.py:SPEC", "is a str, not a distrl.recipes.Recipe"),
    ],
)
def test_a_bad_spec_is_one_line(at_root, spec, says):
    with pytest.raises(ValueError) as e:
        get_recipe(spec)
    assert says in str(e.value) and "\n" not in str(e.value), str(e.value)
    if not spec.startswith("no_such"):
        with pytest.raises(ValueError):
            recipe_module(spec)


def test_a_file_recipe_picks_its_preset_for_an_env_as_a_registered_one_does(at_root):
    from distrl.cli.options import default_experiment

    assert default_experiment(SPEC, "MinAtar/Breakout-v1") == "minatar"
    assert default_experiment(SPEC, "CartPole-v1") == "default"
    cfg = recipe_module(SPEC).minatar()
    assert cfg.run.env == "MinAtar/Breakout-v1" and cfg.recipe == ABS_SPEC
    get_recipe(SPEC).check_config(cfg)  # a discrete-action image env: the recipe takes it


def test_registered_names_resolve_as_before():
    assert "seed" in RECIPE_NAMES and "apex" in RECIPE_NAMES
    for name in RECIPE_NAMES:
        assert get_recipe(name).name == name and recipe_spec(name) == name


def test_the_spec_round_trips_through_a_saved_config(at_root):
    """What --resume and every torchrun rank do: read config.json, load the recipe it names, rebuild
    the algo section with that recipe's dataclass."""
    cfg = recipe_module(SPEC).default()
    data = json.loads(cfg.to_json())
    recipe = get_recipe(data["recipe"])
    algo = from_dict(type(recipe.default_config().algo), data["algo"])
    assert from_dict(Config, {**data, "algo": algo}) == cfg


def test_roles_and_recipes_in_files_of_their_own(tmp_path):
    """A file's roles named by path; a file that defines its role classes itself, pointing ``role()``
    at its own ``__name__``; each file loaded once per process under a name of its own path."""
    (tmp_path / "roles.py").write_text("class Hello:\n    def __init__(self, ctx):\n        self.rank = ctx.rank\n")
    (tmp_path / "mine.py").write_text(
        "from distrl.recipes import Recipe\nfrom distrl.recipes.base import role\n"
        "class Own:\n    def __init__(self, ctx):\n        self.ctx = ctx\n"
        "mine = Recipe(name='mine', description='d', layout='l', min_world_size=2, roles_for=lambda n: ['a'] * n,\n"
        "              builders={'a': role(__name__ + ':Own'), "
        f"'b': role({str(tmp_path / 'roles.py')!r} + ':Hello')}},\n"
        "              default_config=None, local_world_size=lambda cfg: 2)\n"
    )
    recipe = get_recipe(f"{tmp_path / 'mine.py'}:mine")
    ctx = RoleContext(None, None, 3, {3: "a"}, tmp_path)
    assert type(recipe.builders["a"](ctx)).__name__ == "Own" and recipe.builders["b"](ctx).rank == 3
    assert load_file(tmp_path / "roles.py") is load_file(tmp_path / "." / "roles.py")
    with pytest.raises(ImportError, match="no such role file"):
        role(f"{tmp_path / 'gone.py'}:X")(ctx)


def test_a_file_that_fails_to_run_is_not_half_registered(tmp_path):
    (tmp_path / "broken.py").write_text("raise RuntimeError('boom')\n")
    for _ in range(2):  # the second load runs it again (and fails again), not a cached half module
        with pytest.raises(RuntimeError, match="boom"):
            get_recipe(f"{tmp_path / 'broken.py'}:recipe")
    assert module_name(tmp_path / "broken.py") not in sys.modules


# ---------------------------------------------------------------- epsilon-greedy acting


def test_the_ladder_spans_every_env_and_every_group_spans_the_ladder():
    groups = [(2, 0), (2, 1), (3, 0), (3, 1)]
    table = env_ladder(groups, 8, 0.4, 7.0)
    rungs = torch.cat([table[g] for g in groups]).sort(descending=True).values
    assert torch.allclose(rungs, torch.tensor(epsilon_ladder(32, 0.4, 7.0)))
    for g in groups:  # each group holds every 4th rung: one in the top 4 and one in the bottom 4
        assert table[g].max() >= rungs[3] and table[g].min() <= rungs[-4]


def test_epsilon_greedy_actions_and_their_log_probabilities():
    head, A, N = EpsilonGreedyHead(3), 3, 20_000
    q = torch.tensor([[0.0, 1.0, 0.5]]).expand(N, A)
    head.epsilon = torch.cat([torch.zeros(N // 2), torch.full((N // 2,), 0.6)])
    action, log_prob = head.sample(q, torch.Generator().manual_seed(0))
    assert (action[: N // 2] == 1).all() and (log_prob[: N // 2] == 0).all()  # eps 0: greedy, probability 1
    share = (action[N // 2 :] == 1).float().mean()
    assert abs(share - (1 - 0.6 + 0.6 / 3)) < 0.02  # greedy with 1 - eps + eps / A
    expect = torch.where(action[N // 2 :] == 1, torch.tensor(0.6), torch.tensor(0.2)).log()
    assert torch.allclose(log_prob[N // 2 :], expect)
    assert (head.greedy(q) == 1).all()


# ---------------------------------------------------------------- n-step windows against a slow loop


def _play(B=2, T=4, n=3, chunks=4, gamma=0.9):
    """Steps of B scripted envs through NStepTrajectories as a server drives it; returns the windows,
    their episode returns and every step as a slow loop sees it."""
    g = NStepTrajectories(B, 2, T, n_step=n, epsilon=torch.tensor([0.5, 0.01]))
    # env 0 terminates at steps 2 and 9, env 1 is truncated at step 6 (per-env step counters)
    ends = {(0, 2): "term", (0, 9): "term", (1, 6): "trunc"}
    count = [0] * B
    obs = torch.tensor([[b, 0.0] for b in range(B)])
    out, steps = [], []
    g.observe(7, obs, torch.zeros(B), torch.zeros(B, dtype=torch.bool), torch.zeros(B, dtype=torch.bool), obs[:0])
    for t in range(chunks * T):
        action = torch.tensor([(t + b) % 2 for b in range(B)])
        g.act(obs.clone(), action, torch.zeros(B), version=t)
        reward = torch.tensor([1.0 + b + t for b in range(B)])
        term, trunc = torch.zeros(B, dtype=torch.bool), torch.zeros(B, dtype=torch.bool)
        nxt, final = obs.clone(), []
        for b in range(B):
            count[b] += 1
            nxt[b, 1] = 100 * t + b + 1  # every observation distinct
            kind = ends.get((b, t))
            if kind:
                (term if kind == "term" else trunc)[b] = True
                final.append(nxt[b].clone())
                nxt[b, 1] = -(100 * t + b + 1)  # the reset observation
        steps.append(
            [
                (
                    obs[b].clone(),
                    int(action[b]),
                    float(reward[b]),
                    bool(term[b]),
                    bool(trunc[b]),
                    final.pop(0) if (term[b] or trunc[b]) else nxt[b].clone(),
                )
                for b in range(B)
            ]
        )
        final_obs = torch.stack([s[5] for s in steps[-1] if s[3] or s[4]]) if (term | trunc).any() else obs[:0]
        cut = g.observe(7, nxt, reward, term, trunc, final_obs)
        if cut is not None:
            out.append(cut)
        obs = nxt
    return out, steps, gamma, n


def test_windows_give_every_step_its_n_step_transition():
    windows, steps, gamma, n = _play()
    B, total = 2, len(steps)
    got = {b: [] for b in range(B)}
    for chunk, _ in windows:
        q = lambda o: torch.zeros(o.shape[0], 2)  # noqa: E731
        tr, priority = unpack_transitions(nstep_insert(chunk[keys.TRAJ], q, gamma, n))
        tr = tr.reshape(B, -1)
        for b in range(B):
            got[b] += [tr[b, i] for i in range(tr.shape[1])]
    for b in range(B):
        assert len(got[b]) == total - n + 1  # every start whose window fits, none twice
        for t, item in enumerate(got[b]):  # the slow loop, in the paper's notation
            G, disc, m = 0.0, 1.0, 0
            for k in range(n):
                obs, a, r, term, trunc, nxt = steps[t + k][b]
                G, m = G + disc * r, k + 1
                disc *= gamma
                if term or trunc:
                    break
            last = steps[t + m - 1][b]
            disc = 0.0 if last[3] else disc
            assert torch.equal(item[keys.OBSERVATION], steps[t][b][0]) and int(item[keys.ACTION]) == steps[t][b][1]
            assert (
                abs(float(item[keys.NSTEP_RETURN]) - G) < 1e-4
                and abs(float(item[keys.BOOTSTRAP_DISCOUNT]) - disc) < 1e-6
            )
            if disc:
                assert torch.equal(item[keys.NEXT_OBSERVATION], last[5]), (b, t)


def test_windows_carry_their_episode_returns_and_epsilons():
    windows, steps, _, _ = _play()
    T = 4
    for i, (chunk, returns) in enumerate(windows):
        window = chunk[keys.TRAJ]
        assert window.shape[1] == (T if i == 0 else T + 2)  # the first of a run has no carry
        envs = ended_envs(window, T)
        assert len(envs) == len(returns)
        assert torch.equal(chunk[keys.EPSILON], torch.tensor([0.5, 0.01]))
    ended = [e for chunk, _ in windows for e in ended_envs(chunk[keys.TRAJ], T).tolist()]
    assert ended == [0, 1, 0]  # env 0 at step 2, env 1 at 6, env 0 at 9


def test_a_restarted_worker_drops_the_carry():
    g = NStepTrajectories(1, 2, 4, n_step=3, epsilon=torch.tensor([0.1]))
    g.carry = "stale"
    g.reset(run_id=8)
    assert g.carry is None


# ---------------------------------------------------------------- end to end


@pytest.mark.timeout(180)
def test_seed_apex_learns_the_toy_env_in_one_process(at_root, tmp_path, in_process):
    """World size 1: learner + inference, one shard and two env workers as threads; then --resume
    from its run directory, which reloads the recipe from the spec config.json holds."""
    run = tmp_path / "run"
    assert in_process([SPEC, "--experiment", "debug", "--run-dir", str(run)]) == 0
    s = json.loads((run / "summary.json").read_text())
    assert s["recipe"] == ABS_SPEC and s["stop_reason"] == "total_frames"
    assert s["roles"] == {"0": "learner", "1": "replay", "2": "env_worker", "3": "env_worker"}
    assert s["eval_return_mean"] >= 19.0, s  # uniform play scores 10, perfect 20
    assert s["inference_batches"] > 0 and s["inference_batch_fill_mean"] >= 1.0 and s["replay_sampled"] > 0
    # obs (4 B) + reward, flags in, an int32 action out; inserts of about one observation per step
    assert 14 <= s["inference_bytes_per_env_step"] < 40 and 0 < s["insert_bytes_per_env_step"] < 60, s
    assert json.loads((run / "config.json").read_text())["recipe"] == ABS_SPEC
    assert in_process([SPEC, "--resume", "--run-dir", str(run), "--total-frames", "16000"]) == 0
    s = json.loads((run / "summary.json").read_text())
    assert s["stop_reason"] == "total_frames" and s["env_frames"] >= 16_000


@pytest.mark.long  # the long tier (DISTRL_LOAD=1): 10 s or more, a quicker test of its path in the suite
@pytest.mark.timeout(240)
def test_torchrun_ranks_load_the_recipe_by_path(tmp_path, jobs):
    """3 processes (the recipe's least): every rank loads the file from the spec on its command line,
    the env worker and the shard run distrl's own roles, rank 0 the file's learner; nothing is left
    behind."""
    run = tmp_path / "run"
    proc = jobs.train([SPEC, "--experiment", "debug", "--run-dir", str(run)], nproc=3, timeout=180)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    s = json.loads((run / "summary.json").read_text())
    assert s["world_size"] == 3 and s["roles"] == {"0": "learner", "1": "replay", "2": "env_worker"}
    assert s["stop_reason"] == "total_frames" and s["eval_return_mean"] >= 19.0, s
