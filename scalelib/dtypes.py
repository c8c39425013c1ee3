"""Bytes per stored value, under the names the book and XLA's HLO give the formats.

The book's serving chapters name formats ``fp32``, ``bf16``, ``int8``, ``int4``; compiled HLO
names the same formats ``f32``, ``bf16``, ``s8`` (and ``pred``, ``u32``, ...). One table holds both
spellings, so a byte count read off a program and one from a cost model come from the same numbers.
"""

from __future__ import annotations

import math

DTYPE_BYTES: dict[str, float] = {
    "fp32": 4.0, "bf16": 2.0, "int8": 1.0, "int4": 0.5,  # the book's names
    "pred": 1.0, "s8": 1.0, "u8": 1.0, "s16": 2.0, "u16": 2.0, "f16": 2.0, "s32": 4.0, "u32": 4.0, "f32": 4.0,
    "s64": 8.0, "u64": 8.0, "f64": 8.0,  # and HLO's
}
BOOK_FORMATS: tuple[str, ...] = ("fp32", "bf16", "int8", "int4")
HLO_TYPES: tuple[str, ...] = ("pred", "s8", "u8", "s16", "u16", "f16", "bf16", "s32", "u32", "f32", "s64", "u64", "f64")


def dtype_bytes(dtype: str | float) -> float:
    """Bytes of one value: a name from ``DTYPE_BYTES`` or a positive number of bytes."""
    if isinstance(dtype, str):
        if dtype not in DTYPE_BYTES:
            raise ValueError(f"unknown dtype {dtype!r}; use one of {sorted(DTYPE_BYTES)} or a number of bytes")
        return DTYPE_BYTES[dtype]
    if not (isinstance(dtype, (int, float)) and dtype > 0 and math.isfinite(dtype)):
        raise ValueError(f"bytes per value must be a positive number, got {dtype!r}")
    return float(dtype)
