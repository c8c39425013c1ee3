"""scalelib.profiling.trace.match: trace op names to compiled HLO instructions (kind, scope, FLOPs, bytes)."""

import jax
import jax.numpy as jnp
import pytest

from scalelib.profiling.trace import match
from tests import trace_cases
from tests.conftest import XLA_DEFAULT_FUSION


def test_scopes_drop_the_levels_jax_adds():
    assert match.scope_of("jit(step)/up_projection/dot_general") == "up_projection"
    assert match.scope_of("jit(body)/shard_map/while/body/closed_call/hop/ppermute") == "hop"
    assert match.scope_of("jit(loss)/transpose(jvp(layer1))/mul") == "transpose(jvp(layer1))"
    assert match.scope_of("jit(f)/jit(inner)/attn/head/exp") == "attn/head"
    assert match.scope_of("jit(body)/shard_map") == "" and match.scope_of("x") == ""


def test_kinds_by_name_cover_both_xla_cpu_namings():
    for name in ("all-gather", "all-reduce.3", "reduce_scatter.7", "ppermute.21", "collective-permute-done.1",
                 "all-gather-start"):
        assert match.kind_by_name(name) == "collective", name
    for name in ("copy", "copy.1", "wrapped_copy", "wrapped_copy.12"):
        assert match.kind_by_name(name) == "copy", name
    for name in ("dot.1", "ynn_fusion.3", "multiply_multiply_fusion", "copy_fusion_like_name.2", "wrapped_slice"):
        assert match.kind_by_name(name) == "compute", name


def test_matmul_flops_of_the_ops_that_run_add_up_to_xla_cost_analysis():
    f = jax.jit(lambda a, b, c: jnp.tanh(a @ b) @ c, compiler_options=XLA_DEFAULT_FUSION)
    args = jnp.ones((32, 48)), jnp.ones((48, 64)), jnp.ones((64, 16))  # [M, K], [K, N], [N, P]
    compiled = f.lower(*args).compile()
    analysis = compiled.cost_analysis()
    analysis = analysis[0] if isinstance(analysis, (list, tuple)) else analysis
    index = match.index_hlo(compiled.as_text())
    entry = compiled.as_text().split("ENTRY")[1]
    ran = [i for name, i in index.items() if f"%{name} =" in entry and i.opcode != "parameter"]
    assert sum(i.flops for i in ran) == analysis["flops"] == 2 * 32 * 48 * 64 + 2 * 32 * 64 * 16
    first = next(i for i in ran if i.flops == 2 * 32 * 48 * 64)
    assert first.bytes == 4 * (32 * 48 + 48 * 64 + 32 * 64)  # reads both operands, writes the product


def test_collectives_copies_and_fusions_get_their_kinds():
    index = match.index_hlo(trace_cases.case("ffw").capture.hlo_text)
    kinds = {i.opcode: i.kind for i in index.values() if i.opcode in ("all-gather", "all-reduce", "copy", "dot")}
    assert kinds.get("all-gather") == kinds.get("all-reduce") == "collective"
    assert all(i.kind == "copy" for i in index.values() if i.opcode == "copy" or i.name.startswith("wrapped_copy"))
    book_op = ("HloModule m\n%all-reduce-scatter.3 (p: bf16[8]) -> bf16[4] {\n  %p = bf16[8]{0} parameter(0)\n"
               "  ROOT %rs = bf16[4]{0} reduce-scatter(%p), dimensions={0}\n}\n"
               "ENTRY %main (a: bf16[8]) -> bf16[4] {\n  %a = bf16[8]{0} parameter(0)\n"
               "  ROOT %fusion.3 = bf16[4]{0} fusion(%a), kind=kCustom, calls=%all-reduce-scatter.3\n}\n")
    fused = match.index_hlo(book_op)["fusion.3"]  # a TPU fuses the collective into a fusion
    assert (fused.kind, fused.bytes, fused.operands) == ("collective", 2 * 8 + 2 * 4, ("a",))
    assert match.module_name(book_op) == "m"
    with pytest.raises(ValueError, match="HloModule"):
        match.module_name("not hlo")
    with pytest.raises(ValueError, match="no HLO computations"):
        match.index_hlo("not hlo either")
