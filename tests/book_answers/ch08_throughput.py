"""Chapter 8 (serving LLaMA 3-70B on TPU v5e): latency, throughput, sharding, prefill, the
latency / throughput figure and Exercises 8.1-8.2, with scalelib.inference.

Step times and query rates chain the book's own rounded inputs (19 ms a step, batches of 43,
52, 67 and 161), as its arithmetic did; the figure's entries rebuild each step from the model
(int8 weights and caches, 16 chips, v5e at the section's 8.2e11 B/s, ``hardware.variant``).
Book slips (held to the recomputed value by the test):
* ch8-qps-per-chip-int8, ch8-qps-per-chip-int4: the arithmetic on the printed batches (52, 67) is
  right; the batches themselves are slips (both are 43, see ch08.py).
* ch8-doubled-remaining-hbm-bf16-4x8: a 4x8 has 32 x 16 GB; minus 140 GB of weights that leaves
  372 GB (the book halves it to 186 GB).
* ch8-doubled-batch: 372 GB holds 138 caches of 8k bf16 tokens, not 161.
* ch8-doubled-qps-per-chip-*: the printed QPS follow from the printed 161.
* ch8-t-math-4x8-bs64: 2 x 64 x 8192 x 28,672 / (32 x 1.97e14) is 4.8 us, printed as 4 us.
Notes inside tolerance:
* ch8-ici-bound-Y-2axes: the book's alpha = 2550 is TPU v5p's C / W_ici (section 5), so the
  reproducer asks v5p; v5e's own 1.97e14 / 9e10 = 2189 would allow 26 ways, not 22.
* ch8-kv-vs-flops-crossover: one sequence's cache takes as long to load as its FLOPs take to
  run at 3.6k tokens of context (int8 cache, bf16 FLOPs); the book says caches dominate "above
  2048", and the entry's tolerance admits both.
* ch8-fig-cost-reduction: the largest batch that fits at 2k context (554) serves a token for
  1/77 of batch 1's chip-time; the book says "roughly 100x".
No entry of this module is skipped.
"""

from scalelib import hardware as hw
from scalelib import roofline as rl
from scalelib import transformer as tf
from scalelib.inference import replica_memory
from scalelib.inference import model_parallel as mp
from scalelib.inference import serving_rates
from scalelib.inference import step_time as st
from scalelib.parallel import thresholds
from tests.book_answers.ch07 import checked_preset

V5E = hw.TPU_V5E
V5E_BOOK = hw.variant(V5E, "hbm_bytes_per_s")  # section 8's 8.2e11 B/s


def _qps(i: dict) -> float:
    return serving_rates.queries_per_s(i["batch"], i["step_s"], i["decode_len"])


def _qps_per_chip(i: dict) -> float:
    return serving_rates.per_chip(_qps(i), i["chips"])


def _figure_step(i: dict, batch: float | None = None) -> st.DecodeStepTime:
    # Section 8.2's figure: int8 weights and caches on 16 v5e chips, bf16 FLOPs.
    replica = replica_memory.Replica(V5E_BOOK, i["chips"])
    return st.decode_step_time(replica, n_params=i["params"], weight_bytes=i["param_bytes"],
                               kv_bytes_per_seq=replica_memory.kv_bytes(i["kv_bytes_per_token"], i["seq_len"]),
                               batch=i["batch"] if batch is None else batch)


def _cost_reduction(i: dict) -> float:
    # chip-time per token at batch 1 over that at the largest batch that fits in HBM
    free = replica_memory.free_hbm_bytes(replica_memory.Replica(V5E, i["chips"]), i["param_bytes"])
    biggest = replica_memory.max_batch(free, replica_memory.kv_bytes(i["kv_bytes_per_token"], i["seq_len"]))
    return _figure_step(i, batch=1).chip_s_per_token / _figure_step(i, batch=biggest).chip_s_per_token


def _matmul_4x8(i: dict) -> mp.GenerateMatmulTime:
    assert (i["ici_bidi_bytes_per_s"], i["hbm_bytes_per_s"]) == (V5E.ici_bidi_bytes_per_s, V5E.hbm_bytes_per_s)
    return mp.generate_matmul_time(i["B"], i["D"], i["F"], i["Y"], V5E, weight_bytes=2, act_bytes=2)


def _qps_entries() -> dict:
    out = {"ch8-qps-coefficient": _qps, "ch8-doubled-qps-coefficient": _qps}
    for dtype in ("bf16", "int8", "int4"):
        out[f"ch8-qps-per-chip-{dtype}"] = _qps_per_chip
    for name in ("bf16-4x8", "int8-4x4", "int4-2x4"):
        out[f"ch8-doubled-qps-per-chip-{name}"] = _qps_per_chip
    return out


REPRODUCERS = {
    "ch8-step-latency-full-hbm": lambda i: st.full_hbm_read_s(replica_memory.Replica(V5E_BOOK, 1)),
    "ch8-decode-time-512-tokens": lambda i: serving_rates.decode_time_s(i["step_s"], i["steps"]),
    "ch8-int4-param-only-latency": lambda i: st.weight_load_s(i["param_bytes"], replica_memory.Replica(V5E_BOOK, i["chips"])),
    **_qps_entries(),
    "ch8-doubled-remaining-hbm-bf16-4x8": lambda i: replica_memory.free_hbm_bytes(replica_memory.Replica(V5E, i["chips"]), i["param_bytes"]),
    "ch8-doubled-batch": lambda i: replica_memory.max_batch(i["remaining_bytes"],
                                                 replica_memory.kv_bytes(i["kv_bytes_per_token"], i["seq_len"])),
    # sharding the generate step
    "ch8-ici-bound-Y-2axes": lambda i: thresholds.tp_max_ways(i["F"], hw.TPU_V5P, n_axes=i["n_axes"]),
    "ch8-mp-limit-bs64": lambda i: mp.max_generate_model_ways(i["F"], i["B"], i["beta"]),
    "ch8-t-ici-4x8-bs64": lambda i: _matmul_4x8(i).ici_s,
    "ch8-t-hbm-4x8-bs64": lambda i: _matmul_4x8(i).hbm_s,
    "ch8-t-math-4x8-bs64": lambda i: _matmul_4x8(i).math_s,
    # prefill and disaggregated serving
    "ch8-prefill-8k-16chips": lambda i: st.prefill_time_s(i["params"], i["tokens"], replica_memory.Replica(V5E, i["chips"]),
                                                          mfu=i["MFU"]),
    "ch8-seqs-finished-per-step": lambda i: serving_rates.sequences_finished_per_step(i["batch"], i["decode_len"]),
    "ch8-tokens-evicted-per-step": lambda i: serving_rates.kv_tokens_evicted_per_step(i["batch"], i["prefill_len"],
                                                                                i["decode_len"]),
    "ch8-prefill-generate-server-ratio": lambda i: serving_rates.prefill_servers_per_generate_server(
        i["prefill_latency_s"], i["decode_step_s"], i["batch"], i["decode_len"]),
    # section 8.2's latency / throughput figure
    "ch8-fig-min-latency": lambda i: _figure_step(i).step_s,
    "ch8-fig-max-latency": lambda i: _figure_step(i).step_s,
    "ch8-fig-throughput-plateau-2k": lambda i: _figure_step(i).tokens_per_s_per_chip,
    "ch8-fig-cost-reduction": _cost_reduction,
    "ch8-kv-vs-flops-crossover": lambda i: st.kv_flops_crossover_seq_len(i["params"], i["kv_bytes_per_token"],
                                                                         V5E_BOOK),
    # Exercises 8.1 and 8.2
    "ch8-ex8.1-l3-405b-fwd-flops-per-token": lambda i: st.dense_forward_flops(
        tf.param_counts(tf.preset("llama3-405b")).total, 1),
    "ch8-ex8.1-flops-bound-time-1chip": lambda i: rl.compute_time_s(i["flops"],
                                                                    replica_memory.Replica(V5E, i["chips"]).flops_per_s("bf16")),
    "ch8-ex8.2-l3-8b-param-bytes-int8": lambda i: replica_memory.param_bytes(
        tf.param_counts(checked_preset("llama3-8b", i)).total, i["bytes"]),
    "ch8-ex8.2-l3-8b-kv-per-token-int8": lambda i: replica_memory.kv_bytes_per_token(checked_preset("llama3-8b", i), i["bytes"]),
    "ch8-ex8.2-l3-8b-kv-bs240-8k": lambda i: replica_memory.kv_bytes(
        replica_memory.kv_bytes_per_token(tf.preset("llama3-8b"), "int8"), i["seq_len"], i["batch"]),
    "ch8-ex8.2-l3-8b-smallest-topology": lambda i: replica_memory.smallest_slice_chips(i["total_bytes"], V5E),
}
