"""Checks of numeric arguments that every cost model shares, each with an error that names the argument.

A negative byte count or a zero bandwidth would otherwise come out as a silent nonsense time;
``positive`` and ``non_negative`` return the value as a float so a caller can check and convert at once.
``positive_int`` is the one rule for counts (chips, ways, layers, blocks, steps, ...) across scalelib.
"""

from __future__ import annotations

import math
import numbers


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
    """``value`` as a Python int, or a ValueError unless it is a whole number >= 1 of an integer type.

    Python ints and NumPy integers (``numbers.Integral``, as sizes read from shapes or drawn with
    ``numpy.random`` are) pass; ``True``/``False`` are refused (a flag is not a count), and so are floats,
    even whole ones such as ``2.0`` (a count that arrives as a float was usually computed by a division).
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueError(f"{name} must be a positive int, got {value!r} of type {type(value).__name__}; "
                         "give a whole number >= 1 as an int")
    if value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}; give a whole number >= 1")
    return int(value)
