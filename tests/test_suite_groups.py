"""tests/conftest.py: how the suite is split between its workers, the compile flags it runs under, and how its
notebook kernels are reached."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import (AT_XLA_DEFAULTS, FAST_COMPILE_XLA_FLAGS, JOIN, LONG_GROUPS_S, SPLIT, XLA_DEFAULT_FUSION,
                            work_group)

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
def test_the_suite_compiles_with_its_fast_flags():
    assert set(FAST_COMPILE_XLA_FLAGS) <= set(os.environ["XLA_FLAGS"].split())  # inherited by what the suite starts
    assert FAST_COMPILE_XLA_FLAGS == ("--xla_backend_optimization_level=0", "--xla_cpu_parallel_codegen_split_count=1",
                                      "--xla_cpu_use_fusion_emitters=false")


def test_the_fast_flags_keep_what_checks_read_and_default_fusion_restores_the_rest():
    """Here for a tensor-parallel training step (collectives, fusions, a scan over layers), under the suite's
    XLA_FLAGS. The suite's own compiles keep the collectives of the optimized HLO and the argument and output bytes
    of XLA's defaults (LLVM level 3, code generated in 32 parts, the default fusion emitters): what the numerics and
    collective checks read; generating the code in one part changes nothing they read.
    They change the fusions, so the FLOPs of elementwise work, bytes accessed and temp bytes (by under 1 %); a compile
    with XLA_DEFAULT_FUSION gives XLA's defaults exactly (its HLO, cost and memory analyses), and the checks that
    hold a prediction against those read such compiles."""
    import jax

    from scalelib import compat, hlo, model, train
    from scalelib.parallel.tensor import TensorParallel

    cfg, scheme = model.small_config(n_heads=8, n_kv_heads=4, head_dim=8), TensorParallel()
    mesh = compat.make_mesh((2, 4), scheme.mesh_axes)
    state, tokens = scheme.shard_inputs(train.init_state(jax.random.key(0), cfg),
                                        train.batch(jax.random.key(1), cfg, 8, 16), mesh)
    lowered = scheme.make_step(cfg, mesh, train.Adam()).lower(state, tokens)

    def read(options: dict | None) -> dict:
        compiled = lowered.compile(compiler_options=options)
        cost = compiled.cost_analysis()
        cost = cost[0] if isinstance(cost, list) else cost
        memory = compiled.memory_analysis()
        return {"hlo": compiled.as_text(), "flops": cost["flops"], "bytes accessed": cost["bytes accessed"],
                "temp": memory.temp_size_in_bytes, "arguments": memory.argument_size_in_bytes,
                "outputs": memory.output_size_in_bytes}

    defaults = read({"xla_backend_optimization_level": 3, "xla_cpu_parallel_codegen_split_count": 32,
                     "xla_cpu_use_fusion_emitters": True})
    assert read(XLA_DEFAULT_FUSION) == defaults
    suite = read(None)
    shape = dict(mesh.shape)
    assert hlo.collective_ops(suite["hlo"], shape) == hlo.collective_ops(defaults["hlo"], shape) != []
    assert (suite["arguments"], suite["outputs"]) == (defaults["arguments"], defaults["outputs"])
    # temp bytes move a little (test_parallel_schemes holds its cases' under a bound at the suite's flags)
    assert abs(suite["temp"] - defaults["temp"]) <= 0.01 * defaults["temp"]
    assert read({"xla_cpu_parallel_codegen_split_count": 32}) == suite
    if not AT_XLA_DEFAULTS:  # the fusion flag is read: other fusions, other counts
        assert suite["hlo"] != defaults["hlo"] and suite["bytes accessed"] != defaults["bytes accessed"]
    with pytest.raises(Exception, match="xla_backend_optimization_levels"):  # the options are read, not ignored
        lowered.compile(compiler_options={"xla_backend_optimization_levels": 0})


# Test modules that read a compiled program's cost or memory analysis (directly, or through scalelib's
# program_summary and xla_flops) and need no default-fusion compile: each compares compiles made under the same flags.
SAME_FLAGS_READERS = {
    "test_compat.py": "compat.fast_compiles against no fast_compiles, both under the suite's XLA flags",
}
READS_ANALYSES = re.compile(r"program_summary\(|xla_flops\(|\.(cost|memory)_analysis\(")


def test_every_module_that_reads_what_fusion_decides_compiles_at_default_fusion():
    """The rule of conftest's XLA_DEFAULT_FUSION, for the next module that reads an analysis: it must use
    XLA_DEFAULT_FUSION somewhere, or be listed above with the reason it does not need to. (Within a module, which
    compile reads what is left to its review.)"""
    texts = {p.name: p.read_text() for p in TESTS.glob("*.py") if p.name != "conftest.py"}
    readers = {name for name, text in texts.items() if READS_ANALYSES.search(text)}
    assert "test_model.py" in readers and "test_parallel_schemes.py" in readers  # the pattern still finds them
    missing = {name for name in readers - set(SAME_FLAGS_READERS) if "XLA_DEFAULT_FUSION" not in texts[name]}
    assert missing == set(), (f"{sorted(missing)} read XLA's cost or memory analysis without compiling at "
                              "XLA_DEFAULT_FUSION (tests/conftest.py says why and how)")
    assert set(SAME_FLAGS_READERS) <= readers  # an entry that no longer reads anything is removed


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


def test_nbvals_kernels_talk_over_unix_sockets():
    """No TCP port for another process of the suite to take between jupyter_client's pick and the kernel's bind."""
    import nbval.kernel

    kernel = nbval.kernel.RunningKernel("python3", cwd=str(TESTS))
    try:
        manager = kernel.kc.parent
        assert type(manager).__name__ == "IpcKernelManager" and manager.transport == "ipc", type(manager)
        assert os.path.exists(f"{manager.ip}-{manager.shell_port}")
    finally:
        kernel.stop()
