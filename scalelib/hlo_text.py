"""Reading the text of a compiled HLO module: computations, instructions, array types and what they call.

Book sections 3 and 9: the compiled program says which collectives XLA inserted and which ops a
profile timed. This is the one reader of that text; ``scalelib.hlo`` (collectives and their mesh
axes), ``profiling.programs`` (an entry computation's heaviest ops) and ``profiling.trace.match``
(a trace op's instruction) build on it.

An instruction line reads ``%name = TYPE opcode(operands), attributes``; ``TYPE`` is an array such
as ``bf16[8,128]{1,0}`` or a tuple of them. A computation starts with ``name (params) -> TYPE {``
(``ENTRY`` before the entry one). Instructions name the computations they run in attributes:
``calls=`` (fusions, calls), ``body=`` and ``condition=`` (while loops), ``to_apply=`` (reductions).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Mapping

from scalelib.collectives import KINDS
from scalelib.dtypes import DTYPE_BYTES as _ALL_DTYPE_BYTES
from scalelib.dtypes import HLO_TYPES

# Bytes per element of each type HLO prints (scalelib.dtypes holds the numbers).
DTYPE_BYTES: dict[str, int] = {name: int(_ALL_DTYPE_BYTES[name]) for name in HLO_TYPES}
# Every opcode of a collective, with the "-start" / "-done" halves of its asynchronous form.
COLLECTIVE_OPCODES = frozenset(f"{op}{suffix}" for op in (*(k.replace("_", "-") for k in KINDS),
                                                          "collective-broadcast")
                               for suffix in ("", "-start", "-done"))

_ARRAY = re.compile(r"\b(pred|[sfu]\d+|bf16)\[([\d,]*)\]")
_SHAPE = re.compile(r"\s*(?:\w+)\[([\d,]*)\]")
_CALLED = re.compile(r"(?:calls|body|condition|to_apply)=%?([\w.\-]+)")
_INSTRUCTION = re.compile(r"^\s*(?:ROOT\s+)?%?([\w.\-]+)\s*=\s*(.+?)\s+([a-z][a-z0-9\-]*)\((.*)$")
_COMPUTATION = re.compile(r"^\s*(ENTRY\s+)?%?([\w.\-]+)\s*\(.*\)\s*->\s*.*\{\s*$")
_INDEX_COMMENT = re.compile(r"/\*index=\d+\*/")


def strip_index_comments(hlo_text: str) -> str:
    """The text without the ``/*index=N*/`` comments XLA numbers long tuple types with."""
    return _INDEX_COMMENT.sub("", hlo_text)


def array_bytes(type_text: str) -> int:
    """Bytes of every array in an HLO type (all elements of a tuple; types without a size are skipped)."""
    return sum(math.prod(int(d) for d in dims.split(",") if d) * DTYPE_BYTES[dtype]
               for dtype, dims in _ARRAY.findall(type_text) if dtype in DTYPE_BYTES)


def array_shape(type_text: str) -> tuple[int, ...] | None:
    """Dims of an HLO type that is one array (``f32[8,128]{1,0}`` -> (8, 128)); None for a tuple."""
    m = _SHAPE.match(type_text)
    return tuple(int(x) for x in m.group(1).split(",") if x) if m else None


def called_computations(rest: str) -> list[str]:
    """Computations an instruction runs, from the text after its opcode: ``calls``, ``body``,
    ``condition`` and ``to_apply``."""
    return _CALLED.findall(rest)


def operand_names(rest: str) -> tuple[str, ...]:
    """Names of an instruction's operands, from the text after its opcode."""
    return tuple(re.findall(r"%([\w.\-]+)", rest.split(")")[0]))


@dataclass(frozen=True)
class Instruction:
    """One instruction line: ``%name = type_text opcode(rest``."""

    name: str
    type_text: str
    opcode: str
    rest: str  # operands and attributes, after the opening parenthesis


@dataclass(frozen=True)
class Module:
    """The computations of a module by name, each its instructions in order, and the entry's name."""

    computations: Mapping[str, tuple[Instruction, ...]]
    entry: str | None

    def shapes(self) -> dict[str, tuple[int, ...] | None]:
        """Every instruction's result dims by name (None for a tuple)."""
        return {i.name: array_shape(i.type_text) for instrs in self.computations.values() for i in instrs}


def parse_module(hlo_text: str) -> Module:
    """Split compiled HLO text into computations and instructions (lines of neither are skipped)."""
    comps: dict[str, list[Instruction]] = {}
    entry, current = None, None
    for line in hlo_text.splitlines():
        c = _COMPUTATION.match(line)
        if c:
            current = c.group(2)
            comps[current] = []
            entry = current if c.group(1) else entry
            continue
        m = _INSTRUCTION.match(line)
        if m and current is not None:
            comps[current].append(Instruction(*m.groups()))
    return Module({k: tuple(v) for k, v in comps.items()}, entry)


def dot_flops(instruction: Instruction, shapes: Mapping[str, tuple[int, ...] | None]) -> float:
    """Matmul FLOPs of one ``dot`` (2 x result elements x contracted size; 0 for any other opcode)."""
    if instruction.opcode != "dot":
        return 0.0
    operands = operand_names(instruction.rest)
    contracting = re.search(r"lhs_contracting_dims=\{([\d,]*)\}", instruction.rest)
    lhs, result = shapes.get(operands[0]) if operands else None, shapes.get(instruction.name)
    if lhs is None or result is None or contracting is None:
        return 0.0
    k = math.prod(lhs[int(d)] for d in contracting.group(1).split(",") if d)
    return 2.0 * math.prod(result) * k


def computation_flops(module: Module, name: str, shapes: Mapping[str, tuple[int, ...] | None],
                      seen: tuple[str, ...] = ()) -> float:
    """Matmul FLOPs of the dots in computation ``name`` and in the computations it runs (each loop body
    counted once, whatever its trip count; a computation already on the path is not entered again)."""
    return sum(dot_flops(i, shapes) + sum(computation_flops(module, c, shapes, seen + (name,))
                                          for c in called_computations(i.rest) if c not in seen)
               for i in module.computations.get(name, ()))


_TRIP_COUNT = re.compile(r'"known_trip_count":\{"n":"(\d+)"\}')
_BODY = re.compile(r"\bbody=%?([\w.\-]+)")


@dataclass(frozen=True)
class WhileLoop:
    """One ``while`` instruction: its trip count where XLA knows it (a rolled loop's
    ``known_trip_count``) and every opcode its body runs, through the computations the body calls."""

    name: str
    trip_count: int | None
    body_opcodes: frozenset[str]


_BRANCHES = re.compile(r"branch_computations=\{([^}]*)\}|(?:true|false)_computation=%?([\w.\-]+)")


def branch_computations(rest: str) -> list[str]:
    """The branches a ``conditional`` may run, from the text after its opcode (one of them runs)."""
    return [name.strip().lstrip("%") for listed, single in _BRANCHES.findall(rest)
            for name in (listed.split(",") if listed else [single]) if name.strip()]


def computation_opcodes(module: Module, name: str, seen: tuple[str, ...] = ()) -> frozenset[str]:
    """Opcodes of computation ``name`` and of every computation it may run, a conditional's branches
    included (a computation already on the path is not entered again)."""
    out: set[str] = set()
    for i in module.computations.get(name, ()):
        out.add(i.opcode)
        for c in called_computations(i.rest) + branch_computations(i.rest):
            if c not in seen and c != name:
                out |= computation_opcodes(module, c, seen + (name,))
    return frozenset(out)


def while_loops(module: Module) -> tuple[WhileLoop, ...]:
    """Every ``while`` of the module, in text order. XLA adds loops of its own (a scatter it expands
    into one, for instance), so a loop is told apart by what its body runs."""
    out = []
    for instrs in module.computations.values():
        for i in instrs:
            if i.opcode != "while":
                continue
            body = _BODY.search(i.rest)
            trips = _TRIP_COUNT.search(i.rest)
            out.append(WhileLoop(i.name, int(trips.group(1)) if trips else None,
                                 computation_opcodes(module, body.group(1)) if body else frozenset()))
    return tuple(out)


def collective_loop_trips(text: str) -> list[int | None]:
    """Trip counts of the compiled program's loops whose bodies run a collective, in text order: a
    pipeline's rolled tick loop, for one (book section 5). Loops XLA adds without collectives are left out."""
    module = parse_module(strip_index_comments(text))
    return [lp.trip_count for lp in while_loops(module) if lp.body_opcodes & COLLECTIVE_OPCODES]
