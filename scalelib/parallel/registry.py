"""The registry of training-parallelism schemes: name -> ``Scheme`` class, in the planner's order.

A scheme module decorates its class with ``@register``; ``scalelib.parallel`` imports every scheme
module once, which fills the registry before anything reads it. ``pricing``, ``chip_memory``, ``planner``
and the tests find a scheme here by the name a ``Layout`` carries, never by comparing strings.
This module imports no scheme, so every module of the package may import it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from scalelib.parallel.scheme import Scheme

S = TypeVar("S", bound="type[Scheme]")

SCHEMES: dict[str, type[Scheme]] = {}


def register(cls: S) -> S:
    """Class decorator: add a ``Scheme`` subclass under its ``name`` (each name once)."""
    if cls.name in SCHEMES:
        raise ValueError(f"a scheme named {cls.name!r} is registered already ({SCHEMES[cls.name].__qualname__})")
    SCHEMES[cls.name] = cls
    return cls


def names() -> tuple[str, ...]:
    """Every registered scheme name, in registration order."""
    return tuple(SCHEMES)


def get(name: str) -> type[Scheme]:
    """The ``Scheme`` class called ``name``."""
    if name not in SCHEMES:
        raise ValueError(f"unknown scheme {name!r}; the registered schemes are {names()}")
    return SCHEMES[name]
