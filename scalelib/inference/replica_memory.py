"""Memory at serving time: weights, KV caches, and what a group of chips can hold.

Book: section 7.1.6 (what uses memory during inference: one copy of the weights and the KV
caches; activations are negligible), 7.1.7 (how many sequences fit next to LLaMA 2-13B),
Exercises 7.2 and 7.6, and section 8.1 (the smallest TPU v5e slice for LLaMA 3-70B in bf16,
int8 and int4, and the batch that fills the rest of its HBM).

A ``Replica`` is the set of chips serving one copy of the model. Weights and caches are assumed
spread evenly over its chips (fully sharded), so only totals matter here. Slice sizes follow
the book's rule of rounding the chip count up to a power of two.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from scalelib import hardware
from scalelib.dtypes import dtype_bytes
from scalelib.hardware import Chip, Dtype
from scalelib.topology import Slice
from scalelib.transformer_memory import kv_bytes
from scalelib.transformer_memory import kv_cache_bytes_per_token as kv_bytes_per_token
from scalelib.validate import non_negative, positive, positive_int

# Defined once elsewhere, under the names the serving chapters use: ``dtype_bytes`` (scalelib.dtypes),
# ``kv_bytes_per_token`` and ``kv_bytes`` (scalelib.transformer_memory), ``chips_to_hold`` (scalelib.hardware).
chips_to_hold = hardware.chips_to_hold
__all__ = ["Replica", "ServingMemory", "chips_to_hold", "dtype_bytes", "free_hbm_bytes", "free_hbm_per_chip_bytes",
           "kv_bytes", "kv_bytes_per_token", "kv_token_capacity", "max_batch", "param_bytes", "sequences_exceeding",
           "serving_memory", "slice_of", "smallest_slice", "smallest_slice_chips"]

def param_bytes(n_params: float, dtype: str | float = "bf16") -> float:
    """Bytes of one copy of the weights (no optimizer state, no gradients at inference)."""
    return non_negative("n_params", n_params) * dtype_bytes(dtype)


@dataclass(frozen=True)
class Replica:
    """``chips`` chips of one kind serving one copy of the model, everything sharded evenly."""

    chip: Chip
    chips: int

    def __post_init__(self) -> None:
        object.__setattr__(self, "chips", positive_int("chips", self.chips))

    @property
    def hbm_bytes(self) -> float:
        return self.chips * self.chip.hbm_bytes

    @property
    def hbm_bytes_per_s(self) -> float:
        """All chips streaming from their own HBM at once."""
        return self.chips * self.chip.hbm_bytes_per_s

    def flops_per_s(self, dtype: Dtype = "bf16") -> float:
        return self.chips * self.chip.flops_per_s(dtype)

    @property
    def hosts(self) -> int:
        return math.ceil(self.chips / self.chip.chips_per_host)


@dataclass(frozen=True)
class ServingMemory:
    """What a replica must hold: one copy of the weights and the caches of the batch."""

    weight_bytes: float
    kv_bytes: float

    @property
    def total_bytes(self) -> float:
        return self.weight_bytes + self.kv_bytes


def serving_memory(weight_bytes: float, bytes_per_token: float, seq_len: float, batch: float) -> ServingMemory:
    """Weights plus ``batch`` caches of ``seq_len`` tokens (activations left out, as the book does)."""
    return ServingMemory(non_negative("weight_bytes", weight_bytes), kv_bytes(bytes_per_token, seq_len, batch))


def free_hbm_bytes(hbm: Replica | float, weight_bytes: float) -> float:
    """HBM left for KV caches once the weights are in (``hbm``: a replica or its total bytes)."""
    total = hbm.hbm_bytes if isinstance(hbm, Replica) else non_negative("hbm", hbm)
    free = total - non_negative("weight_bytes", weight_bytes)
    if free < 0:
        raise ValueError(f"{weight_bytes:.4g} bytes of weights do not fit in {total:.4g} bytes of HBM; "
                         "use more chips or a smaller weight dtype")
    return free


def free_hbm_per_chip_bytes(replica: Replica, weight_bytes: float) -> float:
    """``free_hbm_bytes`` on each chip (Exercise 7.6)."""
    return free_hbm_bytes(replica, weight_bytes) / replica.chips


def max_batch(free_bytes: float, kv_bytes_per_seq: float) -> int:
    """Most whole sequences whose caches fit in ``free_bytes`` (the largest generate batch)."""
    ratio = non_negative("free_bytes", free_bytes) / positive("kv_bytes_per_seq", kv_bytes_per_seq)
    return math.floor(ratio * (1 + 1e-12))  # an exact fit counts despite rounding in the division


def kv_token_capacity(free_bytes: float, bytes_per_token: float) -> float:
    """Cached tokens (summed over the batch) that fit in ``free_bytes`` (Exercise 7.2)."""
    return non_negative("free_bytes", free_bytes) / positive("bytes_per_token", bytes_per_token)


def sequences_exceeding(weight_bytes: float, kv_bytes_per_seq: float) -> int:
    """Fewest sequences whose caches together outweigh the weights (section 7.1.6)."""
    return math.floor(non_negative("weight_bytes", weight_bytes) / positive("kv_bytes_per_seq", kv_bytes_per_seq)) + 1


def smallest_slice_chips(total_bytes: float, chip: Chip) -> int:
    """The book's serving rule: whole chips that hold ``total_bytes``, rounded up to a power of two."""
    return 2 ** math.ceil(math.log2(hardware.min_chips_to_hold(total_bytes, chip)))


def slice_of(chip: Chip, chips: int) -> Slice:
    """A near-square 2D slice of a power-of-two ``chips`` (8 -> 2x4, 16 -> 4x4, 32 -> 4x8)."""
    chips = positive_int("chips", chips)
    if chips & (chips - 1):
        raise ValueError(f"chips must be a power of two (1, 2, 4, 8, ...), got {chips!r}; "
                         "round up with smallest_slice_chips first")
    k = int(math.log2(chips))
    return Slice(chip, (2 ** (k // 2), 2 ** (k - k // 2)))


def smallest_slice(total_bytes: float, chip: Chip) -> Slice:
    """The smallest power-of-two 2D slice whose HBM holds ``total_bytes``."""
    return slice_of(chip, smallest_slice_chips(total_bytes, chip))
