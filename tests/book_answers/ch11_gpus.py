"""Chapter 11 (the book's GPU part, numbered 12 in the reference ids): chips, nodes, the fat tree, collectives and
the parallelism rooflines, each reproduced by scalelib.gpus (and the shared hardware records).

Where an entry names a chip, its figures come from scalelib (the GPU part's rounded 990 TFLOPs/s for H100 through
``hardware.variant(..., "gpu part")``); sizes, counts and measured rates the question gives come from its inputs.
"""

from scalelib import collectives as coll
from scalelib import hardware as hw
from scalelib import topology as topo
from scalelib import roofline as rl
from scalelib import transformer_flops as tf
from scalelib import transformer_memory as tm
from scalelib.gpus import comm_costs as cc
from scalelib.gpus import fabric as fb
from scalelib.gpus import parallel_rooflines as pr
from scalelib.gpus import gpu_specs as gs

H100, B200, A100 = gs.H100, gs.B200, gs.A100
H100_C = hw.variant(hw.H100, "bf16_flops_per_s", "gpu part").bf16_flops_per_s  # 990e12
B200_C = hw.B200.bf16_flops_per_s  # 2250e12 (the text)
NODE, POD = fb.H100_NODE, fb.H100_SUPERPOD
W_GPU, W_NODE = NODE.gpu_egress_bytes_per_s, NODE.egress_bytes_per_s
H800_W = gs.H800.chip.ici_one_way_bytes_per_s  # 300 GB/s of NVLink


def _bf16(shape):
    return rl.array_bytes(tuple(int(n) for n in shape), 2)


def _pop2(i, k=None, exact=True):
    # Pop Quiz 2: bf16[B_X, N] with N = 8 columns, one per GPU, holds 2 B N bytes; the answer is per B / W_GPU.
    row_bytes = rl.array_bytes((int(i["N_cols"]),), i["bytes_per_value"])
    return cc.all_to_all_s(row_bytes, i["X"], W_GPU, k=k, exact=exact) * W_GPU


REPRODUCERS = {
    # ---- Quiz 1: the chip ----
    "ch12-q1-1-cuda-cores": lambda i: H100.cuda_cores,
    "ch12-q1-1-cuda-cores-b200": lambda i: B200.cuda_cores,
    "ch12-q1-1-v5p-alus": lambda i: gs.tpu_vpu_alus(hw.TPU_V5P),
    "ch12-q1-1-v5p-vs-h100-alus": lambda i: gs.tpu_vpu_alus(hw.TPU_V5P) / H100.cuda_cores,
    "ch12-q1-2-vector-flops": lambda i: H100.vector_flops_per_s(H100.clock_hz[0]),
    "ch12-q1-2-vector-flops-boost": lambda i: H100.vector_flops_per_s(),
    "ch12-q1-2-tc-vs-vector-ratio": lambda i: H100_C / H100.vector_flops_per_s(),
    "ch12-q1-3-h100-intensity": lambda i: H100.critical_intensity("bf16"),
    "ch12-q1-3-b200-intensity": lambda i: B200.critical_intensity("bf16"),
    "ch12-q1-3-h100-fp8-intensity": lambda i: H100.critical_intensity("fp8"),
    "ch12-q1-3-b200-fp8-intensity": lambda i: B200.critical_intensity("fp8"),
    "ch12-q1-4-small-matmul-bytes": lambda i: rl.matmul_cost(i["B"], i["D"], i["F"]).bytes,
    "ch12-q1-4-small-matmul-time": lambda i: rl.comms_time_s(rl.matmul_cost(i["B"], i["D"], i["F"]).bytes,
                                                             B200.hbm_bytes_per_s),
    "ch12-q1-4-large-matmul-time": lambda i: rl.compute_time_s(
        rl.matmul_cost(i["B"], i["D"], i["F"]).flops, hw.variant(hw.B200, "bf16_flops_per_s").bf16_flops_per_s),
    "ch12-q1-5-h100-smem-total": lambda i: H100.smem_bytes,
    "ch12-q1-5-h100-register-total": lambda i: H100.register_bytes,
    "ch12-q1-5-h100-smem-plus-registers": lambda i: H100.smem_bytes + H100.register_bytes,
    "ch12-q1-6-b200-fp32-flops-per-cycle": lambda i: B200.cuda_cores * gs.FLOPS_PER_FMA,
    "ch12-q1-6-b200-clock": lambda i: B200.clock_from_vector_flops(B200.vector_fp32_fma_flops_per_s),
    "ch12-q1-7-add-bytes-per-element": lambda i: rl.einsum_cost("n,n->n", {"n": 1}, 4).bytes,
    "ch12-q1-7-add-intensity": lambda i: 1 / rl.einsum_cost("n,n->n", {"n": 1}, 4).bytes,
    "ch12-q1-7-h100-vector-intensity": lambda i: H100.critical_intensity("vector"),
    "ch12-q1-7-add-throughput": lambda i: H100.hbm_bytes_per_s / rl.einsum_cost("n,n->n", {"n": 1}, 4).bytes,
    "ch12-q1-7-add-time-64k": lambda i: rl.comms_time_s(rl.einsum_cost("n,n->n", {"n": i["N"]}, 4).bytes,
                                                        H100.hbm_bytes_per_s),
    "ch12-q1-7-add-time-1g": lambda i: rl.comms_time_s(rl.einsum_cost("n,n->n", {"n": i["N"]}, 4).bytes,
                                                       H100.hbm_bytes_per_s),
    "ch12-q1-7-n1024-sms": lambda i: i["N"] / H100.fp32_cores_per_sm,
    "ch12-q1-7-n1024-slowdown": lambda i: H100.sms / (i["N"] / H100.fp32_cores_per_sm),
    # ---- Quiz 2: the node ----
    "ch12-q2-1-nvswitch-bw": lambda i: NODE.nvswitch_bytes_per_s,
    "ch12-q2-1-node-switch-bw": lambda i: NODE.switches_bytes_per_s,
    "ch12-q2-1-node-gpu-bw": lambda i: NODE.gpus_bytes_per_s,
    "ch12-q2-1-node-total-bw": lambda i: NODE.total_bytes_per_s,
    "ch12-q2-2-bisection-bw": lambda i: NODE.bisection_bytes_per_s(),
    "ch12-q2-3-array-bytes": lambda i: _bf16((i["D"], i["F"])),
    "ch12-q2-3-allgather-time": lambda i: cc.ring_all_gather_s(i["bytes"], NODE.gpus, W_GPU),
    # Book slip (fixed upstream): the approximate rate is one GPU's egress, not the bisection bandwidth.
    "ch12-q2-3-allgather-approx-bw": lambda i: 1 / cc.ring_all_gather_s(1.0, i["N"], W_GPU, exact=False),
    "ch12-q2-3-allgather-time-approx": lambda i: cc.ring_all_gather_s(i["bytes"], NODE.gpus, W_GPU, exact=False),
    # ---- Quiz 3: beyond the node ----
    "ch12-q3-1-node-to-leaf-bw": lambda i: POD.node_to_leaf_bytes_per_s,
    "ch12-q3-1-ib-switch-bw": lambda i: POD.ib_switch_bytes_per_s,
    "ch12-q3-1-leaf-ingress-bw": lambda i: POD.su_leaf_ingress_bytes_per_s,
    "ch12-q3-1-leaf-bw-per-node": lambda i: POD.per_node_bytes_per_s()["leaf"],
    "ch12-q3-1-su-to-spine-bw": lambda i: POD.su_to_spine_bytes_per_s,
    "ch12-q3-1-spine-switch-bw": lambda i: POD.spine_switch_bytes_per_s,
    "ch12-q3-1-spine-bw-per-node": lambda i: POD.per_node_bytes_per_s()["spine switches"],
    "ch12-q3-1-pod-bisection-bw": lambda i: POD.bisection_bytes_per_s(),
    "ch12-q3-2-2048-sus": lambda i: POD.scaled_to(2048).sus,
    "ch12-q3-2-2048-spine-switches": lambda i: POD.scaled_to(2048).spines,
    "ch12-q3-2-1024-leaf-ports-used": lambda i: POD.leaf_down_ports + POD.leaf_up_ports,
    "ch12-q3-2-2048-spine-ports-used": lambda i: POD.scaled_to(2048).spine_ports_used,
    "ch12-q3-2-4096-spine-ports-needed": lambda i: POD.scale_out_plan(4096).spine_ports_used,
    "ch12-q3-2-4096-core-bw-per-node": lambda i: fb.switch_bytes_per_s(i["core_switches"], POD.ib_switch_ports,
                                                                       POD.ib_link_bytes_per_s) / i["nodes"],
    "ch12-q3-2-4096-spine-bw-per-node": lambda i: fb.switch_bytes_per_s(
        i["spine_switches"], POD.ib_switch_ports // 2, POD.ib_link_bytes_per_s) / i["nodes"],
    # ---- Pop quizzes ----
    "ch12-pop1-array-bytes": lambda i: _bf16((i["B"], i["F"])),
    "ch12-pop1-allgather-time-approx": lambda i: cc.ring_all_gather_s(_bf16((i["B"], i["F"])), NODE.gpus, W_GPU,
                                                                                       exact=False),
    "ch12-pop1-allgather-time": lambda i: cc.ring_all_gather_s(_bf16((i["B"], i["F"])), NODE.gpus, W_GPU),
    # Book slip (fixed upstream): B is a row count, so the array holds 2 B N bytes; answers per B / W_GPU.
    "ch12-pop2-alltoall-time": lambda i: _pop2(i),
    "ch12-pop2-alltoall-time-approx": lambda i: _pop2(i, exact=False),
    "ch12-pop2-alltoall-sparse-time": lambda i: _pop2(i, k=i["k"], exact=False),
    "ch12-pop2-sparse-vs-dense": lambda i: cc.sparse_fraction(i["k"], i["X"]),
    "ch12-pop2-sparse-true-fraction": lambda i: cc.expected_distinct_fraction(i["k"], i["Z"]),
    "ch12-pop3-per-y-bandwidth": lambda i: POD.su_leaf_ingress_bytes_per_s / POD.gpus_per_su,
    "ch12-pop3-allgather-time-y-le-8": lambda i: cc.ring_all_gather_s(_bf16((i["D"], i["F"])), POD.nodes_per_su,
                                                                      W_NODE),
    "ch12-pop3-allgather-time-y16": lambda i: cc.sharded_reduction(
        _bf16((i["D"], i["F"])), i["Y"], NODE).scale_out_s,
    # ---- Quiz 4: collectives ----
    "ch12-q4-1-node-switch-ingress": lambda i: cc.su_all_gather_switch_bytes(i["M"], i["N"])[0].ingress,
    "ch12-q4-1-node-switch-egress": lambda i: cc.su_all_gather_switch_bytes(i["M"], i["N"])[0].egress,
    "ch12-q4-1-node-allgather-bw": lambda i: W_GPU,
    "ch12-q4-1-top-switch-ingress": lambda i: cc.su_all_gather_switch_bytes(i["M"], i["N"])[1].ingress,
    "ch12-q4-1-top-switch-egress": lambda i: cc.su_all_gather_switch_bytes(i["M"], i["N"])[1].egress,
    "ch12-q4-1-top-allgather-bw": lambda i: 1 / cc.ring_all_gather_s(1.0, i["M"], W_NODE),
    "ch12-q4-2-sharp-switch-ingress": lambda i: cc.sharp_all_reduce_switch_bytes(i["N"]).ingress,
    "ch12-q4-2-sharp-switch-egress": lambda i: cc.sharp_all_reduce_switch_bytes(i["N"]).egress,
    "ch12-q4-2-sharp-ar-bw": lambda i: 1 / cc.all_reduce_s(1.0, i["N"], W_GPU, sharp=True),
    "ch12-q4-3-sharp-ar-coeff": lambda i: _bf16((1, 1)),
    # Book disagreement: with SHARP the spine AllReduce costs bytes / (one SU's 12.8 TB/s into the spine).
    "ch12-q4-4-spine-ar-bw": lambda i: 1 / cc.all_reduce_s(1.0, POD.sus, POD.su_to_spine_bytes_per_s, sharp=True),
    "ch12-q4-5-node-level-bw": lambda i: POD.levels()[0].collective_bytes_per_s,
    "ch12-q4-5-cross-node-bw": lambda i: fb.TreeLevel("2 nodes", 16, 2, W_NODE, 0, 0).collective_bytes_per_s,
    "ch12-q4-5-overall-bw": lambda i: cc.tree_collective_bytes_per_s(
        [POD.levels()[0], fb.TreeLevel("2 nodes", 16, 2, W_NODE, 0, 0)]),
    # ---- Quiz 5: rooflines ----
    "ch12-q5-1-b200-flops-ratio": lambda i: B200_C / H100_C,
    "ch12-q5-1-b200-tp-critical-intensity": lambda i: pr.critical_intensity(
        B200_C, pr.collective_bytes_per_s(fb.B200_NODE, 8)),
    "ch12-q5-1-b200-dp-critical-batch": lambda i: pr.dp_min_tokens_per_gpu(
        B200_C, pr.collective_bytes_per_s(fb.B200_NODE, 16)),
    "ch12-q5-2-llama70b-state-bytes": lambda i: tm.training_state_memory(
        i["params"], param_bytes=2, grad_bytes=0, adam_moment_bytes=4).total_bytes,
    "ch12-q5-2-llama70b-min-gpus": lambda i: hw.min_chips_to_hold(i["state_bytes"], hw.H100),
    "ch12-q5-2-llama70b-min-nodes": lambda i: -(-hw.min_chips_to_hold(i["state_bytes"], hw.H100) // NODE.gpus),
    "ch12-q5-2-llama70b-train-flops": lambda i: tf.six_n_train_flops(i["params"], i["tokens"]),
    "ch12-q5-2-llama70b-cluster-flops": lambda i: i["gpus"] * H100_C * i["MFU"],
    "ch12-q5-2-llama70b-train-time": lambda i: rl.compute_time_s(i["total_flops"], i["gpus"] * H100_C * i["MFU"]),
    # Book slip: F / 1995 matches nothing; the node-level alpha is C / W = 2200.
    "ch12-q5-2-llama70b-max-tp": lambda i: pr.tp_max_ways(i["F"], H100_C, W_GPU),
    "ch12-q5-2-llama70b-dp-degree": lambda i: i["gpus"] // i["tp"],
    "ch12-q5-2-llama70b-mem-per-gpu-tp8": lambda i: i["state_bytes"] / i["tp"],
    "ch12-q5-2-llama70b-zero3-tokens-per-gpu": lambda i: i["batch_tokens"] / i["gpus"],
    "ch12-q5-2-llama70b-pp8-bw": lambda i: i["nodes_spanned"] * W_NODE,
    "ch12-q5-2-llama70b-pp8-critical-batch": lambda i: pr.model_parallel_dp_tokens_per_gpu(
        H100_C, NODE, i["nodes_spanned"] * NODE.gpus if "nodes_spanned" in i else 64),
    "ch12-q5-3-megatron-16b-tokens-per-gpu": lambda i: i["batch_seqs"] * i["seq_len"] / i["gpus"],
    "ch12-q5-3-megatron-70b-tokens-per-gpu": lambda i: i["batch_seqs"] * i["seq_len"] / i["gpus"],
    "ch12-q5-3-megatron-314b-tokens-per-gpu": lambda i: i["batch_seqs"] * i["seq_len"] / i["gpus"],
    "ch12-q5-3-fsdp-critical-batch": lambda i: pr.dp_min_tokens_per_gpu(H100_C, W_NODE),
    "ch12-q5-3-70b-critical-batch": lambda i: pr.model_parallel_dp_tokens_per_gpu(H100_C, NODE, i["model_parallel"]),
    "ch12-q5-3-314b-critical-batch": lambda i: pr.model_parallel_dp_tokens_per_gpu(H100_C, NODE, i["model_parallel"]),
    # ---- in-text figures: the chip ----
    "ch12-h100-tc-flops-per-cycle": lambda i: H100.tc_flops_per_cycle_from(H100_C, gs.TC_CLOCK_HZ["H100"]),
    "ch12-h100-flops-per-sm": lambda i: H100.flops_per_sm(H100_C),
    "ch12-b200-tc-flops-per-cycle": lambda i: B200.tc_flops_per_cycle_from(B200_C, gs.TC_CLOCK_HZ["B200"]),
    "ch12-a100-tc-flops-per-cycle": lambda i: A100.tc_flops_per_cycle_from(A100.bf16_flops_per_s,
                                                                          gs.TC_CLOCK_HZ["A100"]),
    "ch12-h100-cuda-core-flops-fma": lambda i: H100.vector_flops_per_s(fma=True),
    "ch12-register-file-per-sm": lambda i: H100.registers_per_subpartition * H100.subpartitions_per_sm
    * gs.REGISTER_BYTES,
    "ch12-resident-warps-256-regs": lambda i: H100.resident_warps(i["regs_per_thread"]),
    "ch12-l2-vs-hbm-bw": lambda i: gs.H100_L2_BYTES_PER_S / H100.hbm_bytes_per_s,
    "ch12-l2-vs-hbm-bw-bidirectional": lambda i: 2 * gs.H100_L2_BYTES_PER_S / H100.hbm_bytes_per_s,
    "ch12-h100-simd-units": lambda i: H100.simd_units,
    "ch12-v5p-vpu-alus-per-tc": lambda i: hw.vpu_alus(hw.VPU_ALUS_PER_LANE_V5),
    "ch12-h200-vs-v5p-flops": lambda i: gs.H200.bf16_flops_per_s / hw.TPU_V5P.bf16_flops_per_s,
    "ch12-h200-vs-v5p-hbm": lambda i: gs.H200.hbm_bytes / hw.TPU_V5P.hbm_bytes,
    # ---- in-text figures: networks ----
    "ch12-nvlink-gen-ampere-bw": lambda i: gs.NVLINK_3.gpu_egress_bytes_per_s,
    "ch12-nvlink-gen-hopper-bw": lambda i: gs.NVLINK_4.gpu_egress_bytes_per_s,
    "ch12-nvlink-gen-blackwell-bw": lambda i: gs.NVLINK_5.gpu_egress_bytes_per_s,
    "ch12-superpod-switch-count": lambda i: POD.switches,
    "ch12-fattree-node-bw": lambda i: POD.levels()[0].cable_bytes_per_s,
    "ch12-fattree-leaf-bw": lambda i: POD.levels()[1].cable_bytes_per_s,
    "ch12-fattree-spine-bw": lambda i: POD.levels()[2].cable_bytes_per_s,
    "ch12-fattree-leaf-per-node": lambda i: POD.per_node_bytes_per_s()["leaf"],
    "ch12-fattree-spine-per-node": lambda i: POD.per_node_bytes_per_s()["spine cables"],
    "ch12-fattree-gpu-to-gpu-ib": lambda i: NODE.scale_out_bytes_per_s_per_gpu,
    "ch12-v5p-egress-all-axes": lambda i: hw.TPU_V5P.ici_links * hw.TPU_V5P.ici_one_way_bytes_per_s,
    "ch12-gb200-node-egress": lambda i: fb.GB200_NVL72.egress_bytes_per_s,
    "ch12-gb200-vs-h100-node-egress": lambda i: fb.GB200_NVL72.egress_bytes_per_s / W_NODE,
    "ch12-superpod-leaf-switch-bw": lambda i: POD.su_leaf_switch_bytes_per_s,
    "ch12-superpod-spine-switch-bw": lambda i: POD.spine_switch_bytes_per_s,
    "ch12-superpod-spine-cable-bw": lambda i: POD.spine_cable_bytes_per_s,
    # Text inconsistency: bisection x 2 / N holds for the one-direction bisection only.
    "ch12-collective-bw-from-bisection": lambda i: NODE.bisection_bytes_per_s() * 2 / NODE.gpus,
    # a TPU ring's AllToAll, B / (4 W), against a node's B / (8 W), at one bandwidth W
    "ch12-alltoall-node-vs-tpu-speedup": lambda i: coll.all_to_all(1.0, topo.RingAxis(NODE.gpus, True, 0.5, 1.0, 0.0))
    .bandwidth_s / cc.all_to_all_s(1.0, NODE.gpus, 1.0, exact=False),
    "ch12-llama70b-mlp-shard-bytes": lambda i: _bf16((i["D"], i["F"] // i["tp"])),
    "ch12-sharp-predicted-gain": lambda i: cc.sharp_predicted_gain(i["N"]),
    "ch12-sharp-effective-bw": lambda i: cc.with_gain(i["measured_bytes_per_s"], i["gain"]),
    "ch12-ag-bw-node-level": lambda i: POD.levels()[0].collective_bytes_per_s,
    "ch12-ag-bw-leaf-level": lambda i: POD.levels()[1].collective_bytes_per_s,
    "ch12-ag-bw-spine-level": lambda i: POD.levels()[2].collective_bytes_per_s,
    "ch12-ag-bw-overall": lambda i: cc.tree_collective_bytes_per_s(POD.levels()),
    "ch12-alltoall-cross-node-effective-bw": lambda i: NODE.scale_out_bytes_per_s_per_gpu,
    "ch12-alltoall-2node-slowdown": lambda i: cc.cross_node_all_to_all_s(1.0, 2, W_NODE, exact=False)
    / cc.all_to_all_s(1.0, NODE.gpus, W_GPU, exact=False),
    # ---- rooflines in the text ----
    "ch12-dp-tokens-per-gpu-h100-node": lambda i: pr.dp_min_tokens_per_gpu(H100_C, pr.collective_bytes_per_s(NODE, 8)),
    "ch12-dp-tokens-per-gpu-h100-cross-node": lambda i: pr.dp_min_tokens_per_gpu(
        H100_C, pr.collective_bytes_per_s(NODE, 16)),
    "ch12-dp-tpu-v5p-critical-batch": lambda i: rl.critical_intensity(
        hw.TPU_V5P.bf16_flops_per_s, i["axes"] * hw.TPU_V5P.ici_bidi_bytes_per_s),
    "ch12-dp-llama3-16k-batch": lambda i: pr.dp_min_global_batch(i["gpus"], pr.dp_min_tokens_per_gpu(H100_C, W_NODE)),
    "ch12-dp-deepseek-tokens-per-gpu": lambda i: pr.dp_min_tokens_per_gpu(H100_C, H800_W),
    "ch12-dp-deepseek-batch": lambda i: pr.dp_min_global_batch(i["gpus"], pr.dp_min_tokens_per_gpu(H100_C, H800_W)),
    "ch12-dp-moe-oss-tokens-per-gpu": lambda i: pr.dp_min_tokens_per_gpu(H100_C, W_NODE, experts=i["E"],
                                                                         active=i["k"]),
    "ch12-dp-2node-tokens-per-gpu": lambda i: pr.dp_min_tokens_per_gpu(H100_C, W_NODE, ways=i["X"]),
    # Text inconsistency: B200 nodes still egress 400 GB/s, so across nodes the bar is 5625, not 2500.
    "ch12-dp-takeaway-b200": lambda i: pr.dp_min_tokens_per_gpu(B200_C, pr.collective_bytes_per_s(fb.B200_NODE, 16)),
    "ch12-tp-llama3-max-way": lambda i: pr.tp_max_ways(i["F"], H100_C, W_NODE),
    "ch12-tp-2node-max-way": lambda i: pr.tp_max_ways_two_nodes(i["F"], H100_C, NODE),
    "ch12-ep-large-f-threshold-h100": lambda i: pr.ep_large_ffw_threshold(H100_C, NODE),
    "ch12-deepseek-batch-tokens": lambda i: i["batch_seqs"] * i["seq_len"],
    "ch12-deepseek-tokens-per-gpu": lambda i: i["batch_tokens"] / i["gpus"],
    "ch12-deepseek-model-parallel": lambda i: i["ep"] * i["pp"],
    "ch12-deepseek-dp-bw-factor": lambda i: fb.TreeLevel("dp", 0, i["X"], 1.0, 0, 0).collective_bytes_per_s,
    "ch12-llama3-gpus": lambda i: i["tp"] * i["pp"] * i["dp"],
    "ch12-llama3-tokens-per-gpu": lambda i: i["batch_tokens"] / i["gpus"],
    # how much lower the cross-node data-parallel bar sits on GB200 NVL72 than on H100 (9x the egress, 2.25x C)
    "ch12-gb200-cross-node-roofline-gain": lambda i: pr.dp_min_tokens_per_gpu(H100_C, W_NODE)
    / pr.dp_min_tokens_per_gpu(B200_C, fb.GB200_NVL72.egress_bytes_per_s),
    "ch12-dp-tokens-per-gpu-gb200-cross-node": lambda i: pr.dp_min_tokens_per_gpu(
        B200_C, fb.GB200_NVL72.egress_bytes_per_s),
    # ---- Appendix B ----
    "ch12-appb-leaf-cable-bw": lambda i: POD.su_leaf_ingress_bytes_per_s,
    # Text inconsistencies: Appendix B prices an NDR switch at 1.6 TB/s (an NVSwitch's figure), not 3.2 TB/s.
    "ch12-appb-leaf-switch-bw": lambda i: POD.su_leaf_switch_bytes_per_s,
    "ch12-appb-spine-cable-bw": lambda i: POD.spine_cable_bytes_per_s,
    "ch12-appb-spine-switch-bw": lambda i: POD.spine_switch_bytes_per_s,
    "ch12-appb-spine-per-gpu-bw": lambda i: min(POD.spine_switch_bytes_per_s, POD.spine_cable_bytes_per_s) / POD.gpus,
    "ch12-appb-su-per-gpu-bw": lambda i: POD.su_leaf_ingress_bytes_per_s / POD.gpus_per_su,
}
