"""Sharding as data (scalelib.parallel.specs): the rule semantics, and golden snapshots of every
registered scheme's spec trees for the small models of tests/test_parallel_schemes.py.

A snapshot changes only when a scheme's rules do: regenerate tests/data/parallel_specs.json with
``python -m tests.test_parallel_specs`` and review the diff (it is the layout of every weight).
"""

import json
import pathlib
import re

import pytest
from jax.sharding import PartitionSpec as P

from scalelib import model
from scalelib import param_axes as pa
from scalelib.parallel import registry, specs
from scalelib.parallel.cases import CASES

SNAPSHOT = pathlib.Path(__file__).parent / "data" / "parallel_specs.json"


def snapshot() -> dict:
    """Per case: the weights', Adam moments' and tokens' PartitionSpecs, as plain lists."""
    out = {}
    for case in CASES:
        shapes, mesh = model.param_shapes(case.cfg), dict(zip(case.scheme.mesh_axes, case.shape))
        out[case.id] = {"scheme": repr(case.scheme), "mesh": mesh,
                        "params": specs.as_json(case.scheme.param_specs(shapes, mesh)),
                        "optimizer": specs.as_json(case.scheme.optimizer_specs(shapes, mesh)),
                        "tokens": specs.as_json(case.scheme.token_spec(mesh))}
    return out


def test_spec_trees_match_the_golden_snapshot():
    assert snapshot() == json.loads(SNAPSHOT.read_text())
    assert {v["scheme"].split("(")[0] for v in json.loads(SNAPSHOT.read_text()).values()} == \
        {cls.__name__ for cls in registry.SCHEMES.values()}


def test_rules_apply_in_order_once_per_dimension_and_mesh_axis():
    rules = specs.fsdp_rules("x")
    w_up = pa.axes_of("w_up")  # [L, D, F]
    assert specs.spec_of(w_up, (2, 64, 128), rules, {"x": 8}) == P(None, None, "x")  # F before D
    assert specs.spec_of(w_up, (2, 64, 12), rules, {"x": 8}) == P(None, "x")  # F does not divide: D
    assert specs.spec_of(w_up, (2, 6, 12), rules, {"x": 8}) == P()  # nothing divides: replicated
    assert specs.spec_of(pa.axes_of("embed"), (256, 64), rules, {"x": 8}) == P("x")  # V first
    both = specs.tensor_rules("y") + rules
    assert specs.spec_of(pa.axes_of("wq"), (2, 64, 4, 16), both, {"x": 2, "y": 4}) == P(None, "x", "y")
    assert specs.spec_of(w_up, (2, 64, 128), (("d_ff", ("x", "y")),), {"x": 2, "y": 4}) == P(None, None, ("x", "y"))


def test_spec_helpers():
    spec = P(None, ("x", "y"), "z")
    assert specs.mesh_axes_of(spec) == ("x", "y", "z") and specs.dim_of(spec, "y") == 1
    assert specs.dim_of(spec, "w") is None and specs.shards(spec, {"x": 2, "y": 3, "z": 4}) == 24


def test_rules_naming_missing_mesh_axes_say_so():
    with pytest.raises(ValueError, match="mesh axes \\['model'\\]"):
        specs.param_specs(model.param_shapes(CASES[0].cfg), specs.tensor_rules("model"), {"data": 8})


if __name__ == "__main__":
    from scalelib import devices

    devices.setup(8)
    text = json.dumps(snapshot(), indent=1, sort_keys=True)
    text = re.sub(r"\[\s+([^\[\]{}]*?)\s+\]", lambda m: "[" + ", ".join(x.strip() for x in m.group(1).split(",")) + "]", text)
    SNAPSHOT.write_text(text + "\n")  # one line per spec
    print(f"wrote {SNAPSHOT}")
