"""Answers that hand the work to scalelib: for every exercise, the library call the test (or the chapter's demo)
uses for the same quantity, wrapped in the function the exercise asks for.

Graded with the library reachable, each of these earns full marks (so each really computes the answer); graded as a
class is, each must earn 0, because the exercise's kernel holds only what its test declares (``ex.allow``).
Names like ``rl`` and ``hw`` are the chapter's own imports, as a student's answer would use them.
"""

from __future__ import annotations

DELEGATIONS: dict[str, dict[str, str]] = {
    "01_rooflines": {
        "ch01-roofline-bounds": """
def roofline_bounds(flops, num_bytes, flops_per_s, bytes_per_s):
    t = rl.roofline_time(flops, num_bytes, flops_per_s, bytes_per_s)
    return t.lower_bound_s, t.upper_bound_s
""",
        "ch01-critical-intensity": """
def critical_intensity_of(chip):
    return rl.chip_critical_intensity(chip)
""",
        "ch01-einsum-intensity": """
def einsum_intensity(spec, sizes, dtype_bytes):
    return rl.einsum_cost(spec, sizes, dtype_bytes).intensity
""",
        "ch01-ex1-1-int8": """
def int8_matmul_roofline(int8_ops_per_s, hbm_bytes_per_s):
    return (rl.critical_intensity(int8_ops_per_s, hbm_bytes_per_s),
            rl.matmul_critical_batch(int8_ops_per_s, hbm_bytes_per_s, weight_bytes=1))
""",
        "ch01-ex1-2-mixed": """
def mixed_critical_batch(bf16_flops_per_s, hbm_bytes_per_s):
    return rl.matmul_critical_batch(bf16_flops_per_s, hbm_bytes_per_s, weight_bytes=1)
""",
        "ch01-ex1-4-per-example": """
def per_example_intensity(B, D, F):
    return rl.einsum_cost("bd,bdf->bf", {"b": B, "d": D, "f": F}, 1).intensity
""",
        "ch01-ex1-5-gpu": """
def gpu_critical_batch(sparse_spec_flops_per_s, hbm_bytes_per_s):
    return rl.matmul_critical_batch(sparse_spec_flops_per_s / 2, hbm_bytes_per_s)
""",
        "ch01-two-chip": """
def two_chip_times(B, D, F, flops_per_s, link_bytes_per_s):
    t = rl.two_chip_contracting_matmul(B, D, F, flops_per_s, link_bytes_per_s)
    return t.compute_s, t.comms_s
""",
        "ch01-fit-roofline": """
def fit_roofline(measurements):
    fit = machine.fit_roofline([machine.Measurement("m", f, b, s) for f, b, s in measurements])
    return fit.flops_per_s, fit.bytes_per_s, fit.ridge_intensity
""",
    },
    "02_tpus": {
        "ch02-mxu-peak": """
import dataclasses

def mxu_peak(mxu_dim, clock_hz, mxus_per_core, cores_per_chip):
    chip = dataclasses.replace(hw.TPU_V5E, mxu_dim=mxu_dim, clock_hz=clock_hz, mxus_per_core=mxus_per_core,
                               cores_per_chip=cores_per_chip)
    return mxu_dim * mxu_dim, hw.mxu_flops_per_s(mxu_dim, clock_hz), hw.chip_flops_from_mxus(chip)
""",
        "ch02-ex2-2-pod": """
def pod_totals(chip):
    return chip.pod_hosts, chip.pod_cores, chip.pod_flops_per_s("bf16"), chip.pod_hbm_bytes
""",
        "ch02-ex2-1-weight-load": """
def weight_load(params, dtype_bytes, chips, hbm_bytes_per_s):
    per_chip = rl.array_bytes((params,), dtype_bytes) / chips
    return per_chip, rl.comms_time_s(per_chip, hbm_bytes_per_s)
""",
        "ch02-ex2-4-int8-matmul": """
def int8_matmul(D, F, ops_per_s, bytes_per_s):
    weights = rl.array_bytes((D, F), 1)
    return (rl.matmul_cost(1, D, F).flops, weights, rl.matmul_cost(1, D, F, 1, 1).bytes - weights,
            rl.matmul_critical_batch(ops_per_s, bytes_per_s, weight_bytes=1, d=D, f=F))
""",
        "ch02-ex2-3-pcie": """
def pcie_critical_batch(flops_per_s, pcie_bytes_per_s):
    return rl.matmul_critical_batch(flops_per_s, pcie_bytes_per_s)
""",
        "ch02-ex2-5-ici-transfer": """
import dataclasses

def ici_transfer(shape, wraps, src, dst, array_shape, dtype_bytes, link_bytes_per_s, hop_latency_s):
    chip = hw.TPU_V5E if len(shape) == 2 else hw.TPU_V5P
    chip = dataclasses.replace(chip, ici_one_way_bytes_per_s=link_bytes_per_s, ici_hop_latency_s=hop_latency_s)
    t = cc.point_to_point(Slice(chip, tuple(shape)), tuple(src), tuple(dst), rl.array_bytes(array_shape, dtype_bytes))
    return t.num_bytes, t.hops, t.bytes_per_s, t.first_byte_s, t.bandwidth_s
""",
        "ch02-ex2-6-end-to-end": """
def end_to_end(chip, shape, n, vec_rows):
    sl = Slice(chip, tuple(shape))
    a_bytes = rl.array_bytes((n, n), 1)
    pcie = rl.comms_time_s(a_bytes / sl.num_hosts, sl.host_pcie_bytes_per_s)
    ici = cc.gather_to_one_s(sl, (0,) * len(shape), a_bytes)
    hbm = rl.comms_time_s(a_bytes, chip.hbm_bytes_per_s)
    flops = rl.compute_time_s(rl.matmul_cost(vec_rows, n, n).flops, chip.bf16_flops_per_s)
    return pcie, ici, hbm, flops, max(pcie, ici, hbm, flops)
""",
        "ch02-systolic-cycles": """
import numpy as np

def systolic_cycles(M, K, N):
    return systolic.simulate(np.ones((M, K)), np.ones((K, N))).total_cycles
""",
        "ch02-mxu-padding": """
def padding_waste(m, k, n, mxu_dim):
    return systolic.mxu_padding(m, k, n, mxu_dim).wasted_fraction
""",
    },
    "03_sharding": {
        "ch03-sharded-bytes": """
def sharded_bytes(global_shape, dim_axes, mesh, dtype_bytes):
    s = shd.Sharding(tuple(f"D{i}" for i in range(len(global_shape))), tuple(tuple(a) for a in dim_axes))
    return s.local_bytes(global_shape, mesh, dtype_bytes), s.total_bytes(global_shape, mesh, dtype_bytes)
""",
        "ch03-ring-allgather": """
def ring_all_gather(x, axis_name):
    return rc.all_gather(x, axis_name, False)
""",
        "ch03-collective-time": """
def collective_time(op, V, axes, one_way_bytes_per_s, hop_latency_s):
    ring = [topology.RingAxis(n, w, one_way_bytes_per_s, 2 * one_way_bytes_per_s, hop_latency_s) for n, w in axes]
    c = cc.collective(op, V, ring)
    return c.bandwidth_s, c.latency_s
""",
        "ch03-ex3-10-link-bytes": """
def busiest_link_bytes(op, n, bidirectional, V):
    return cc.axis_counts(op, n, bidirectional, V).busiest_link_bytes
""",
        "ch03-case3-psum": """
def case3_matmul(a, b, mesh, axis):
    plan = sm.plan_matmul(f"A[I, J_{axis}]", f"B[J_{axis}, K]")
    return sm.run_plan(plan, a, b, mesh)
""",
        "ch03-plan-collectives": """
def plan_comms(a, b, sizes, mesh, w_bidi, dtype_bytes):
    cube = Slice(v5p, (4, 4, 4))
    rings = {"X": cube.axis(0), "Y": cube.axis(1)}
    plan = sm.plan_matmul(a, b)
    cost = sm.plan_cost(plan, sizes, rings, v5p, dtype_bytes=dtype_bytes)
    return [(k, tuple(ax)) for k, ax in plan.collectives], cost.comms_s
""",
        "ch03-ex3-4-strategies": """
import dataclasses

def strategy_times(B, D, F, X, flops_per_s, w_bidi):
    chip = dataclasses.replace(v5p, bf16_flops_per_s=flops_per_s)
    axes = {"X": topology.RingAxis(X, True, w_bidi / 2, w_bidi, v5p.ici_hop_latency_s)}
    c1, c2 = (sm.plan_cost(p, {"B": B, "D": D, "F": F}, axes, chip) for p in (S1, S2))
    return c1.compute_s, c1.comms_s, c2.compute_s, c2.comms_s
""",
        "ch03-ex3-4-thresholds": """
import dataclasses

def strategy_thresholds(flops_per_s, w_bidi, D):
    cost = lambda p, b_=256, d_=8192: sm.plan_cost(p, {"B": b_, "D": d_, "F": 32768},
        {"X": topology.RingAxis(4, True, w_bidi / 2, w_bidi, v5p.ici_hop_latency_s)},
        dataclasses.replace(v5p, bf16_flops_per_s=flops_per_s))
    crit_b = sm.crossover(lambda b_: cost(S1, b_=b_).compute_s - cost(S1, b_=b_).comms_s, 1.0, 1e7)
    max_x = sm.shards_at_balance(cost(S2, d_=D), 4)
    d_thr = sm.crossover(lambda d_: cost(S1, d_=d_).compute_s - cost(S2, d_=d_).comms_s, 1.0, 1e7)
    return crit_b, max_x, d_thr
""",
    },
    "04_transformers": {
        "ch04-train-flops-rule": """
def train_flops_estimate(n_params, n_tokens, remat="none"):
    return fl.six_n_train_flops(n_params, n_tokens, remat)
""",
        "ch04-ex4-2-sharded-flops": """
def sharded_matmul_flops(B, D, F, X, Y, Z):
    return fl.sharded_contraction_flops({"b": B, "d": D, "f": F}, {"b": ("X",), "d": ("Y",)}, {"X": X, "Y": Y, "Z": Z})
""",
        "ch04-count-params": """
def count_params(cfg):
    return tf.param_counts(cfg).total
""",
        "ch04-ex4-1-mha-model": """
def mha_model_summary(D, F, V, L, kv_dtype_bytes):
    cfg = tf.dense_mha_config(d_model=D, n_layers=L, vocab_size=V, d_ff=F, norms_per_layer=1, final_norm=False)
    pc = tf.param_counts(cfg)
    return pc.total, pc.attention_fraction, mem.kv_cache_bytes_per_token(cfg, kv_dtype_bytes)
""",
        "ch04-attention-crossover": """
def attention_crossovers(D, F, N, K, H):
    cfg = tf.TransformerConfig(vocab_size=1000, d_model=D, n_layers=1, n_heads=N, n_kv_heads=K, head_dim=H, d_ff=F)
    return fl.attention_crossover_seq_len(cfg), fl.attention_equals_projection_seq_len(cfg)
""",
        "ch04-ex4-7-mfu": """
def training_run_mfu(sparse_quoted_flops_per_s, gpu_hours, active_params, tokens):
    dense = mem.dense_flops_per_s(sparse_quoted_flops_per_s)
    return (dense, mem.available_flops(gpu_hours, dense), fl.six_n_train_flops(active_params, tokens),
            mem.training_mfu(active_params, tokens, gpu_hours, dense))
""",
        "ch04-ex4-4-attention-intensity": """
def attention_intensity(T, S, G):
    return fl.attention_intensity(T, S, G)

def compute_bound_length(critical_intensity, G):
    return fl.attention_compute_bound_seq_len(critical_intensity, G)
""",
        "ch04-ex4-8-moe-batch": """
def moe_critical_batch(critical_intensity, E, k, weight_bytes):
    return fl.moe_critical_batch_tokens(critical_intensity, E, k, weight_bytes=weight_bytes)
""",
        "ch04-book-activation-estimate": """
def rough_activation_bytes(n_tokens, D, L, policy, dtype_bytes=2):
    return mem.book_activation_bytes(n_tokens, tf.dense_mha_config(D, L, 32_000), policy, dtype_bytes)
""",
        "ch04-remat-saved": """
def saved_per_token_layer(cfg, policy, seq_len):
    kept = mem.saved_activation_elements(cfg, policy, seq_len)
    return len(kept), sum(kept.values())
""",
        "ch04-kv-cache": """
def kv_cache_size(cfg, seq_len, batch, dtype_bytes):
    return mem.kv_cache_bytes_per_token(cfg, dtype_bytes), mem.kv_cache_bytes(cfg, seq_len, batch, dtype_bytes)
""",
        "ch04-predict-flops": """
def predict_forward_flops(cfg, batch, seq_len):
    return fl.forward_flops(cfg, batch * seq_len, seq_len).matmul_flops
""",
        "ch04-online-softmax": """
import functools
import numpy as np

def online_softmax_step(m, l, acc, scores, v_block):
    return tuple(np.asarray(x) for x in kernels.online_softmax_update(kernels.SoftmaxState(m, l, acc), scores, v_block))

def blockwise_attention(q, k, v, block):
    out = kernels.reference_attention(q[None, :, None], k[None, :, None], v[None, :, None], causal=False)
    return np.asarray(out[0, :, 0])
""",
    },
    "05_training": {
        "ch05-dp-grad-reduce": """
def reduce_grads(grads, axis):
    return jax.tree.map(lambda g: compat.all_gather_invariant(g, axis).mean(0), grads)
""",
        "ch05-thresholds": """
import dataclasses

def fsdp_threshold(flops_per_s, ici_bidi_bytes_per_s, n_axes):
    chip = dataclasses.replace(V5P, bf16_flops_per_s=flops_per_s, ici_one_way_bytes_per_s=ici_bidi_bytes_per_s / 2)
    return thresholds.dp_critical_batch_per_chip_tokens(chip, n_axes)

def hbm_threshold(flops_per_s, hbm_bytes_per_s):
    return thresholds.hbm_critical_batch_tokens(dataclasses.replace(V5P, bf16_flops_per_s=flops_per_s,
                                                              hbm_bytes_per_s=hbm_bytes_per_s))
""",
        "ch05-batch-and-chips": """
def max_chips(batch_tokens, per_chip_tokens):
    return planner.max_chips_compute_bound(batch_tokens, per_chip_tokens)

def min_batch(per_chip_tokens, chips):
    return planner.min_global_batch_tokens(per_chip_tokens, chips)
""",
        "ch05-adam-memory": """
import dataclasses

def adam_bytes_per_param(param_bytes, moment_bytes):
    return chip_memory.StateBytes(param_bytes=param_bytes, grad_bytes=0, adam_moment_bytes=moment_bytes).bytes_per_param

def max_params_dp(hbm_bytes, bytes_per_param):
    st = chip_memory.StateBytes(param_bytes=bytes_per_param, grad_bytes=0, adam_moment_bytes=0)
    return chip_memory.max_params_data_parallel(dataclasses.replace(V5P, hbm_bytes=hbm_bytes), st)
""",
        "ch05-fsdp-collectives": """
import jax.numpy as jnp
from scalelib import ring_collectives

def gather_weight(w_shard, axis, dim):
    return jnp.moveaxis(ring_collectives.all_gather(jnp.moveaxis(w_shard, dim, 0), axis), 0, dim)

def scatter_grad(g, axis, dim):
    return lax.psum_scatter(g, axis, scatter_dimension=dim, tiled=True)
""",
        "ch05-megatron-mlp": """
def megatron_mlp(x, w_in, w_out, axis):
    return compat.all_gather_invariant(jax.nn.gelu(x @ w_in) @ w_out, axis).sum(0)
""",
        "ch05-tp-limits": """
import dataclasses

def tp_limits(d_ff, ways, ops_per_s, ici_bidi_bytes_per_s, n_axes):
    chip = dataclasses.replace(V5P, bf16_flops_per_s=ops_per_s, ici_one_way_bytes_per_s=ici_bidi_bytes_per_s / 2)
    return thresholds.ici_intensity(chip), thresholds.tp_max_ways(d_ff, chip, n_axes), thresholds.tp_min_d_ff(ways, chip, n_axes)
""",
        "ch05-fsdp-tp-split": """
import dataclasses

def optimal_fsdp(batch_tokens, d_ff, chips, m_x, m_y):
    return thresholds.optimal_fsdp_ways(batch_tokens, d_ff, chips, m_x, m_y)

def mixed_min_batch_per_chip(d_ff, alpha, m_x, m_y):
    chip = dataclasses.replace(V5P, ici_one_way_bytes_per_s=V5P.bf16_flops_per_s / alpha / 2)
    return thresholds.mixed_critical_batch_per_chip_tokens(d_ff, chip, m_x, m_y)
""",
        "ch05-gpipe-schedule": """
def gpipe_schedule(n_stages, n_microbatches):
    return [(o.time, o.stage, o.op, o.microbatch) for o in pp.schedule("gpipe", n_stages, n_microbatches).table]
""",
        "ch05-dcn": """
import dataclasses

def dcn_budget(chips, chips_per_host, dcn_bytes_per_s_per_host, flops_per_s_per_chip):
    chip = dataclasses.replace(V5P, bf16_flops_per_s=flops_per_s_per_chip, host_shape=(chips_per_host, 1, 1),
                               dcn_bytes_per_s_per_host=dcn_bytes_per_s_per_host)
    b = thresholds.dcn_budget(chip, chips)
    return b.hosts, b.dcn_bytes_per_s, b.flops_per_s, b.critical_batch_tokens
""",
        "ch05-training-days": """
import dataclasses

def run_days(n_params, tokens, pods, chips_per_pod, flops_per_s, mfu):
    chip = dataclasses.replace(V5P, bf16_flops_per_s=flops_per_s)
    f = planner.training_flops(n_params, tokens)
    chips = planner.total_chips(chip, chips_per_pod, slices=pods)
    return f, chips, planner.training_time_s(f, chips, chip, mfu) / planner.SECONDS_PER_DAY
""",
        "ch05-ex5-1-params": """
def dense_param_counts(L, D, F, N, H, V):
    pc = tf.param_counts(cfg13.replace(n_layers=L, d_model=D, d_ff=F, n_heads=N, n_kv_heads=N, head_dim=H,
                                       vocab_size=V, name="mine"))
    return pc.mlp, pc.attention, pc.vocab, pc.total
""",
        "ch05-ex5-2-memory": """
def step_memory(n_params, bytes_per_param, L, tokens, D, F, dtype_bytes=2):
    cfg = cfg13.replace(n_layers=L, d_model=D, d_ff=F)
    m = chip_memory.training_memory(cfg, tokens, 4096, remat="mlp_outputs", state=chip_memory.BOOK_ADAM, n_params=n_params)
    return m.state_bytes, m.activations_bytes, m.total_bytes
""",
        "ch05-ex5-3-slice": """
import dataclasses

def slice_budget(batch_tokens, seq_len, chips, hbm_bytes_per_chip):
    return (planner.sequences_per_batch(batch_tokens, seq_len),
            planner.total_hbm_bytes(dataclasses.replace(V5P, hbm_bytes=hbm_bytes_per_chip), chips))
""",
    },
    "06_training_llama3": {
        "ch06-param-count": """
def llama_param_counts(L, D, F, N, K, H, V):
    pc = tf.param_counts(tf.TransformerConfig(vocab_size=V, d_model=D, n_layers=L, n_heads=N, n_kv_heads=K,
                                              head_dim=H, d_ff=F))
    return pc.mlp, pc.vocab, pc.attention, pc.total
""",
        "ch06-train-flops": """
def train_flops(n_params, tokens):
    return fl.six_n_train_flops(n_params, 1), planner.training_flops(n_params, tokens)
""",
        "ch06-train-time": """
import dataclasses

def chips_in(shape, pods=1):
    return planner.total_chips(V5P, Slice(V5P, tuple(shape)), slices=pods)

def training_seconds(total_flops, chips, flops_per_s, mfu):
    return planner.training_time_s(total_flops, chips, dataclasses.replace(V5P, bf16_flops_per_s=flops_per_s), mfu)
""",
        "ch06-train-memory": """
def training_bytes(n_params, D, L, batch_tokens, ckpts_per_layer):
    m = chip_memory.training_memory(cfg70.replace(d_model=D, n_layers=L), batch_tokens, SEQ, remat=ckpts_per_layer,
                               n_params=n_params)
    return m.params_bytes, m.optimizer_bytes, m.activations_bytes, m.total_bytes
""",
        "ch06-chips-for-memory": """
import dataclasses

def memory_chips(total_bytes, hbm_bytes_per_chip, chips):
    fewest = chip_memory.min_chips_for_memory(total_bytes, dataclasses.replace(V5P, hbm_bytes=hbm_bytes_per_chip))
    return fewest, total_bytes / chips
""",
        "ch06-fsdp-alone": """
import dataclasses

def fsdp_alone(batch_tokens, seq_len, chips, flops_per_s, ici_bidi_bytes_per_s, n_axes):
    chip = dataclasses.replace(V5P, bf16_flops_per_s=flops_per_s, ici_one_way_bytes_per_s=ici_bidi_bytes_per_s / 2)
    return (planner.sequences_per_batch(batch_tokens, seq_len), batch_tokens / chips,
            thresholds.dp_critical_batch_per_chip_tokens(chip, n_axes))
""",
        "ch06-mixed-split": """
import dataclasses

def mixed_split(B, F, N, flops_per_s, ici_bidi_bytes_per_s):
    chip = dataclasses.replace(V5P, bf16_flops_per_s=flops_per_s, ici_one_way_bytes_per_s=ici_bidi_bytes_per_s / 2)
    roots = thresholds.mixed_fsdp_ways_range(B, F, N, chip)
    return thresholds.mixed_critical_batch_per_chip_tokens(F, chip), None if roots is None else roots[1]
""",
        "ch06-choose-sharding": """
def choose_fsdp_tp(chip, n_chips, global_batch_tokens, cfg):
    lay = planner.plan_training(cfg, chip, n_chips, global_batch_tokens, SEQ, mfu=MFU).scheme("fsdp_tp").layout
    return lay.data_ways, lay.model_ways
""",
        "ch06-ex6-1-dcn": """
import dataclasses

def dcn_check(batch_tokens, pods, pod_chips, flops_per_s, chips_per_host, dcn_bytes_per_s_per_host):
    chip = dataclasses.replace(V5P, bf16_flops_per_s=flops_per_s, host_shape=(chips_per_host, 1, 1),
                               dcn_bytes_per_s_per_host=dcn_bytes_per_s_per_host)
    return batch_tokens / pods, thresholds.dcn_budget(chip, pod_chips).critical_batch_tokens
""",
    },
    "07_inference": {
        "ch07-kv-cache": """
def kv_cache_bytes(L, K, H, value_bytes, seq_len, batch):
    cfg = tf.TransformerConfig(vocab_size=1000, d_model=512, n_layers=L, n_heads=K, n_kv_heads=K, head_dim=H, d_ff=1024)
    per_token = replica_memory.kv_bytes_per_token(cfg, value_bytes)
    return per_token, replica_memory.kv_bytes(per_token, seq_len, batch)

def sequences_outweighing(weight_bytes, kv_bytes_per_seq):
    return replica_memory.sequences_exceeding(weight_bytes, kv_bytes_per_seq)
""",
        "ch07-ex7-1-params": """
def chapter_model_params(L, D, F, N, K, H, V, E=0):
    cfg = tf.TransformerConfig(vocab_size=V, d_model=D, n_layers=L, n_heads=N, n_kv_heads=K, head_dim=H, d_ff=F,
                               tied_embeddings=True, n_experts=E, experts_per_token=min(2, E))
    return tf.param_counts(cfg).total
""",
        "ch07-critical-batch": """
import dataclasses

def generate_critical_batch(flops_per_s, hbm_bytes_per_s, weight_bytes, n_experts=1, experts_per_token=1):
    chip = dataclasses.replace(V5E, bf16_flops_per_s=flops_per_s, hbm_bytes_per_s=hbm_bytes_per_s)
    return st.moe_critical_batch(st.decode_critical_batch(chip, weight_bytes, "bf16"), n_experts, experts_per_token)
""",
        "ch07-step-time": """
import dataclasses

def generate_step(n_params, weight_bytes, kv_bytes_per_seq, batch, chips, flops_per_s, hbm_bytes_per_s):
    chip = dataclasses.replace(V5E, bf16_flops_per_s=flops_per_s, hbm_bytes_per_s=hbm_bytes_per_s)
    t = st.decode_step_time(replica_memory.Replica(chip, chips), n_params=n_params, weight_bytes=weight_bytes,
                            kv_bytes_per_seq=kv_bytes_per_seq, batch=batch)
    return t.step_s, t.tokens_per_s
""",
        "ch07-ex7-2-capacity": """
def kv_room(hbm_bytes, weight_bytes, kv_bytes_per_token, seq_len):
    free = replica_memory.free_hbm_bytes(hbm_bytes, weight_bytes)
    return (free, replica_memory.kv_token_capacity(free, kv_bytes_per_token),
            replica_memory.max_batch(free, replica_memory.kv_bytes(kv_bytes_per_token, seq_len)))
""",
        "ch07-slice": """
import dataclasses

def serving_slice(weight_bytes, chips, hbm_bytes_per_chip, hbm_bytes_per_s):
    chip = dataclasses.replace(V5E, hbm_bytes=hbm_bytes_per_chip, hbm_bytes_per_s=hbm_bytes_per_s)
    rep = replica_memory.Replica(chip, chips)
    return (replica_memory.chips_to_hold(weight_bytes, chip), replica_memory.smallest_slice_chips(weight_bytes, chip),
            st.weight_load_s(weight_bytes, rep), replica_memory.free_hbm_per_chip_bytes(rep, weight_bytes))
""",
        "ch07-model-parallel": """
import dataclasses

def hbm_over_ici(hbm_bytes_per_s, ici_bidi_bytes_per_s):
    return mp.hbm_over_ici(dataclasses.replace(V5E, hbm_bytes_per_s=hbm_bytes_per_s,
                                               ici_one_way_bytes_per_s=ici_bidi_bytes_per_s / 2))

def max_model_ways(d_ff, batch, beta):
    return mp.max_generate_model_ways(d_ff, batch, beta)

def latency_bound_ways(batch, d_model, act_bytes, ici_one_way_bytes_per_s, hop_latency_s):
    chip = dataclasses.replace(V5E, ici_one_way_bytes_per_s=ici_one_way_bytes_per_s, ici_hop_latency_s=hop_latency_s)
    return mp.min_latency_bound_ways(batch, d_model, chip, act_bytes)
""",
        "ch07-ex7-7-2d": """
def two_d_weight_stationary(f_over_d, chips, n_axes_1d):
    return (mp.two_d_ws_optimal_x(chips, f_over_d), mp.two_d_ws_comms_coefficient(f_over_d),
            mp.two_d_ws_crossover_chips(f_over_d, n_axes_1d))
""",
        "ch07-prefill-ratio": """
import dataclasses

def prefill_and_ratio(n_params, prompt_tokens, prefill_chips, flops_per_s, mfu, step_s, batch, decode_tokens):
    chip = dataclasses.replace(V5E, bf16_flops_per_s=flops_per_s)
    p_s = st.prefill_time_s(n_params, prompt_tokens, replica_memory.Replica(chip, prefill_chips), mfu)
    return (p_s, serving_rates.queries_per_s(batch, step_s, decode_tokens),
            serving_rates.prefill_servers_per_generate_server(p_s, step_s, batch, decode_tokens))
""",
        "ch07-kv-transfer": """
import dataclasses

def kv_transfer(kv_bytes, sender_chips, receiver_chips, chips_per_host, dcn_bytes_per_s_per_host, prefill_s):
    chip = dataclasses.replace(V5E, host_shape=(chips_per_host, 1), dcn_bytes_per_s_per_host=dcn_bytes_per_s_per_host)
    a, b = replica_memory.Replica(chip, sender_chips), replica_memory.Replica(chip, receiver_chips)
    return serving_rates.kv_transfer_s(kv_bytes, a, b), serving_rates.kv_transfer_share(kv_bytes, a, b, prefill_s)
""",
        "ch07-cached-attention": """
def cached_attention_step(q, k_new, v_new, k_cache, v_cache, length):
    k_cache = jax.lax.dynamic_update_slice(k_cache, k_new[:, :, None, :], (0, 0, length, 0))
    v_cache = jax.lax.dynamic_update_slice(v_cache, v_new[:, :, None, :], (0, 0, length, 0))
    out = decode.cached_attention(q[:, None], k_cache, v_cache, jnp.reshape(length, (1,)))
    return out[:, 0], k_cache, v_cache
""",
        "ch07-lfu-order": """
def lfu_order(kept, hits, released):
    # the library's own LFU, fed the same events
    policy = serving.eviction.make_policy("lfu", max(kept) + 1)
    for b in kept:
        policy.cached(b)
        for _ in range(hits[b]):
            policy.hit(b)
    for b in sorted(kept, key=lambda b: released[b]):
        policy.released(b)
    return policy.order(list(kept))
""",
        "ch07-block-allocator": """
def _as_pool(state):
    # the same pool as a serving.block_pool.BlockPool: take every block, then give the free ones back in their order
    pool = serving.block_pool.BlockPool(len(state["refcount"]), 1)
    pool.allocate(pool.num_blocks)
    for b in state["free"]:
        pool.release(b, keep=True)
    for b, count in enumerate(state["refcount"]):
        for _ in range(count - 1):
            pool.share(b)
    return pool

def _as_state(pool):
    return {"free": pool.free_order, "refcount": list(pool.refcount)}

def pool_allocate(state, n):
    pool = _as_pool(state)
    if n > pool.num_free:
        return state, None
    blocks = pool.allocate(n)
    return _as_state(pool), blocks

def pool_share(state, blocks):
    pool = _as_pool(state)
    for b in blocks:
        pool.share(b)
    return _as_state(pool)

def pool_release(state, blocks):
    pool = _as_pool(state)
    for b in blocks:
        pool.release(b, keep=True)
    return _as_state(pool)
""",
        "ch07-schedule-step": """
def schedule_step(running, waiting, token_budget, max_running, free_blocks, block_size):
    plan = serving.scheduler.plan_step([serving.scheduler.SeqView(*s) for s in running],
                                   [serving.scheduler.SeqView(i, 0, total, 0) for i, total in waiting],
                                   token_budget=token_budget, max_running=max_running, free_blocks=free_blocks,
                                   block_size=block_size)
    return [[int(i), int(n)] for i, n in plan.scheduled], [int(i) for i in plan.preempted]
""",
        "ch07-spec-accept": """
def speculative_accept(p, q, draft, u, v):
    n_acc, nxt = serving.speculative.verify(np.asarray(p), np.asarray(q), np.asarray(draft), np.asarray(u), v)
    return int(n_acc), int(nxt)
""",
    },
    "08_serving_llama3": {
        "ch08-flops-per-dollar": """
import dataclasses

def flops_per_dollar(flops_per_s, usd_per_hour):
    return serving_rates.flops_per_usd(dataclasses.replace(V5E, bf16_flops_per_s=flops_per_s, usd_per_hour=usd_per_hour))
""",
        "ch08-smallest-slice": """
import dataclasses

def smallest_slice_row(n_params, value_bytes, L, K, H, seq_len, hbm_bytes_per_chip):
    chip = dataclasses.replace(V5E, hbm_bytes=hbm_bytes_per_chip)
    cfg = cfg70.replace(n_layers=L, n_heads=K, n_kv_heads=K, head_dim=H)
    w = replica_memory.param_bytes(n_params, value_bytes)
    per_token = replica_memory.kv_bytes_per_token(cfg, value_bytes)
    n = replica_memory.smallest_slice_chips(w, chip)
    free = replica_memory.free_hbm_bytes(replica_memory.Replica(chip, n), w)
    return w, per_token, replica_memory.chips_to_hold(w, chip), n, free, replica_memory.max_batch(free, replica_memory.kv_bytes(per_token, seq_len))
""",
        "ch08-full-batch-qps": """
import dataclasses

def full_batch_qps(chips, hbm_bytes_per_chip, hbm_bytes_per_s, flops_per_s, n_params, weight_bytes,
                   kv_bytes_per_seq, decode_tokens):
    chip = dataclasses.replace(V5E, hbm_bytes=hbm_bytes_per_chip, hbm_bytes_per_s=hbm_bytes_per_s,
                               bf16_flops_per_s=flops_per_s)
    rep = replica_memory.Replica(chip, chips)
    batch = replica_memory.max_batch(replica_memory.free_hbm_bytes(rep, weight_bytes), kv_bytes_per_seq)
    s = st.decode_step_time(rep, n_params=n_params, weight_bytes=weight_bytes, kv_bytes_per_seq=kv_bytes_per_seq,
                            batch=batch)
    return batch, s.step_s, serving_rates.per_chip(serving_rates.queries_per_s(batch, s.step_s, decode_tokens), chips)
""",
        "ch08-latency-curve": """
import dataclasses
import numpy as np

def latency_curve(batches, chips, n_params, weight_bytes, kv_bytes_per_seq, flops_per_s, hbm_bytes_per_s):
    chip = dataclasses.replace(V5E, hbm_bytes_per_s=hbm_bytes_per_s, bf16_flops_per_s=flops_per_s)
    steps = [st.decode_step_time(replica_memory.Replica(chip, chips), n_params=n_params, weight_bytes=weight_bytes,
                                 kv_bytes_per_seq=kv_bytes_per_seq, batch=float(b)) for b in batches]
    return np.array([s.step_s for s in steps]), np.array([s.tokens_per_s_per_chip for s in steps])
""",
        "ch08-thresholds": """
import dataclasses

def serving_thresholds(n_params, weight_value_bytes, kv_bytes_per_token, flops_per_s, hbm_bytes_per_s):
    chip = dataclasses.replace(V5E, hbm_bytes_per_s=hbm_bytes_per_s, bf16_flops_per_s=flops_per_s)
    return (st.decode_critical_batch(chip, weight_value_bytes, "bf16"),
            st.kv_flops_crossover_seq_len(n_params, kv_bytes_per_token, chip))
""",
        "ch08-sharded-matmul": """
import dataclasses

def sharded_matmul_times(B, D, F, Y, weight_bytes, act_bytes, flops_per_s, hbm_bytes_per_s, ici_bidi_bytes_per_s):
    chip = dataclasses.replace(V5E, hbm_bytes_per_s=hbm_bytes_per_s, bf16_flops_per_s=flops_per_s,
                               ici_one_way_bytes_per_s=ici_bidi_bytes_per_s / 2)
    t = mp.generate_matmul_time(B, D, F, Y, chip, weight_bytes=weight_bytes, act_bytes=act_bytes)
    return t.ici_s, t.hbm_s, t.math_s, t.bound
""",
        "ch08-prefill-evictions": """
import dataclasses

def prefill_plan(n_params, prompt_tokens, answer_tokens, batch, step_s, prefill_chips, flops_per_s, mfu):
    chip = dataclasses.replace(V5E, bf16_flops_per_s=flops_per_s)
    p = st.prefill_time_s(n_params, prompt_tokens, replica_memory.Replica(chip, prefill_chips), mfu=mfu)
    return (p, serving_rates.sequences_finished_per_step(batch, answer_tokens),
            serving_rates.kv_tokens_evicted_per_step(batch, prompt_tokens, answer_tokens),
            serving_rates.prefill_servers_per_generate_server(p, step_s, batch, answer_tokens))
""",
        "ch08-ex8-1-bounds": """
import dataclasses

def forward_bounds(n_params, chips, flops_per_s, hbm_bytes_per_s, weight_value_bytes):
    rep = replica_memory.Replica(dataclasses.replace(V5E, bf16_flops_per_s=flops_per_s, hbm_bytes_per_s=hbm_bytes_per_s), chips)
    f = st.dense_forward_flops(n_params, 1)
    return f, rl.compute_time_s(f, rep.flops_per_s()), st.weight_load_s(replica_memory.param_bytes(n_params, weight_value_bytes), rep)
""",
        "ch08-ex8-2-small-model": """
import dataclasses

def serving_footprint(n_params, L, K, H, value_bytes, batch, seq_len, hbm_bytes_per_chip):
    cfg = cfg8.replace(n_layers=L, n_heads=K, n_kv_heads=K, head_dim=H)
    m = replica_memory.serving_memory(replica_memory.param_bytes(n_params, value_bytes), replica_memory.kv_bytes_per_token(cfg, value_bytes), seq_len, batch)
    return m.weight_bytes, m.kv_bytes, replica_memory.smallest_slice_chips(m.total_bytes, dataclasses.replace(V5E, hbm_bytes=hbm_bytes_per_chip))
""",
        "ch08-ex8-3-plan": """
import dataclasses

def plan_serving(n_params, weight_bytes, kv_bytes_per_seq, hbm_bytes_per_chip, hbm_bytes_per_s, flops_per_s,
                 max_step_s, max_chips):
    chip = dataclasses.replace(V5E, hbm_bytes=hbm_bytes_per_chip, hbm_bytes_per_s=hbm_bytes_per_s,
                               bf16_flops_per_s=flops_per_s)
    plan = planning.best_serving_plan(chip, n_params=n_params, weight_bytes=weight_bytes,
                                      kv_bytes_per_seq=kv_bytes_per_seq, max_step_s=max_step_s, max_chips=max_chips)
    return None if plan is None else (plan.chips, plan.batch)
""",
    },
    "09_profiling": {
        "ch09-padding": """
def padding_factor(shape, tile):
    return prof.padding_ratio(shape, tile)
""",
        "ch09-tiled-offset": """
def element_offset(index, shape, tiles):
    return int(prof.tiled_offsets(tuple(shape), [tuple(t) for t in tiles])[tuple(index)])
""",
        "ch09-layout-bytes": """
def layout_bytes(type_text):
    lay = prof.parse_layout(type_text)
    return tuple(lay.physical_shape), lay.bytes, lay.padded_bytes, lay.memory
""",
        "ch09-hlo-collectives": """
import re

def collectives_in(hlo_text):
    groups = re.findall(r"replica_groups=\\{\\{([\\d,]+)\\}", hlo_text)
    n = max([len(g.split(",")) for g in groups] + [1])
    return [(c.kind, c.result_bytes) for c in hlo.collective_ops(hlo_text, {"all": n})]
""",
        "ch09-einsum-estimate": """
def einsum_estimate(lhs, rhs, sizes, mesh, flops_per_s):
    est = prof.sharded_einsum_time(lhs, rhs, sizes, mesh, flops_per_s)
    return tuple(est.lhs_local_shape), est.flops_per_device, est.time_s
""",
        "ch09-reduce-scatter": """
def down_projection(B, T, D, F, X, Y, dtype_bytes, flops_per_s, ici_bidi_bytes_per_s):
    bidi = ici_bidi_bytes_per_s
    axes = {"X": RingAxis(X, True, bidi / 2, bidi, 0.0), "Y": RingAxis(Y, True, bidi / 2, bidi, 0.0)}
    est = prof.sharded_einsum_time("Tmp[B_X, T, F_Y]", "Wout[F_Y, D]", {"B": B, "T": T, "D": D, "F": F}, axes,
                                   flops_per_s, out="Out[B_X, T, D_Y]", dtype_bytes=dtype_bytes)
    (step,) = est.cost.steps
    return est.compute_s, step.array_bytes, step.time_s, est.time_s
""",
        "ch09-dominant-op": """
def dominant_op(ops):
    top = tr_mod.op_stats(tr_mod.Trace("records", "cpu", tuple(ops)))[0]
    return top.name, top.share
""",
        "ch09-exposed-comms": """
def exposed_fraction(ops, device):
    trace = tr_mod.Trace("records", "cpu", tuple(ops))
    return next(c for c in tr_mod.comm_overlap(trace, step=ops[0].step) if c.device == device).exposed_fraction
""",
        "ch09-roofline-gap": """
def roofline_gap(ops, name, flops_per_s, bytes_per_s):
    trace = tr_mod.Trace("records", "cpu", tuple(ops), matched=len(ops))
    p = next(p for p in tr_mod.predicted_vs_measured(trace, machine.MeasuredRoofline(flops_per_s, bytes_per_s))
             if p.name == name)
    return p.measured_s, p.predicted_s, p.ratio
""",
    },
    "10_jax": {
        "ch10-local-shape": """
def local_shape(global_shape, mesh_shape, spec):
    s = shd.Sharding.from_spec(spec, [f"D{i}" for i in range(len(global_shape))])
    return tuple(s.local_shape(global_shape, mesh_shape))
""",
        "ch10-slice-mean": """
def slice_mean(n, devices, k):
    mesh_ = compat.make_mesh((2, devices // 2), ("x", "y"), devices=jax.devices()[:devices])
    body = lambda blk: jax.lax.pmean(blk[:k], ("x", "y"))
    fn = jax.jit(compat.shard_map(body, mesh=mesh_, in_specs=P(("x", "y")), out_specs=P()))
    return [float(v) for v in fn(jax.device_put(jnp.arange(n, dtype=jnp.int32), NamedSharding(mesh_, P(("x", "y")))))]
""",
        "ch10-allgather-matmul": """
def allgather_collective_matmul(a_block, w_block, axis):
    return cm.allgather_matmul(a_block, w_block, axis)
""",
        "ch10-reduce-scatter-matmul": """
def reduce_scatter_collective_matmul(t_block, w_block, axis):
    return cm.matmul_reduce_scatter(t_block, w_block, axis)
""",
        "ch10-overlap-time": """
import dataclasses

def ring_matmul_times(kind, batch, k, n_out, axis_size, batch_shards, flops_per_s, link_bytes_per_s, dtype_bytes):
    chip = dataclasses.replace(hw.TPU_V5E, bf16_flops_per_s=flops_per_s, ici_one_way_bytes_per_s=link_bytes_per_s)
    c = cm.collective_matmul_cost(kind, batch, k, n_out, axis_size, chip, batch_shards=batch_shards,
                                  bidirectional=False, dtype_bytes=dtype_bytes)
    return c.overlapped_s, c.serial_s, c.hidden
""",
        "ch10-hiding-width": """
import dataclasses

def min_hiding_dim(flops_per_s, link_bytes_per_s, dtype_bytes, axis_size):
    chip = dataclasses.replace(hw.TPU_V5E, bf16_flops_per_s=flops_per_s, ici_one_way_bytes_per_s=link_bytes_per_s)
    return axis_size * cm.hiding_width(chip, dtype_bytes=dtype_bytes)
""",
    },
    "11_gpus": {
        "ch11-q1-1-alus": """
def alu_counts(sms, subpartitions, cores_per_subpartition, tpu_tensorcores, sublanes, lanes, alus_per_lane):
    gpu = dataclasses.replace(gs.H100, sms=sms, subpartitions_per_sm=subpartitions,
                              fp32_cores_per_subpartition=cores_per_subpartition)
    tpu = tpu_tensorcores * hw.vpu_alus(alus_per_lane)
    return gpu.cuda_cores, tpu, tpu / gpu.cuda_cores
""",
        "ch11-q1-2-vector-flops": """
def vector_vs_tensor(sms, subpartitions, cores_per_subpartition, clock_hz, tc_flops_per_s):
    gpu = dataclasses.replace(gs.H100, sms=sms, subpartitions_per_sm=subpartitions,
                              fp32_cores_per_subpartition=cores_per_subpartition)
    return gpu.vector_flops_per_s(clock_hz), tc_flops_per_s / gpu.vector_flops_per_s(clock_hz)
""",
        "ch11-q1-3-intensity": """
def critical_intensities(bf16_flops_per_s, fp8_flops_per_s, hbm_bytes_per_s):
    chip = dataclasses.replace(hw.H100, bf16_flops_per_s=bf16_flops_per_s, hbm_bytes_per_s=hbm_bytes_per_s)
    gpu = dataclasses.replace(gs.H100, chip=chip, fp8_flops_per_s=fp8_flops_per_s)
    return gpu.critical_intensity("bf16"), gpu.critical_intensity("fp8")
""",
        "ch11-q1-4-matmul-time": """
def matmul_time_s(batch, d, f, flops_per_s, hbm_bytes_per_s):
    cost = rl.matmul_cost(batch, d, f)
    t = rl.roofline_time(cost.flops, cost.bytes, flops_per_s, hbm_bytes_per_s)
    return t.lower_bound_s, t.bound == "compute"
""",
        "ch11-q1-5-on-chip": """
def on_chip_bytes(sms, smem_per_sm_bytes, subpartitions, registers_per_subpartition):
    gpu = dataclasses.replace(gs.H100, sms=sms, smem_per_sm_bytes=smem_per_sm_bytes, subpartitions_per_sm=subpartitions,
                              register_file_per_sm_bytes=subpartitions * registers_per_subpartition * gs.REGISTER_BYTES)
    return gpu.smem_bytes, gpu.register_bytes
""",
        "ch11-q1-6-clock": """
def clock_from_fma_flops(fma_flops_per_s, sms, subpartitions, cores_per_subpartition):
    gpu = dataclasses.replace(gs.B200, sms=sms, subpartitions_per_sm=subpartitions,
                              fp32_cores_per_subpartition=cores_per_subpartition)
    return gpu.clock_from_vector_flops(fma_flops_per_s)
""",
        "ch11-q1-7-vector-add": """
def vector_add(n, hbm_bytes_per_s, clock_hz, sms, subpartitions, cores_per_subpartition):
    gpu = dataclasses.replace(gs.H100, sms=sms, subpartitions_per_sm=subpartitions,
                              fp32_cores_per_subpartition=cores_per_subpartition)
    used = gpu.sms_used(n)
    t_mem = rl.comms_time_s(rl.einsum_cost("n,n->n", {"n": n}, 4).bytes, hbm_bytes_per_s)
    return t_mem, n / dataclasses.replace(gpu, sms=used).vector_flops_per_s(clock_hz), used
""",
        "ch11-q2-1-node-bw": """
def node_bandwidth(gpus, links_per_gpu, link_bytes_per_s, switches, switch_ports):
    nvlink = gs.NvlinkGeneration("x", "x", "x", link_bytes_per_s, links_per_gpu, (gpus,), (switches,))
    node = fb.Node(dataclasses.replace(gs.H100, nvlink=nvlink), gpus=gpus, nvswitches=switches,
                   nvswitch_ports=switch_ports, nics=1)
    return node.switches_bytes_per_s, node.gpus_bytes_per_s, node.total_bytes_per_s
""",
        "ch11-q2-2-bisection": """
def bisection_bytes_per_s(gpus, gpu_egress_bytes_per_s):
    nvlink = gs.NvlinkGeneration("x", "x", "x", gpu_egress_bytes_per_s, 1, (gpus,), (1,))
    return fb.Node(dataclasses.replace(gs.H100, nvlink=nvlink), gpus=gpus, nvswitches=1, nvswitch_ports=64,
                   nics=1).bisection_bytes_per_s()
""",
        "ch11-q2-3-all-gather": """
def node_all_gather(num_bytes, gpus, gpu_egress_bytes_per_s):
    return (cc.ring_all_gather_s(num_bytes, gpus, gpu_egress_bytes_per_s),
            cc.ring_all_gather_s(num_bytes, gpus, gpu_egress_bytes_per_s, exact=False))
""",
        "ch11-q3-1-fat-tree": """
def fat_tree_per_node(nodes_per_su, sus, nics_per_node, link_bytes_per_s, leaves_per_su, spines,
                      cables_per_leaf_spine, switch_ports):
    node = fb.Node(gs.H100, gpus=8, nvswitches=4, nvswitch_ports=64, nics=nics_per_node, nic_bytes_per_s=link_bytes_per_s)
    per = fb.SuperPod(node, nodes_per_su, sus, leaves_per_su, spines, cables_per_leaf_spine, switch_ports,
                      link_bytes_per_s).per_node_bytes_per_s()
    return per["node egress"], per["leaf"], per["spine cables"], per["spine switches"]
""",
        "ch11-q3-2-scale-out": """
def scale_pod(gpus, gpus_per_su, leaves_per_su, leaf_up_ports, switch_ports):
    plan = fb.scale_out_plan(gpus, gpus_per_su, leaves_per_su, leaf_up_ports, switch_ports)
    return plan.sus, plan.spines, plan.cables_per_leaf_spine, plan.spine_ports_used
""",
        "ch11-pop1-all-gather": """
def all_gather_bf16(rows, cols, gpus, gpu_egress_bytes_per_s):
    b = rl.array_bytes((rows, cols), 2)
    return (cc.ring_all_gather_s(b, gpus, gpu_egress_bytes_per_s, exact=False),
            cc.ring_all_gather_s(b, gpus, gpu_egress_bytes_per_s))
""",
        "ch11-pop2-all-to-all": """
def all_to_all_bf16(rows, gpus, gpu_egress_bytes_per_s, k):
    b = rl.array_bytes((rows, gpus), 2)
    return (cc.all_to_all_s(b, gpus, gpu_egress_bytes_per_s), cc.all_to_all_s(b, gpus, gpu_egress_bytes_per_s, exact=False),
            cc.all_to_all_s(b, gpus, gpu_egress_bytes_per_s, k=k, exact=False))
""",
        "ch11-pop3-sharded": """
def sharded_all_gather(num_bytes, y, gpus_per_node, gpu_egress_bytes_per_s, node_egress_bytes_per_s):
    nvlink = gs.NvlinkGeneration("x", "x", "x", gpu_egress_bytes_per_s, 1, (gpus_per_node,), (1,))
    node = fb.Node(dataclasses.replace(gs.H100, nvlink=nvlink), gpus=gpus_per_node, nvswitches=1, nvswitch_ports=64,
                   nics=1, nic_bytes_per_s=node_egress_bytes_per_s)
    t = cc.sharded_reduction(num_bytes, y, node)
    return t.node_s, t.scale_out_s, t.total_s
""",
        "ch11-q4-1-su-bytes": """
def su_all_gather_bytes(m, n):
    node, top = cc.su_all_gather_switch_bytes(m, n)
    return node.ingress, node.egress, top.ingress, top.egress
""",
        "ch11-q4-2-sharp-bytes": """
def sharp_all_reduce(num_bytes, n, gpu_egress_bytes_per_s):
    sb = cc.sharp_all_reduce_switch_bytes(n)
    return sb.ingress * num_bytes, sb.egress * num_bytes, cc.all_reduce_s(num_bytes, n, gpu_egress_bytes_per_s, sharp=True)
""",
        "ch11-q4-3-sharp-sharded": """
def sharp_sharded_all_reduce_s(d, f, y, link_bytes_per_s):
    return cc.all_reduce_s(rl.array_bytes((d, f), 2) / y, y, link_bytes_per_s, sharp=True)
""",
        "ch11-q4-4-spine": """
def spine_sharp_all_reduce_s(num_bytes, leaves_per_su, spines, cables_per_leaf_spine, link_bytes_per_s):
    su_to_spine = fb.leaf_spine_bytes_per_s(leaves_per_su, spines, cables_per_leaf_spine, link_bytes_per_s)
    return cc.all_reduce_s(num_bytes, fb.H100_SUPERPOD.sus, su_to_spine, sharp=True)
""",
        "ch11-q4-5-tree": """
def tree_all_gather_s(num_bytes, degrees, link_bytes_per_s):
    levels = [fb.TreeLevel(str(i), 0, d, w, 0.0, 0.0) for i, (d, w) in enumerate(zip(degrees, link_bytes_per_s))]
    return cc.tree_all_gather_s(num_bytes, levels)
""",
        "ch11-q5-1-b200": """
def b200_rooflines(flops_per_s, gpu_egress_bytes_per_s, node_egress_bytes_per_s):
    return (pr.critical_intensity(flops_per_s, gpu_egress_bytes_per_s),
            pr.dp_min_tokens_per_gpu(flops_per_s, node_egress_bytes_per_s))
""",
        "ch11-q5-2-llama": """
def llama_plan(params, tokens, gpus, flops_per_s, mfu, hbm_bytes, ffw, gpu_egress_bytes_per_s):
    state = tm.training_state_memory(params, param_bytes=2, grad_bytes=0, adam_moment_bytes=4).total_bytes
    days = rl.compute_time_s(tf.six_n_train_flops(params, tokens), gpus * flops_per_s * mfu) / planner.SECONDS_PER_DAY
    return (hw.min_chips_to_hold(state, dataclasses.replace(hw.H100, hbm_bytes=hbm_bytes)), days,
            pr.tp_max_ways(ffw, flops_per_s, gpu_egress_bytes_per_s))
""",
        "ch11-q5-3-megatron": """
def megatron_batch(batch_seqs, seq_len, gpus, model_parallel, flops_per_s, node_egress_bytes_per_s, gpus_per_node):
    node = fb.Node(gs.H100, gpus=gpus_per_node, nvswitches=1, nvswitch_ports=64, nics=1,
                   nic_bytes_per_s=node_egress_bytes_per_s)
    return batch_seqs * seq_len / gpus, pr.model_parallel_dp_tokens_per_gpu(flops_per_s, node, model_parallel)
""",
    },
}
