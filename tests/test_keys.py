"""The keys each loss reads are exactly what the actors produce (style rule 3)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch

from distrl.recipes import get_recipe
from distrl.runtime.context import RoleContext
from distrl.config import override
from distrl.data import keys
from distrl.recipes.impala.actor import ImpalaActor
from distrl.transport.local import LocalHub


@pytest.mark.parametrize("env", ["CartPole-v1", "distrl.envs.torchrl_factories:cartpole_with_stepcounter"])
def test_impala_actor_message_carries_the_learner_keys(tmp_path: Path, env: str):
    """The gymnasium path and the TorchRL Collector path (a factory env, docs/torchrl.md door 1) alike."""
    cfg = override(
        get_recipe("impala").default_config(), **{"run.env": env, "algo.envs_per_actor": 3, "algo.unroll_length": 5}
    )
    hub = LocalHub(2)
    actor = ImpalaActor(RoleContext(cfg, hub.endpoint(1), 1, {0: "learner", 1: "actor"}, tmp_path))
    msg = actor._unroll()
    traj = msg["traj"]
    assert tuple(traj.batch_size) == (3, 5)  # [B, T], batch-major
    produced = set(traj.keys(include_nested=True, leaves_only=True))
    assert set(keys.IMPALA_IN_KEYS) <= produced
    assert traj[keys.OBSERVATION].shape == (3, 5, 4) and traj[keys.OBSERVATION].dtype == torch.float32
    assert traj[keys.ACTION].dtype == torch.int64
    assert traj[keys.REWARD].shape == traj[keys.DONE].shape == (3, 5, 1)
    assert (traj[keys.POLICY_VERSION] == -1).all()  # no parameters received yet
    # consecutive steps chain: next observation of t is the observation of t+1 unless the episode ended
    not_done = ~traj[keys.DONE][:, :-1, 0]
    torch.testing.assert_close(traj[keys.NEXT_OBSERVATION][:, :-1][not_done], traj[keys.OBSERVATION][:, 1:][not_done])
    actor.runner.close()


# ---- every TensorDict key written through data/keys.py ------------------------------------------

_DISTRL = Path(keys.__file__).resolve().parent.parent
#: the value of every string constant of data/keys.py -> its name
_KEY_VALUES = {v: name for name, v in vars(keys).items() if name.isupper() and isinstance(v, str)}
#: (file, the indexed or called expression) -> why its string literals are not TensorDict keys
#: although one equals a key's value. Plain dicts only; a TensorDict never belongs here.
_PLAIN_DICTS = {
    ("recipes/apex/actor.py", "self.stats"): "a plain dict of the actor's counts not yet sent",
    ("recipes/apex/actor.py", "s"): "the same plain dict, swapped out to be sent",
    ("recipes/apex/learner.py", "p"): "a plain dict of the actors' counts not yet folded into the tracker",
    ("recipes/apex/learner.py", "tracker.counters"): "RunTracker's counters (summary.json), a plain dict",
    (
        "recipes/impala/learner.py",
        "self.session.tracker.counters",
    ): "RunTracker's counters (summary.json), a plain dict",
    ("studies/sweep.py", "r"): "one seed's row of a sweep (plain dict read from summary.json)",
    ("studies/sweep.py", "agg"): "a sweep's aggregate (plain dict written to JSON)",
}
#: (file, literal) -> why that literal, anywhere in that file, is not a TensorDict data key
_ALLOWED_LITERALS = {
    ("roles/collector_runner.py", "version"): "ActPolicy's buffer name: the weights TensorDict mirrors "
    "the module's attribute tree (update_policy_weights_)"
}


def _literals(node: ast.AST):
    """The string constants of ``node``: itself, or the elements of a tuple or list (nested)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        yield node
    elif isinstance(node, (ast.Tuple, ast.List)):
        for elt in node.elts:
            yield from _literals(elt)


def _key_uses(tree: ast.AST, rel: str):
    """``(line, literal)`` of each string literal used as a TensorDict key in ``tree``: a subscript
    index, an ``in_keys``/``out_keys`` element, the first argument of ``.get``/``.set``, an element of
    a ``("next", ...)`` tuple, a dict key given to ``TensorDict(...)``, or the left of ``in x.keys()``."""

    def plain(receiver: ast.AST) -> bool:
        return (rel, ast.unparse(receiver)) in _PLAIN_DICTS

    for node in ast.walk(tree):
        found: list[ast.AST] = []
        if isinstance(node, ast.Subscript) and not plain(node.value):
            found += _literals(node.slice)
        elif isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Attribute) and func.attr in ("get", "set") and node.args and not plain(func.value):
                found += _literals(node.args[0])
            found += [lit for kw in node.keywords if kw.arg in ("in_keys", "out_keys") for lit in _literals(kw.value)]
            if (
                isinstance(func, ast.Name)
                and func.id == "TensorDict"
                and node.args
                and isinstance(node.args[0], ast.Dict)
            ):
                stack = [node.args[0]]
                while stack:  # nested plain dicts become nested TensorDicts
                    d = stack.pop()
                    found += [k for k in d.keys if k is not None and isinstance(k, ast.Constant)]
                    stack += [v for v in d.values if isinstance(v, ast.Dict)]
        elif (
            isinstance(node, ast.Tuple)
            and node.elts
            and isinstance(node.elts[0], ast.Constant)
            and node.elts[0].value == keys.NEXT
        ):
            found += _literals(node)
        elif isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], (ast.In, ast.NotIn)):
            right = node.comparators[0]
            if isinstance(right, ast.Call) and isinstance(right.func, ast.Attribute) and right.func.attr == "keys":
                found += _literals(node.left)
        for lit in found:
            if isinstance(lit, ast.Constant) and lit.value in _KEY_VALUES and (rel, lit.value) not in _ALLOWED_LITERALS:
                yield lit.lineno, lit.value


def key_literals() -> list[str]:
    """``file:line: "literal" (keys.NAME)`` for each TensorDict key written as a literal under distrl/."""
    out = []
    for path in sorted(_DISTRL.rglob("*.py")):
        rel = path.relative_to(_DISTRL).as_posix()
        if rel == "data/keys.py":
            continue
        for line, value in sorted(set(_key_uses(ast.parse(path.read_text(), str(path)), rel))):
            out.append(f"distrl/{rel}:{line}: {value!r} (keys.{_KEY_VALUES[value]})")
    return out


def test_tensordict_keys_come_from_data_keys():
    """A TensorDict key is written as a keys.py constant, never as its literal (style rule 3)."""
    found = key_literals()
    assert not found, "TensorDict keys written as literals; use distrl.data.keys:\n" + "\n".join(found)


def test_the_key_scan_sees_each_kind_of_use():
    """The scan above finds each form it claims to, and leaves a plain value alone."""
    src = """
td["reward"]; td["next", "done"]; td.get("observation"); td.set("action", x)
M(in_keys=["observation"], out_keys=[("next", "reward")]); TensorDict({"stop": x, "next": {"terminated": y}})
if "params" in reply.keys(): pass
if cfg.recipe == "action": pass
log({"reward": 1.0}); f("observation"); TensorDict(stop=x)
"""
    got = sorted(value for _, value in _key_uses(ast.parse(src), "x.py"))
    assert got == sorted(
        [
            "reward",
            "next",
            "done",
            "observation",
            "action",
            "observation",
            "next",
            "reward",
            "stop",
            "next",
            "terminated",
            "params",
            "next",
            "done",
            "next",
            "reward",
        ]
    )


def test_keys_module_imports_nothing_from_distrl():
    """data/keys.py is the bottom of the import graph: any module may import it."""
    tree = ast.parse(Path(keys.__file__).read_text())
    imported = [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    imported += [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    assert not [m for m in imported if m.split(".")[0] == "distrl"]


if __name__ == "__main__":
    print("\n".join(key_literals()) or "no TensorDict key written as a literal")
