"""tests/conftest.py: how the suite is split between its workers, and the compile flags it runs under."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import (AT_XLA_DEFAULTS, CROSS_PROCESS_XLA_FLAGS, FAST_COMPILE_XLA_FLAGS, JOIN,
                            LONG_GROUPS_S, SPLIT, cross_process_compiles, cross_process_env, work_group)

TESTS = Path(__file__).parent


def test_groups_keep_what_shares_a_fixture_together():
    assert work_group("tests/test_grading.py::test_a[x]") == "tests/test_grading.py"  # a file, as loadfile
    assert work_group("tests/test_grading_chapters.py::test_b[05_training]") == \
        work_group("tests/test_grading_chapters.py::test_c[05_training]") == "tests/test_grading_chapters.py[05_training]"
    assert work_group("tests/test_parallel_selfcheck.py::test_scheme_matches_single_device[data]") == \
        "tests/test_parallel_selfcheck.py"  # every scheme shares the one two-process launch
    assert work_group("tests/test_parallel_selfcheck.py::test_other_splits_of_8_devices[8-1-schemes1]") == \
        "tests/test_parallel_selfcheck.py[8-1-schemes1]"
    assert work_group("tests/test_serving_engine.py::t") == work_group("tests/test_serving_paged.py::t[a]")
    # the scheme cases that share a single-device reference run together: it is computed once
    schemes = "tests/test_parallel_schemes.py::"
    assert {work_group(f"{schemes}{test}[{case}]") for test, case in [
        ("test_memory_matches_prediction", "data-8"), ("test_step_flops_match_xla", "multislice-2x4"),
        ("test_make_loss_and_grads_is_the_steps_gradients", "zero3-8")]} == {f"{schemes[:-2]}[data-8]"}
    assert work_group(f"{schemes}t[fsdp_tp-4x2]") == work_group(f"{schemes}t[tensor-2x4]") != work_group(
        f"{schemes}t[data-8]")
    assert work_group(f"{schemes}test_step_flops_match_xla[data-4]") == f"{schemes[:-2]}[data-4]"  # FLOPs only
    assert work_group("solutions/01_rooflines.ipynb::Cell 3") == "solutions/01_rooflines.ipynb"


def test_every_named_file_exists():
    """A renamed test file would otherwise lose its group or its place in the order without a word."""
    for name in SPLIT:
        assert (TESTS / name).is_file(), name
    for prefix in JOIN:
        assert list(TESTS.glob(f"{prefix}*.py")), prefix
    for group in LONG_GROUPS_S:
        name = group.split("[")[0]
        assert list(TESTS.glob(name)), group


@pytest.mark.skipif(AT_XLA_DEFAULTS, reason="run at XLA's defaults")
def test_the_suite_compiles_with_llvm_optimizations_off():
    assert set(FAST_COMPILE_XLA_FLAGS) <= set(os.environ["XLA_FLAGS"].split())  # inherited by what the suite starts


@pytest.mark.skipif(AT_XLA_DEFAULTS, reason="run at XLA's defaults")
def test_the_cross_process_launches_add_their_flag_and_nothing_else_keeps_it():
    before = os.environ["XLA_FLAGS"]
    env = cross_process_env({"XLA_FLAGS": "--a=1", "B": "2"})
    assert env == {"XLA_FLAGS": " ".join(["--a=1", *CROSS_PROCESS_XLA_FLAGS]), "B": "2"}
    assert cross_process_env(env) == env  # added once
    with cross_process_compiles():
        assert os.environ["XLA_FLAGS"].split() == [*before.split(), *CROSS_PROCESS_XLA_FLAGS]
    assert os.environ["XLA_FLAGS"] == before and not set(CROSS_PROCESS_XLA_FLAGS) & set(before.split())


def test_the_fast_compile_flags_change_what_the_checks_read_nowhere():
    """What the suite's checks read from a compiled program (its optimized HLO text, cost analysis and memory
    analysis) is the same at LLVM level 0 as at XLA's default level 3, here for a tensor-parallel training step
    (collectives, fusions, a scan over layers). The cross-process launches' older fusion emitters change the HLO's
    fusions, so the cost analysis too, but not the collectives, which is all those launches read of it."""
    import jax

    from scalelib import compat, hlo, model, train
    from scalelib.parallel.tensor import TensorParallel

    cfg, scheme = model.small_config(n_heads=8, n_kv_heads=4, head_dim=8), TensorParallel()
    mesh = compat.make_mesh((2, 4), scheme.mesh_axes)
    state, tokens = scheme.shard_inputs(train.init_state(jax.random.key(0), cfg),
                                        train.batch(jax.random.key(1), cfg, 8, 16), mesh)
    lowered = scheme.make_step(cfg, mesh, train.Adam()).lower(state, tokens)

    def read(level: int) -> tuple:
        compiled = lowered.compile(compiler_options={"xla_backend_optimization_level": level})
        cost = compiled.cost_analysis()
        cost = cost[0] if isinstance(cost, list) else cost
        memory = compiled.memory_analysis()
        return (compiled.as_text(), {k: cost[k] for k in ("flops", "bytes accessed")},
                (memory.temp_size_in_bytes, memory.argument_size_in_bytes, memory.output_size_in_bytes))

    fast, default = read(0), read(3)
    assert fast[0] == default[0]
    assert fast[1:] == default[1:]
    assert CROSS_PROCESS_XLA_FLAGS == ("--xla_cpu_use_fusion_emitters=false",)  # as compile options:
    older = lowered.compile(compiler_options={"xla_backend_optimization_level": 0,
                                              "xla_cpu_use_fusion_emitters": False}).as_text()
    assert older != default[0]  # the flag is read, and changes the fusions
    shape = dict(mesh.shape)
    assert hlo.collective_ops(older, shape) == hlo.collective_ops(default[0], shape) != []
    with pytest.raises(Exception, match="xla_backend_optimization_levels"):  # the options are read, not ignored
        lowered.compile(compiler_options={"xla_backend_optimization_levels": 0})


def test_no_process_of_the_suite_or_the_grader_builds_the_iri_parsers():
    """autograder/__init__.py keeps jsonschema's "iri" checker (1 CPU-s of parser building) out of every process
    that imports it, and pytest's `-p autograder` (pyproject.toml's addopts) out of the suite's, while notebooks
    are still validated."""
    assert sys.modules.get("rfc3987_syntax", "missing") is None  # this worker: marked absent, never imported
    code = """import autograder, nbformat, sys
nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("1")])
nbformat.validate(nb)
nb.cells[0]["cell_type"] = "no such type"
try:
    nbformat.validate(nb)
except nbformat.ValidationError:
    print("invalid notebook refused")
print(sys.modules["rfc3987_syntax"])"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split("\n")[:2] == ["invalid notebook refused", "None"], out
