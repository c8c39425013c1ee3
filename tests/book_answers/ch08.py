"""Chapter 8 (serving LLaMA 3-70B on TPU v5e), section 8.1 up to the smallest-slice table.

Reproduced with scalelib.inference; the model is ``transformer.preset("llama3-70b")``, whose
KV cache is 2 x 8 x 128 x 80 = 163,840 bytes a token in int8. Where the book chains its own
rounded figures (70e9 parameters, "160 kB" or "162 kB" a token, 5.3 GB a sequence) the
reproducer takes that input, as the book's next step did. The spec table's v5e bandwidth is
8.1e11 B/s; the section's 8.2e11 is ``hardware.variant``. Throughput, sharding, prefill and the
exercises are in ``ch08_throughput.py``.
Book slips (held to the recomputed value by the test):
* ch8-flops-per-dollar-v5e: 1.97e14 x 3600 / 1.20 = 5.9e17 FLOPs per dollar, not 5.8e17.
* ch8-smallest-topo-int8-remaining-hbm, ch8-smallest-topo-int8-num-kv-caches-8k: 8 x 16 GB - 70 GB
  leaves 58 GB, not 68 GB, which holds 43 caches of 8k tokens (as bf16 on 16 chips does), not 52.
* ch8-smallest-topo-int4-*: int4 weights are 35 GB, not 45 GB: 2.19 chips' worth, 29 GB left on
  a 2x2 (not 19 GB), again 43 caches (not 67).
Noted but inside tolerance: the chips-for-batch-240 estimate needs 85.6 (86 after rounding up);
the book's 4x4 decode step is 17 / 2 = 8.5 ms, the model's 8.6 ms.
No entry of this module is skipped.
"""

from scalelib import hardware as hw
from scalelib import transformer as tf
from scalelib.inference import replica_memory
from scalelib.inference import serving_rates
from scalelib.inference import step_time as st
from tests.book_answers.ch07 import checked_preset

V5E = hw.TPU_V5E
V5E_BOOK = hw.variant(V5E, "hbm_bytes_per_s")  # section 8's 8.2e11 B/s
PARAMS = 70e9  # the book's rounded LLaMA 3-70B count (the preset has 70.55e9)
KV_INT8_ROUNDED = 160e3  # bytes a token: the book's "160 kB" for 163,840 in its batch-32 question


def _l3_70b() -> tf.TransformerConfig:
    return tf.preset("llama3-70b")


def _batch32(chips: int) -> st.DecodeStepTime:
    # Section 8.1: int8 weights and caches, batch 32 of 8192 tokens, bf16 FLOPs, spec-table HBM rate.
    return st.decode_step_time(replica_memory.Replica(V5E, chips), n_params=PARAMS, weight_bytes=replica_memory.param_bytes(PARAMS, "int8"),
                               kv_bytes_per_seq=replica_memory.kv_bytes(KV_INT8_ROUNDED, 8192), batch=32)


def _batch32_memory(i: dict) -> replica_memory.ServingMemory:
    return replica_memory.serving_memory(i["param_bytes"], i["kv_bytes_per_token"], i["seq_len"], i["batch"])


def _smallest_weights(i: dict) -> float:
    # The smallest-slice table: weights alone decide the slice (the caches are taken as small).
    return replica_memory.param_bytes(i["params"], i["dtype"])


def _smallest_free(i: dict) -> float:
    return replica_memory.free_hbm_bytes(replica_memory.Replica(V5E, i["slice_chips"]), _smallest_weights(i))


def _smallest_batch(i: dict) -> int:
    kv_per_seq = replica_memory.kv_bytes(replica_memory.kv_bytes_per_token(checked_preset("llama3-70b", i), i["dtype"]), i["seq_len"])
    return replica_memory.max_batch(_smallest_free(i), kv_per_seq)


def _smallest_entries() -> dict:
    out = {}
    for dtype in ("bf16", "int8", "int4"):
        p = f"ch8-smallest-topo-{dtype}-"
        out[p + "param-bytes"] = _smallest_weights
        out[p + "kv-per-token"] = lambda i: replica_memory.kv_bytes_per_token(checked_preset("llama3-70b", i), i["dtype"])
        out[p + "min-chips-raw"] = lambda i: replica_memory.chips_to_hold(_smallest_weights(i), V5E)
        out[p + "slice-chips"] = lambda i: replica_memory.smallest_slice_chips(_smallest_weights(i), V5E)
        out[p + "remaining-hbm"] = _smallest_free
        out[p + "num-kv-caches-8k"] = _smallest_batch
    return out


REPRODUCERS = {
    "ch8-flops-per-dollar-h100": lambda i: serving_rates.flops_per_usd(hw.H100),
    "ch8-flops-per-dollar-v5p": lambda i: serving_rates.flops_per_usd(hw.TPU_V5P),
    "ch8-flops-per-dollar-v5e": lambda i: serving_rates.flops_per_usd(V5E),
    "ch8-l3-70b-kv-per-token-int8": lambda i: replica_memory.kv_bytes_per_token(checked_preset("llama3-70b", i), i["bytes"]),
    "ch8-l3-70b-kv-per-seq-32k": lambda i: replica_memory.kv_bytes(i["kv_bytes_per_token"], i["seq_len"]),
    "ch8-l3-70b-kv-bs240-32k": lambda i: replica_memory.kv_bytes(replica_memory.kv_bytes_per_token(_l3_70b(), "int8"), 32_768, i["batch"]),
    "ch8-chips-bs240-32k": lambda i: replica_memory.chips_to_hold(
        replica_memory.ServingMemory(i["param_bytes"], i["kv_bytes"]).total_bytes, V5E),
    "ch8-kv-total-bs32-8k": lambda i: _batch32_memory(i).kv_bytes,
    "ch8-total-mem-bs32-8k": lambda i: _batch32_memory(i).total_bytes,
    "ch8-min-slice-bs32-8k": lambda i: replica_memory.smallest_slice_chips(i["total_bytes"], V5E),
    "ch8-decode-step-4x2": lambda i: _batch32(i["chips"]).step_s,
    "ch8-decode-throughput-4x2": lambda i: serving_rates.tokens_per_s(i["batch"], i["step_s"]),
    "ch8-decode-throughput-per-chip-4x2": lambda i: serving_rates.per_chip(i["throughput"], i["chips"]),
    "ch8-decode-step-4x4": lambda i: _batch32(16).step_s,
    "ch8-bcrit-bf16": lambda i: st.decode_critical_batch(V5E_BOOK, weights="bf16", compute="bf16"),
    "ch8-bcrit-int8w-bf16": lambda i: st.decode_critical_batch(V5E_BOOK, weights="int8", compute="bf16"),
    "ch8-bcrit-int8-int8": lambda i: st.decode_critical_batch(V5E_BOOK, weights="int8", compute="int8"),
    **_smallest_entries(),
}
# ch8-ici-bound-Y-2axes (the 4x2's ICI check) is with the other sharding entries in ch08_throughput.py.
