"""How a training run splits its chips, as the book's per-layer cost model sees it (section 5).

A ``Layout`` names a registered scheme and the sizes of its axes: ICI axes for the batch (data
parallelism, FSDP), for tensor parallelism and for experts, pipeline stages, and slices over DCN.
``pricing.layer_cost``, ``memory.memory_per_chip`` and the planner read it; the scheme it names says
how its collectives are priced (``Scheme.layer_comms_s``), and they look that name up in the
registry (an unknown name fails there, with the registered names). Only sizes live here, below
every scheme: the executed schemes on a real mesh take their own config (``scalelib.parallel.scheme``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from scalelib.validate import positive_int


@dataclass(frozen=True)
class Layout:
    """How the chips are split: ICI axes for the batch (DP / FSDP) and for tensor parallelism,
    pipeline stages, expert axes and DCN slices. ``chips`` is the product of all of them."""

    scheme: str
    data_axes: tuple[int, ...] = (1,)
    model_axes: tuple[int, ...] = (1,)
    expert_axes: tuple[int, ...] = (1,)
    stages: int = 1
    microbatches: int = 1
    slices: int = 1

    def __post_init__(self) -> None:
        if not (isinstance(self.scheme, str) and self.scheme):
            raise ValueError(f"scheme must be a scheme's name such as 'fsdp' (scalelib.parallel.names() lists them), "
                             f"got {self.scheme!r}")
        for name in ("data_axes", "model_axes", "expert_axes"):
            axes = tuple(getattr(self, name))
            if not axes:
                raise ValueError(f"{name} must be a non-empty tuple of positive ints, got {axes!r}")
            object.__setattr__(self, name, tuple(positive_int(f"{name}[{i}]", n) for i, n in enumerate(axes)))
        for name in ("stages", "microbatches", "slices"):
            object.__setattr__(self, name, positive_int(name, getattr(self, name)))

    @property
    def data_ways(self) -> int:
        return math.prod(self.data_axes)

    @property
    def model_ways(self) -> int:
        return math.prod(self.model_axes)

    @property
    def expert_ways(self) -> int:
        return math.prod(self.expert_axes)

    @property
    def batch_ways(self) -> int:
        """Ways the global batch is split (data, expert and slice axes)."""
        return self.data_ways * self.expert_ways * self.slices

    @property
    def chips(self) -> int:
        return self.batch_ways * self.model_ways * self.stages
