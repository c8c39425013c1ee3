"""Profiling helpers (book section 9): memory layouts, expected op times, fair timings, program contents.

* Tiled layouts (9.2.2). An HLO shape such as ``bf16[32,32,4096]{2,1,0:T(8,128)(2,1)S(1)}`` says
  in which order the dims sit in memory (minor first), how the minor dims are cut into tiles, and
  which memory holds the array (``S(1)``: VMEM; none or ``S(0)``: HBM). Dims are padded up to whole
  tiles, so a small or oddly shaped array takes more memory than its elements: ``parse_layout``,
  ``padded_shape``, ``padding_ratio``, and ``tiled_offsets`` (the memory slot of every element).
* Expected time of one sharded einsum (9.2.4), from shapes, shardings in the book's notation and a
  peak: ``sharded_einsum_time`` folds the einsum into the 2-D product of
  ``scalelib.sharded_matmul`` and prices it with ``plan_cost`` (``roofline`` + ``collectives``).
* ``time_jitted``: wall time of a jitted function, compile excluded, each run waited for with
  ``block_until_ready``, the median of several runs reported.
* ``program_summary``: the collectives (via ``scalelib.hlo``) and the heaviest ops of a compiled
  program; ``jaxpr_primitive_counts`` counts primitives in a traced one.
* ``scalelib.profiling.trace`` (a subpackage, imported on its own): capture a profiler trace, read
  it into per-device op records, summarise, draw and export what actually ran.
"""

from scalelib.profiling.estimate import EinsumEstimate, sharded_einsum_time
from scalelib.profiling.tiled_layout import (MEMORY_SPACES, Layout, padded_shape, padding_ratio, parse_layout,
                                             tiled_offsets)
from scalelib.profiling.programs import (HloOp, ProgramSummary, Timing, hlo_ops, jaxpr_primitive_counts,
                                         program_summary, time_jitted)

__all__ = ["MEMORY_SPACES", "EinsumEstimate", "HloOp", "Layout", "ProgramSummary", "Timing", "hlo_ops",
           "jaxpr_primitive_counts", "padded_shape", "padding_ratio", "parse_layout", "program_summary",
           "sharded_einsum_time", "tiled_offsets", "time_jitted"]
