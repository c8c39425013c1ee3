"""Kernels written in plain JAX.

* Attention (book section 4, Appendix A): ``flash_attention`` computes attention block by block with
  the online softmax; ``reference_attention`` is the naive version it is tested against;
  ``online_softmax_update`` is the single step of the recurrence, exposed on its own for the
  notebook exercise.
* Collective matmuls (book section 10): ``allgather_matmul``, ``matmul_reduce_scatter`` and
  ``matmul_all_reduce`` overlap a ring of ``ppermute`` sends with the chunks of a sharded matmul;
  ``collective_matmul.on_mesh`` wraps one in shard_map + jit, ``collective_matmul_cost`` says when
  the sends hide under the arithmetic. ``matmul_selfcheck`` holds their checks on every device of a
  job, which ``python -m scalelib.parallel.selfcheck`` finds on disk and runs after the schemes.
"""

from scalelib.kernels.collective_matmul import (
    CollectiveMatmulCost,
    allgather_matmul,
    collective_matmul_cost,
    matmul_all_reduce,
    matmul_reduce_scatter,
)
from scalelib.kernels.flash_attention import (
    SoftmaxState,
    finalize_softmax_state,
    flash_attention,
    init_softmax_state,
    online_softmax_update,
    reference_attention,
)

__all__ = [
    "CollectiveMatmulCost",
    "SoftmaxState",
    "allgather_matmul",
    "collective_matmul_cost",
    "finalize_softmax_state",
    "flash_attention",
    "init_softmax_state",
    "matmul_all_reduce",
    "matmul_reduce_scatter",
    "online_softmax_update",
    "reference_attention",
]
