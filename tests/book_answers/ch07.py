"""Chapter 7 (Transformer inference), sections 7.1-7.4, reproduced with scalelib.inference.

Exercises 7.1-7.7 and the appendices are in ``ch07_exercises.py``. Chip numbers come from
``scalelib.hardware``: section 7 divides by v5e's 8.2e11 B/s (``hardware.variant``) except in
the pop quiz, which uses the spec table's 8.1e11. The LLaMA 2-13B tables take their cache sizes
from the model (6.71e9 / 1.34e9 bytes a sequence) and the book's rounded 13e9 parameters; every
entry stays inside its tolerance that way.
Book slips and notes:
* ch7-l2-13b-train-param-opt-mem (flagged): bf16 weights plus two fp32 Adam moments are 10 bytes a
  parameter, 130 GB for 13e9 parameters; the book says about 100 GB.
* ch7-l2-13b-attn-params: the printed formula multiplies by 80 layers; LLaMA 2-13B has 40, and the
  printed 4.2e9 is the 40-layer count.
* ch7-l2-13b-max-batch-mha: the book calls 8 x 16 GB "128 GiB" and computes with 2^37 bytes; the
  entry's HBM total is used as given (8 x 16e9 bytes would fit 15 sequences, not 16).
* ch7-beta-hbm-over-ici: v5e's own figures give 8.1e11 / 9e10 = 9; the book says "around 8".
Skipped (no model in scalelib can produce them):
* ch7-ici-overlap-latency-hit-bs: "a latency hit above batch 32" is an observation of XLA's
  imperfect overlap, not a consequence of the roofline.
* ch7-spec-sampling-optimal-k-xsum: the best draft length (3) is read off a measured figure from
  the speculative-sampling paper.
"""

import re

from scalelib import hardware as hw
from scalelib import roofline as rl
from scalelib import transformer as tf
from scalelib.inference import replica_memory
from scalelib.inference import model_parallel as mp
from scalelib.inference import serving_rates
from scalelib.inference import step_time as st
from scalelib.parallel import chip_memory

V5E = hw.TPU_V5E
V5E_BOOK = hw.variant(V5E, "hbm_bytes_per_s")  # section 7 divides by 8.2e11 B/s

_LETTERS = {"L": "n_layers", "D": "d_model", "F": "d_ff", "N": "n_heads", "K": "n_kv_heads", "H": "head_dim",
            "V": "vocab_size"}


def checked_preset(name: str, i: dict, **changes) -> tf.TransformerConfig:
    """The preset (with ``changes``), after checking it has the shape the entry states."""
    cfg = tf.preset(name).replace(**changes)
    wrong = {k: (i[k], getattr(cfg, f)) for k, f in _LETTERS.items() if k in i and i[k] != getattr(cfg, f)}
    if wrong:
        raise ValueError(f"preset {name} differs from the entry's inputs (entry, preset): {wrong}")
    return cfg


def _popquiz(i: dict) -> st.DecodeStepTime:
    # 30e9 int8 weights on a v5e 4x4, 100 kB of cache a token, 8192 tokens of context, bf16 FLOPs.
    assert i["hbm_bytes_per_s"] == V5E.hbm_bytes_per_s and i["bf16_flops_per_s"] == V5E.bf16_flops_per_s
    return st.decode_step_time(replica_memory.Replica(V5E, i["chips"]), n_params=i["params"],
                               weight_bytes=replica_memory.param_bytes(i["params"], i["weight_bytes"]),
                               kv_bytes_per_seq=replica_memory.kv_bytes(i["kv_bytes_per_token"], i["context"]), batch=i["batch"])


def _l2_13b(i: dict) -> tf.TransformerConfig:
    kv_heads = int(re.search(r"K=(\d+)", i["kv_variant"]).group(1)) if "kv_variant" in i else i.get("K", 40)
    return checked_preset("llama2-13b", i, n_kv_heads=kv_heads)


def _l2_13b_step(i: dict) -> st.DecodeStepTime:
    # Section 7.1.7: bf16 weights and caches on 8 v5e chips, 8192-token sequences.
    assert i["chips"] == 8 and i["hbm_bytes_per_s"] == V5E_BOOK.hbm_bytes_per_s
    return st.model_decode_step_time(_l2_13b(i), replica_memory.Replica(V5E_BOOK, i["chips"]), i["batch"], i["seq_len"],
                                     weights="bf16", kv="bf16", n_params=i["params"])


def _l2_13b_kv_per_seq(i: dict) -> float:
    return replica_memory.kv_bytes(replica_memory.kv_bytes_per_token(_l2_13b(i), i["bytes"]), i["T"])


def _table_entries() -> dict:
    out = {}
    for variant in ("mha", "gqa"):
        for b in (1, 8, 16, 32, 64, 240):
            out[f"ch7-l2-13b-{variant}-b{b}-step"] = lambda i: _l2_13b_step(i).step_s
            out[f"ch7-l2-13b-{variant}-b{b}-throughput"] = lambda i: _l2_13b_step(i).tokens_per_s
    return out


REPRODUCERS = {
    "ch7-bcrit-bf16-v5e": lambda i: st.decode_critical_batch(V5E_BOOK, weights="bf16", compute="bf16"),
    "ch7-bcrit-int8w-bf16flops": lambda i: st.decode_critical_batch(V5E_BOOK, weights="int8", compute="bf16"),
    "ch7-bcrit-int8-int8": lambda i: st.decode_critical_batch(V5E_BOOK, weights="int8", compute="int8"),
    "ch7-prefill-attn-compute-bound-len": lambda i: st.prefill_attention_compute_bound_len(
        rl.chip_critical_intensity(V5E_BOOK)),
    "ch7-popquiz-kv-per-seq": lambda i: replica_memory.kv_bytes(i["kv_bytes_per_token"], i["context"]),
    "ch7-popquiz-step-b4": lambda i: _popquiz(i).step_s,
    "ch7-popquiz-step-b256": lambda i: _popquiz(i).step_s,
    "ch7-l2-13b-ffw-params": lambda i: tf.param_counts(_l2_13b(i)).mlp,
    "ch7-l2-13b-vocab-params": lambda i: tf.param_counts(_l2_13b(i)).vocab,
    "ch7-l2-13b-attn-params": lambda i: tf.param_counts(_l2_13b(i)).attention,
    "ch7-l2-13b-total-params": lambda i: tf.param_counts(_l2_13b(i)).total,
    "ch7-l2-13b-train-param-opt-mem": lambda i: chip_memory.BOOK_ADAM.memory(i["params"]).total_bytes,
    "ch7-l2-13b-inference-param-mem": lambda i: replica_memory.param_bytes(i["params"], i["bytes_per_param"]),
    "ch7-l2-13b-prefill-activation": lambda i: rl.array_bytes((i["tokens"], i["D"]), i["bytes"]),
    "ch7-l2-13b-kv-per-seq-8k": _l2_13b_kv_per_seq,
    "ch7-l2-13b-gqa-kv-per-seq": _l2_13b_kv_per_seq,
    "ch7-l2-13b-kv-exceeds-params": lambda i: replica_memory.sequences_exceeding(i["param_bytes"], i["kv_per_seq"]),
    "ch7-8xv5e-hbm": lambda i: replica_memory.Replica(V5E, i["chips"]).hbm_bytes,
    "ch7-8xv5e-hbm-bw": lambda i: replica_memory.Replica(V5E_BOOK, i["chips"]).hbm_bytes_per_s,
    "ch7-8xv5e-flops": lambda i: replica_memory.Replica(V5E, i["chips"]).flops_per_s("bf16"),
    **_table_entries(),
    "ch7-l2-13b-max-batch-mha": lambda i: replica_memory.max_batch(
        replica_memory.free_hbm_bytes(i["hbm_total_bytes"], i["param_bytes"]), i["kv_bytes_per_seq"]),
    "ch7-gen-mp-limit-example": lambda i: mp.max_generate_model_ways(i["F"], i["B"], i["beta"]),
    "ch7-beta-hbm-over-ici": lambda i: mp.hbm_over_ici(V5E),
    "ch7-prefix-cache-compute-fraction": lambda i: serving_rates.prefix_cache_compute_fraction(
        prompt_tokens=i["prompt_tokens"], cached_tokens=i["prompt_tokens"] - i["new_tokens"]),
}
