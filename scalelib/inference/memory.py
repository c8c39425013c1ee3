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

from scalelib import transformer_memory as tmem
from scalelib.hardware import Chip, Dtype
from scalelib.topology import Slice
from scalelib.transformer import TransformerConfig

# Bytes per stored value for the formats the book serves in.
DTYPE_BYTES: dict[str, float] = {"fp32": 4.0, "bf16": 2.0, "int8": 1.0, "int4": 0.5}


def dtype_bytes(dtype: str | float) -> float:
    """Bytes of one value: a name from ``DTYPE_BYTES`` or a positive number of bytes."""
    if isinstance(dtype, str):
        if dtype not in DTYPE_BYTES:
            raise ValueError(f"unknown dtype {dtype!r}; use one of {sorted(DTYPE_BYTES)} or a number of bytes")
        return DTYPE_BYTES[dtype]
    if not (isinstance(dtype, (int, float)) and dtype > 0 and math.isfinite(dtype)):
        raise ValueError(f"bytes per value must be a positive number, got {dtype!r}")
    return float(dtype)


def _non_negative(name: str, value: float) -> float:
    if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
    return float(value)


def _positive(name: str, value: float) -> float:
    if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be a positive finite number, got {value!r}")
    return float(value)


def param_bytes(n_params: float, dtype: str | float = "bf16") -> float:
    """Bytes of one copy of the weights (no optimizer state, no gradients at inference)."""
    return _non_negative("n_params", n_params) * dtype_bytes(dtype)


def kv_bytes_per_token(cfg: TransformerConfig, dtype: str | float = "bf16") -> float:
    """Bytes one token adds to the cache: a key and a value of K x H in each of L layers."""
    return tmem.kv_cache_bytes_per_token(cfg, dtype_bytes(dtype))


def kv_bytes(bytes_per_token: float, seq_len: float, batch: float = 1) -> float:
    """Bytes of ``batch`` caches of ``seq_len`` tokens, given the per-token figure."""
    return (_non_negative("bytes_per_token", bytes_per_token) * _non_negative("seq_len", seq_len)
            * _non_negative("batch", batch))


@dataclass(frozen=True)
class Replica:
    """``chips`` chips of one kind serving one copy of the model, everything sharded evenly."""

    chip: Chip
    chips: int

    def __post_init__(self):
        if not (isinstance(self.chips, int) and self.chips >= 1):
            raise ValueError(f"chips must be a positive int, got {self.chips!r}")

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
    return ServingMemory(_non_negative("weight_bytes", weight_bytes), kv_bytes(bytes_per_token, seq_len, batch))


def free_hbm_bytes(hbm: Replica | float, weight_bytes: float) -> float:
    """HBM left for KV caches once the weights are in (``hbm``: a replica or its total bytes)."""
    total = hbm.hbm_bytes if isinstance(hbm, Replica) else _non_negative("hbm", hbm)
    free = total - _non_negative("weight_bytes", weight_bytes)
    if free < 0:
        raise ValueError(f"{weight_bytes:.4g} bytes of weights do not fit in {total:.4g} bytes of HBM; "
                         "use more chips or a smaller weight dtype")
    return free


def free_hbm_per_chip_bytes(replica: Replica, weight_bytes: float) -> float:
    """``free_hbm_bytes`` on each chip (Exercise 7.6)."""
    return free_hbm_bytes(replica, weight_bytes) / replica.chips


def max_batch(free_bytes: float, kv_bytes_per_seq: float) -> int:
    """Most whole sequences whose caches fit in ``free_bytes`` (the largest generate batch)."""
    ratio = _non_negative("free_bytes", free_bytes) / _positive("kv_bytes_per_seq", kv_bytes_per_seq)
    return math.floor(ratio * (1 + 1e-12))  # an exact fit counts despite rounding in the division


def kv_token_capacity(free_bytes: float, bytes_per_token: float) -> float:
    """Cached tokens (summed over the batch) that fit in ``free_bytes`` (Exercise 7.2)."""
    return _non_negative("free_bytes", free_bytes) / _positive("bytes_per_token", bytes_per_token)


def sequences_exceeding(weight_bytes: float, kv_bytes_per_seq: float) -> int:
    """Fewest sequences whose caches together outweigh the weights (section 7.1.6)."""
    return math.floor(_non_negative("weight_bytes", weight_bytes) / _positive("kv_bytes_per_seq", kv_bytes_per_seq)) + 1


def chips_to_hold(total_bytes: float, chip: Chip) -> float:
    """Chips' worth of HBM that ``total_bytes`` fill (a fraction: 8.75 for 140 GB on v5e)."""
    return _non_negative("total_bytes", total_bytes) / chip.hbm_bytes


def smallest_slice_chips(total_bytes: float, chip: Chip) -> int:
    """The book's serving rule: whole chips that hold ``total_bytes``, rounded up to a power of two."""
    need = max(1, math.ceil(chips_to_hold(total_bytes, chip) - 1e-9))
    return 2 ** math.ceil(math.log2(need))


def slice_of(chip: Chip, chips: int) -> Slice:
    """A near-square 2D slice of a power-of-two ``chips`` (8 -> 2x4, 16 -> 4x4, 32 -> 4x8)."""
    if not (isinstance(chips, int) and chips >= 1 and chips & (chips - 1) == 0):
        raise ValueError(f"chips must be a power of two (1, 2, 4, 8, ...), got {chips!r}; "
                         "round up with smallest_slice_chips first")
    k = int(math.log2(chips))
    return Slice(chip, (2 ** (k // 2), 2 ** (k - k // 2)))


def smallest_slice(total_bytes: float, chip: Chip) -> Slice:
    """The smallest power-of-two 2D slice whose HBM holds ``total_bytes``."""
    return slice_of(chip, smallest_slice_chips(total_bytes, chip))
