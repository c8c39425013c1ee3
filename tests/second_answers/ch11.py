"""A second honest answer to every chapter 11 exercise, written differently from the solution notebook's (loops, numpy,
helper functions, other orders of operations) and never calling the scalelib function its test compares with.

Graded in a notebook filled with these, every exercise must earn full marks: the tests accept any correct answer,
not only the solution's arithmetic.
"""

from __future__ import annotations

SECOND: dict[str, dict[str, str]] = {"11_gpus": {
    "ch11-q1-1-alus": """
import numpy as np

def alu_counts(sms, subpartitions, cores_per_subpartition, tpu_tensorcores, sublanes, lanes, alus_per_lane):
    gpu = int(np.prod([sms, subpartitions, cores_per_subpartition]))
    vpu = np.ones((sublanes, lanes), dtype=np.int64) * alus_per_lane     # ALUs per (sublane, lane)
    tpu = int(vpu.sum()) * tpu_tensorcores
    return gpu, tpu, float(tpu) / float(gpu)
""",
    "ch11-q1-2-vector-flops": """
def vector_vs_tensor(sms, subpartitions, cores_per_subpartition, clock_hz, tc_flops_per_s):
    cores = 0
    for _ in range(sms):
        cores += subpartitions * cores_per_subpartition
    per_cycle = float(cores)                     # one op per core per cycle
    vector = per_cycle * clock_hz
    return vector, 1.0 / (vector / tc_flops_per_s)
""",
    "ch11-q1-3-intensity": """
def critical_intensities(bf16_flops_per_s, fp8_flops_per_s, hbm_bytes_per_s):
    seconds_per_byte = 1.0 / hbm_bytes_per_s
    return tuple(rate * seconds_per_byte for rate in (bf16_flops_per_s, fp8_flops_per_s))
""",
    "ch11-q1-4-matmul-time": """
def matmul_time_s(batch, d, f, flops_per_s, hbm_bytes_per_s):
    shapes = [(batch, d), (d, f), (batch, f)]            # x, w and the output
    moved = sum(2 * a * b for a, b in shapes)
    work = batch * f * (2 * d)
    times = {"math": work / flops_per_s, "memory": moved / hbm_bytes_per_s}
    slowest = max(times, key=times.get)
    return times[slowest], np.bool_(times["math"] >= times["memory"])  # a NumPy bool
""",
    "ch11-q1-5-on-chip": """
def on_chip_bytes(sms, smem_per_sm_bytes, subpartitions, registers_per_subpartition):
    bits_per_register = 32
    per_sm_registers = subpartitions * registers_per_subpartition * bits_per_register // 8
    smem = register = 0
    for _ in range(sms):
        smem += smem_per_sm_bytes
        register += per_sm_registers
    return smem, register
""",
    "ch11-q1-6-clock": """
def clock_from_fma_flops(fma_flops_per_s, sms, subpartitions, cores_per_subpartition):
    ops_per_second = fma_flops_per_s / 2          # an FMA is one operation counted as two FLOPs
    cores = sms * subpartitions * cores_per_subpartition
    return ops_per_second / cores
""",
    "ch11-q1-7-vector-add": """
import math

def vector_add(n, hbm_bytes_per_s, clock_hz, sms, subpartitions, cores_per_subpartition):
    lanes_per_sm = subpartitions * cores_per_subpartition
    sms_used = sms if n >= sms * lanes_per_sm else math.ceil(n / lanes_per_sm)
    bytes_moved = n * 4 * 2 + n * 4                 # read x and y, write z
    cycles = n / (sms_used * lanes_per_sm)
    return bytes_moved / hbm_bytes_per_s, cycles / clock_hz, int(sms_used)
""",
    "ch11-q2-1-node-bw": """
def node_bandwidth(gpus, links_per_gpu, link_bytes_per_s, switches, switch_ports):
    ports = {"switches": switches * switch_ports, "gpus": gpus * links_per_gpu}
    rates = {k: v * link_bytes_per_s for k, v in ports.items()}
    return rates["switches"], rates["gpus"], min(rates.values())
""",
    "ch11-q2-2-bisection": """
def bisection_bytes_per_s(gpus, gpu_egress_bytes_per_s):
    half = list(range(gpus))[: gpus // 2]
    one_way = sum(gpu_egress_bytes_per_s for _ in half)
    return one_way + one_way
""",
    "ch11-q2-3-all-gather": """
def node_all_gather(num_bytes, gpus, gpu_egress_bytes_per_s):
    piece = num_bytes / gpus
    exact = 0.0
    for _ in range(gpus - 1):                       # one ring step per other GPU's piece
        exact += piece / gpu_egress_bytes_per_s
    return exact, exact * gpus / (gpus - 1)
""",
    "ch11-q3-1-fat-tree": """
def fat_tree_per_node(nodes_per_su, sus, nics_per_node, link_bytes_per_s, leaves_per_su, spines,
                      cables_per_leaf_spine, switch_ports):
    def per_node(links, nodes):
        return links * link_bytes_per_s / nodes

    all_nodes = sus * nodes_per_su
    down_per_leaf = (nodes_per_su * nics_per_node) // leaves_per_su   # the NIC cables landing on one leaf
    up_per_leaf = spines * cables_per_leaf_spine
    through = leaves_per_su * (down_per_leaf if down_per_leaf < up_per_leaf else up_per_leaf)
    return (per_node(nics_per_node, 1), per_node(through, nodes_per_su),
            per_node(sus * leaves_per_su * spines * cables_per_leaf_spine, all_nodes),
            per_node(spines * switch_ports, all_nodes))
""",
    "ch11-q3-2-scale-out": """
def scale_pod(gpus, gpus_per_su, leaves_per_su, leaf_up_ports, switch_ports):
    sus = gpus // gpus_per_su
    spines = 0
    while spines * switch_ports < sus * leaves_per_su * leaf_up_ports:
        spines += 1
    cables = leaf_up_ports // spines if leaf_up_ports >= spines else 1
    leaves = sus * leaves_per_su
    return sus, spines, cables, cables * leaves
""",
    "ch11-pop1-all-gather": """
import numpy as np

def all_gather_bf16(rows, cols, gpus, gpu_egress_bytes_per_s):
    total = np.zeros((), np.float64) + rows * cols * np.dtype(np.float16).itemsize   # bf16 and fp16 are both 2 bytes
    approx = float(total / gpu_egress_bytes_per_s)
    return approx, approx - approx / gpus
""",
    "ch11-pop2-all-to-all": """
def all_to_all_bf16(rows, gpus, gpu_egress_bytes_per_s, k):
    array_bytes = rows * gpus * 2
    per_peer = array_bytes / gpus / gpus            # each GPU's shard, cut into one slice per destination
    exact = per_peer * (gpus - 1) / gpu_egress_bytes_per_s
    approx = per_peer * gpus / gpu_egress_bytes_per_s
    share = k / gpus if k < gpus else 1.0
    return exact, approx, share * approx
""",
    "ch11-pop3-sharded": """
def sharded_all_gather(num_bytes, y, gpus_per_node, gpu_egress_bytes_per_s, node_egress_bytes_per_s):
    inside = y if y < gpus_per_node else gpus_per_node
    nodes_spanned = y / gpus_per_node if y > gpus_per_node else 1
    times = [num_bytes / (inside * gpu_egress_bytes_per_s), num_bytes / (nodes_spanned * node_egress_bytes_per_s)]
    return times[0], times[1], sorted(times)[-1]
""",
    "ch11-q4-1-su-bytes": """
from fractions import Fraction

def su_all_gather_bytes(m, n):
    piece = Fraction(1, m * n)                      # each GPU's share of B
    node_in = n * piece + (m - 1) * n * piece       # from its GPUs, then the rest of the SU from above
    node_out = n * piece + n * (1 - piece)
    top_in = sum(n * piece for _ in range(m))
    top_out = sum(1 - n * piece for _ in range(m))
    return tuple(float(v) for v in (node_in, node_out, top_in, top_out))
""",
    "ch11-q4-2-sharp-bytes": """
def sharp_all_reduce(num_bytes, n, gpu_egress_bytes_per_s):
    shard = num_bytes / n
    steps_in = [n * (n - 1) * shard, n * shard]      # partial shards up, then finished shards up
    steps_out = [n * shard, n * (n - 1) * shard]     # reduced shards down, then every finished shard to the others
    per_gpu_out = sum(steps_out) / n
    return sum(steps_in), sum(steps_out), per_gpu_out / gpu_egress_bytes_per_s
""",
    "ch11-q4-3-sharp-sharded": """
def sharp_sharded_all_reduce_s(d, f, y, link_bytes_per_s):
    columns_per_shard = f / y
    return d * columns_per_shard * 2 / link_bytes_per_s
""",
    "ch11-q4-4-spine": """
def spine_sharp_all_reduce_s(num_bytes, leaves_per_su, spines, cables_per_leaf_spine, link_bytes_per_s):
    uplink = 0.0
    for _leaf in range(leaves_per_su):
        for _spine in range(spines):
            uplink += cables_per_leaf_spine * link_bytes_per_s
    return num_bytes / uplink
""",
    "ch11-q4-5-tree": """
import numpy as np

def tree_all_gather_s(num_bytes, degrees, link_bytes_per_s):
    d = np.asarray(degrees, dtype=np.float64)
    w = np.asarray(link_bytes_per_s, dtype=np.float64)
    return float(num_bytes * np.max((1.0 - 1.0 / d) / w))
""",
    "ch11-q5-1-b200": """
def b200_rooflines(flops_per_s, gpu_egress_bytes_per_s, node_egress_bytes_per_s):
    def tokens(bandwidth):                          # FLOPs per byte moved = tokens per GPU at the break-even point
        return flops_per_s / bandwidth
    return tokens(gpu_egress_bytes_per_s), tokens(node_egress_bytes_per_s)
""",
    "ch11-q5-2-llama": """
def llama_plan(params, tokens, gpus, flops_per_s, mfu, hbm_bytes, ffw, gpu_egress_bytes_per_s):
    bytes_per_param = {"bf16 weights": 2, "adam m": 4, "adam v": 4}
    state = params * sum(bytes_per_param.values())
    min_gpus = int(-(-state // hbm_bytes))
    seconds = (2 + 4) * params * tokens / (mfu * flops_per_s * gpus)
    alpha = flops_per_s / gpu_egress_bytes_per_s
    return min_gpus, seconds / (24 * 3600), ffw / alpha
""",
    "ch11-q5-3-megatron": """
def megatron_batch(batch_seqs, seq_len, gpus, model_parallel, flops_per_s, node_egress_bytes_per_s, gpus_per_node):
    tokens = batch_seqs * seq_len
    if model_parallel > gpus_per_node:
        bandwidth = node_egress_bytes_per_s * model_parallel / gpus_per_node
    else:
        bandwidth = node_egress_bytes_per_s
    return tokens / gpus, flops_per_s / bandwidth
""",
}}
