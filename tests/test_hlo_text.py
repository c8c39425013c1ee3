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
