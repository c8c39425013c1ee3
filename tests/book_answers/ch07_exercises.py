"""Chapter 7's worked problems (Exercises 7.1-7.7) and Appendices A and C, with scalelib.inference.

The exercises use the chapter's invented LLaMA-2-13B-like model with shared embeddings
(``transformer.preset("book-ch7-18b")``) and its 16-expert, top-2 MoE twin
(``"book-ch7-moe"``), int8 weights and caches, on TPU v5e (spec-table bandwidth 8.1e11 B/s).
Appendix A divides by 8.2e11 B/s (``hardware.variant``).
Book slips (held to the recomputed value by the test):
* ch7-ex7.7-2d-crossover-chips: with 1D sharding over three axes costing (4/3) B D / W and 2D
  weight-stationary costing 4 sqrt(2 F / D) B D / (W sqrt(n)) = 11.3 B D / (W sqrt(n)), the two
  cross at n = (11.31 / 1.333)^2 = 72 chips; the printed 81 squares a rounded-up 9.
Exercise 7.5's MoE critical batch takes the entry's rounded dense figure (120 tokens), as the
book does: the v5e's exact 120.12 would give 961, and the entry allows no slack.
No entry of this module is skipped.
"""

from scalelib import collectives as cc
from scalelib import hardware as hw
from scalelib import roofline as rl
from scalelib import transformer as tf
from scalelib import transformer_flops as fl
from scalelib.inference import replica_memory
from scalelib.inference import model_parallel as mp
from scalelib.inference import step_time as st
from scalelib.topology import ring_axis
from tests.book_answers.ch07 import checked_preset

V5E = hw.TPU_V5E
V5E_BOOK = hw.variant(V5E, "hbm_bytes_per_s")  # Appendix A's 8.2e11 B/s


def _weights(cfg: tf.TransformerConfig) -> float:
    return replica_memory.param_bytes(tf.param_counts(cfg).total, "int8")


def _kv_capacity(i: dict, kv_heads: int) -> float:
    # Exercise 7.2: int8 everything on a v5e 4x4, caches fully sharded.
    cfg = tf.preset("book-ch7-18b").replace(n_kv_heads=kv_heads)
    assert i["kv_bytes_per_token"] == replica_memory.kv_bytes_per_token(cfg, "int8")
    free = replica_memory.free_hbm_bytes(replica_memory.Replica(V5E, i["chips"]), _weights(cfg))
    return replica_memory.kv_token_capacity(free, replica_memory.kv_bytes_per_token(cfg, "int8"))


def _crossover(i: dict) -> float:
    assert i["one_d_comms_coeff"] == "4/3" and mp.one_d_ws_comms_coefficient(3) == 4 / 3
    return mp.two_d_ws_crossover_chips(i["F_over_D"], n_axes_1d=3)


REPRODUCERS = {
    "ch7-ex7.1-params": lambda i: tf.param_counts(checked_preset("book-ch7-18b", i)).total,
    "ch7-ex7.1-kv-per-token": lambda i: replica_memory.kv_bytes_per_token(checked_preset("book-ch7-18b", i), i["bytes"]),
    "ch7-ex7.2-kv-token-capacity": lambda i: _kv_capacity(i, kv_heads=8),
    "ch7-ex7.2-kv-token-capacity-k1": lambda i: _kv_capacity(i, kv_heads=1),
    "ch7-ex7.3-param-load-time": lambda i: st.weight_load_s(_weights(tf.preset("book-ch7-18b")),
                                                            replica_memory.Replica(V5E, i["chips"])),
    "ch7-ex7.5-moe-params": lambda i: tf.param_counts(checked_preset("book-ch7-moe", i)).total,
    "ch7-ex7.5-moe-bcrit": lambda i: st.moe_critical_batch(i["bcrit_dense"], i["E"], i["k"]),
    "ch7-ex7.5-moe-kv-per-token": lambda i: replica_memory.kv_bytes_per_token(checked_preset("book-ch7-moe", i), i["bytes"]),
    # a forward pass's FLOPs per token: routed experts only, no attention context (T tokens cost T times this)
    "ch7-ex7.5-moe-flops-per-token": lambda i: fl.forward_flops(checked_preset("book-ch7-moe", i), 1, 0).matmul_flops,
    "ch7-ex7.6-moe-load-time-8x16": lambda i: st.weight_load_s(_weights(tf.preset("book-ch7-moe")),
                                                               replica_memory.Replica(V5E, i["chips"])),
    "ch7-ex7.6-moe-free-hbm": lambda i: replica_memory.free_hbm_per_chip_bytes(replica_memory.Replica(V5E, i["chips"]),
                                                                    _weights(tf.preset("book-ch7-moe"))),
    "ch7-ex7.6-moe-smallest-slice": lambda i: replica_memory.smallest_slice_chips(_weights(tf.preset("book-ch7-moe")), V5E),
    "ch7-ex7.7-2d-comms-coefficient": lambda i: mp.two_d_ws_comms_coefficient(i["F_over_D"]),
    "ch7-ex7.7-2d-crossover-chips": _crossover,
    # Appendix A: a 600M-parameter bf16 layer sharded 4 ways
    "ch7-appA-layer-min-latency": lambda i: st.weight_load_s(replica_memory.param_bytes(i["params"], i["bytes_per_param"]),
                                                             replica_memory.Replica(V5E_BOOK, i["shards"])),
    # Appendix C: 8-way model parallelism on v5e rings
    "ch7-appC-latency-bound-buffer": lambda i: mp.latency_bound_buffer_bytes(ring_axis(V5E, i["shards"])),
    "ch7-appC-activation-bytes": lambda i: rl.array_bytes((i["B"], i["D"]), i["bytes"]),
    "ch7-appC-latency-bound-bytes-per-shard": lambda i: cc.latency_bound_bytes(ring_axis(V5E, 8)),
}
