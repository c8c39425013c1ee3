"""Checks of numeric arguments that every cost model shares, each with an error that names the argument.

A negative byte count or a zero bandwidth would otherwise come out as a silent nonsense time;
``positive`` and ``non_negative`` return the value as a float so a caller can check and convert at once.
"""

from __future__ import annotations

import math


def positive(name: str, value: float) -> float:
    """``value`` as a float, or a ValueError unless it is a finite number > 0."""
    if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be a positive finite number, got {value!r}")
    return float(value)


def non_negative(name: str, value: float) -> float:
    """``value`` as a float, or a ValueError unless it is a finite number >= 0."""
    if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
    return float(value)


def positive_int(name: str, value: int) -> int:
    """``value`` unchanged, or a ValueError unless it is an int >= 1 (``True`` is refused)."""
    if not (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
        raise ValueError(f"{name} must be a positive int, got {value!r}")
    return value
