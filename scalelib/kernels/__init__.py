"""Attention kernels written in plain JAX (book section 4, Appendix A).

``flash_attention`` computes attention block by block with the online softmax; ``reference_attention``
is the naive version it is tested against; ``online_softmax_update`` is the single step of the
recurrence, exposed on its own for the notebook exercise.
"""

from scalelib.kernels.flash_attention import (
    SoftmaxState,
    finalize_softmax_state,
    flash_attention,
    init_softmax_state,
    online_softmax_update,
    reference_attention,
)

__all__ = [
    "SoftmaxState",
    "finalize_softmax_state",
    "flash_attention",
    "init_softmax_state",
    "online_softmax_update",
    "reference_attention",
]
