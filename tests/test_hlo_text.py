"""scalelib.hlo_text: the one reader of compiled HLO text (computations, array types, called computations)."""

import pytest

from scalelib import hlo_text as ht

MODULE = """HloModule jit_step, entry_computation_layout={(f32[8,16]{1,0})->f32[8,4]{1,0}}

cond.1 (p: (s32[], f32[8,16])) -> pred[] {
  %p = (s32[], f32[8,16]{1,0}) parameter(0)
  %i = s32[] get-tuple-element(%p), index=0
  %n = s32[] constant(3)
  ROOT %lt = pred[] compare(%i, %n), direction=LT
}

body.1 (p: (s32[], f32[8,16])) -> (s32[], f32[8,16]) {
  %p = (s32[], f32[8,16]{1,0}) parameter(0)
  %x = f32[8,16]{1,0} get-tuple-element(%p), index=1
  %w = f32[16,16]{1,0} constant({...})
  %d = f32[8,16]{1,0} dot(%x, %w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT %t = (s32[], f32[8,16]{1,0}) tuple(%i, %d)
}

ENTRY main.2 (a: f32[8,16]) -> f32[8,4] {
  %a = f32[8,16]{1,0} parameter(0)
  %loop = (s32[], f32[8,16]{1,0}) while(%init), condition=%cond.1, body=%body.1
  %ag = (bf16[4,2]{1,0}, /*index=1*/bf16[8]{0}) all-gather-start(%a), replica_groups={{0,1}}
  ROOT %r = f32[8,4]{1,0} slice(%a), slice={[0:8], [0:4]}
}
"""


def test_module_computations_entry_and_shapes():
    module = ht.parse_module(ht.strip_index_comments(MODULE))
    assert list(module.computations) == ["cond.1", "body.1", "main.2"] and module.entry == "main.2"
    assert [i.opcode for i in module.computations["main.2"]] == ["parameter", "while", "all-gather-start", "slice"]
    assert module.shapes()["d"] == (8, 16) and module.shapes()["p"] is None  # a tuple has no one shape


def test_array_bytes_called_computations_and_flops():
    assert ht.array_bytes("(bf16[4,2]{1,0}, bf16[8]{0}, f32[])") == 16 + 16 + 4
    assert ht.array_bytes("token[]") == 0
    module = ht.parse_module(MODULE)
    loop = module.computations["main.2"][1]
    assert ht.called_computations(loop.rest) == ["cond.1", "body.1"]  # a while's condition too
    assert ht.operand_names(loop.rest) == ("init",)
    assert ht.computation_flops(module, "main.2", module.shapes()) == pytest.approx(2 * 8 * 16 * 16)
    assert "all-gather-start" in ht.COLLECTIVE_OPCODES and "collective-broadcast" in ht.COLLECTIVE_OPCODES


def test_while_loops_and_what_their_bodies_run():
    module = ht.parse_module(ht.strip_index_comments(MODULE))
    (loop,) = ht.while_loops(module)
    assert loop.name == "loop" and loop.trip_count is None  # no known_trip_count in its attributes
    assert {"dot", "constant", "tuple"} <= loop.body_opcodes and "all-gather-start" not in loop.body_opcodes
    assert ht.branch_computations("%i, %a, %b), branch_computations={%left, %right.2}, metadata={}") == [
        "left", "right.2"]
    assert ht.branch_computations("%p, %a, %b), true_computation=%yes, false_computation=%no") == ["yes", "no"]


def test_while_loops_of_a_compiled_program():
    """A rolled loop of 5 steps whose body runs a permute only in one branch of a conditional: the loop's trip
    count and the collective reached through the branch."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import PartitionSpec as P

    from scalelib import compat

    mesh = compat.make_mesh((2,), ("x",), kind="auto", devices=jax.devices()[:2])

    def body(i, v):
        return jax.lax.cond(i % 2 == 0, lambda a: jax.lax.ppermute(a, "x", [(0, 1), (1, 0)]), lambda a: a + 1.0, v)

    fn = jax.jit(jax.shard_map(lambda v: jax.lax.fori_loop(0, 5, body, v), mesh=mesh, in_specs=P("x"),
                               out_specs=P("x")))
    x = jax.device_put(jnp.ones(8), jax.sharding.NamedSharding(mesh, P("x")))  # [8], 4 per device
    text = fn.lower(x).compile().as_text()
    loops = ht.while_loops(ht.parse_module(ht.strip_index_comments(text)))
    holding = [lp for lp in loops if lp.body_opcodes & ht.COLLECTIVE_OPCODES]
    assert [lp.trip_count for lp in holding] == [5], loops
