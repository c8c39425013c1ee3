"""Which compiled HLO instruction each op of a trace is (book section 9: reading a profile).

A profile names every op it timed after the optimized HLO instruction that ran (``fusion.3``,
``all-gather``, ``copy.1``), so the compiled program's text says what each one was: its opcode,
the named scope it was written under (``jax.named_scope`` labels sit in the op's metadata, e.g.
``op_name="jit(step)/up_projection/dot_general"``), the matmul FLOPs it does and the bytes it reads
and writes. ``index_hlo`` reads every computation of the module (with ``scalelib.hlo_text``), not only the entry one,
because ops inside a loop body run (and are traced) under their own names.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from scalelib import compat
from scalelib.hlo_text import COLLECTIVE_OPCODES, array_bytes, called_computations, computation_flops, \
    dot_flops, operand_names, parse_module, strip_index_comments

KINDS: tuple[str, ...] = ("compute", "collective", "copy", "waiting")  # "waiting": inside a collective

COPY_OPCODES = frozenset({"copy", "copy-start", "copy-done"})
_METADATA = re.compile(r'metadata=\{[^}]*?op_name="([^"]*)"')
_JAX_LEVELS = frozenset({"shard_map", "while", "body", "cond", "closed_call", "checkpoint", "remat"})
_MODULE = re.compile(r"^\s*HloModule\s+([\w.\-<>()]+)", re.MULTILINE)


@dataclass(frozen=True)
class HloInstruction:
    """One instruction of a compiled module, as a trace op is matched to it by name."""

    name: str
    opcode: str
    kind: str  # "compute", "collective" or "copy"
    scope: str  # the named scopes it was written under, joined by "/" ("" when none)
    flops: float  # matmul FLOPs, counting dots in the computations it calls
    bytes: int  # bytes of its operands plus bytes of its result: what it reads and writes once
    operands: tuple[str, ...]


def module_name(hlo_text: str) -> str:
    """Name of a compiled module (``HloModule jit_step, ...`` -> ``"jit_step"``): a trace's ``hlo_module``."""
    m = _MODULE.search(hlo_text)
    if m is None:
        raise ValueError("no 'HloModule <name>' line found; pass the text of a compiled program "
                         "(jitted.lower(*args).compile().as_text())")
    return m.group(1)


def scope_of(op_name: str) -> str:
    """Named scopes in an HLO ``op_name``: the path between the jitted function and the primitive.

    ``"jit(step)/up/dot_general"`` -> ``"up"``; transformations stay visible around the scope they
    apply to (``"transpose(jvp(up))"`` is the backward pass of ``up``); the levels JAX adds itself
    (``shard_map``, a loop's ``while/body``, ``closed_call``, nested ``jit(...)``, an einsum's
    ``"btd,df->btf"``) are dropped.
    """
    parts = op_name.split("/")
    if len(parts) < 3:
        return ""
    middle = [p for p in parts[1:-1] if p not in _JAX_LEVELS and "->" not in p and not re.fullmatch(r"p?jit\(.*\)", p)]
    return "/".join(middle)


def kind_by_name(name: str) -> str:
    """Op kind from its trace name alone (when no HLO is at hand), after XLA:CPU's naming habits."""
    for pattern, kind in compat.CPU_OP_NAME_KINDS:
        if re.match(pattern, name):
            return kind
    return "compute"


def index_hlo(hlo_text: str) -> dict[str, HloInstruction]:
    """Every instruction of compiled HLO text by name, with its kind, scope, FLOPs and bytes.

    Kind: a collective opcode, or a fusion whose body holds one (TPU programs fuse collectives), is
    ``collective``; a ``copy``, or a fusion that only copies (``wrapped_copy`` on newer XLA:CPU), is
    ``copy``; everything else is ``compute``.
    """
    module = parse_module(strip_index_comments(hlo_text))
    if not module.computations:
        raise ValueError("no HLO computations found; pass the text of a compiled program "
                         "(jitted.lower(*args).compile().as_text())")
    shapes = module.shapes()
    result_bytes = {i.name: array_bytes(i.type_text) for instrs in module.computations.values() for i in instrs}

    def opcodes(comp: str, seen: tuple[str, ...] = ()) -> set[str]:
        out = set()
        for i in module.computations.get(comp, ()):
            out.add(i.opcode)
            out |= {o for c in called_computations(i.rest) if c not in seen for o in opcodes(c, seen + (comp,))}
        return out

    index = {}
    for comp, instrs in module.computations.items():
        for i in instrs:
            called = [c for c in called_computations(i.rest) if c != comp]
            inner = set().union(*(opcodes(c) for c in called)) if i.opcode == "fusion" and called else set()
            if i.opcode in COLLECTIVE_OPCODES or inner & COLLECTIVE_OPCODES:
                kind = "collective"
            elif i.opcode in COPY_OPCODES or (inner and inner <= COPY_OPCODES | {"parameter"}):
                kind = "copy"
            else:
                kind = "compute"
            meta = _METADATA.search(i.rest)
            op_flops = dot_flops(i, shapes) + sum(computation_flops(module, c, shapes) for c in called
                                                  if i.opcode not in ("while", "conditional"))
            operands = operand_names(i.rest)
            nbytes = result_bytes[i.name] + sum(result_bytes.get(o, 0) for o in operands)
            index[i.name] = HloInstruction(i.name, i.opcode, kind, scope_of(meta.group(1)) if meta else "", op_flops,
                                           nbytes, operands)
    return index

