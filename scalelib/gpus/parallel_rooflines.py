"""When each parallelism stays compute bound on GPUs: the rooflines of data, tensor, expert and pipeline parallelism.

Book: the GPU part, "Rooflines for LLM Scaling on GPUs" (Data, Tensor, Expert and Pipeline Parallelism,
Examples, TLDR) and Quiz 5; the TPU counterparts are in :mod:`scalelib.parallel` (book section 5).

The model is one MLP block ``x[B, D] @ W_in[D, F] @ W_out[F, D]`` with ``B`` the global batch in tokens, and
``C`` a GPU's bf16 FLOPs/s. ``W_collective`` is the GPU's NVLink egress when the parallel axis stays inside a
node, and the node's scale-out egress when it spans nodes; :func:`collective_bytes_per_s` picks it.
Collective patterns: data parallelism AllReduces (or ReduceScatters + AllGathers) the weight gradients; tensor
parallelism AllGathers and ReduceScatters activations; expert parallelism AllToAlls tokens; pipelining sends
activations point to point.
"""

from __future__ import annotations

from dataclasses import dataclass

from scalelib.gpus.fabric import Node
from scalelib.validate import positive, positive_int


def collective_bytes_per_s(node: Node, ways: int) -> float:
    """``W_collective`` for a parallel axis of ``ways`` GPUs: NVLink inside one node, scale-out beyond it."""
    return node.gpu_egress_bytes_per_s if positive_int("ways", ways) <= node.gpus else node.egress_bytes_per_s


def critical_intensity(flops_per_s: float, collective_bytes_per_s: float) -> float:
    """``alpha = C / W``: FLOPs a GPU must do per byte it communicates (2200 for H100 NVLink, 2475 across
    H100 nodes)."""
    return positive("flops_per_s", flops_per_s) / positive("collective_bytes_per_s", collective_bytes_per_s)


def dp_min_tokens_per_gpu(flops_per_s: float, collective_bytes_per_s: float, experts: int = 1, active: int = 1,
                          ways: int | None = None) -> float:
    """Per-GPU token batch above which data parallelism (or ZeRO / FSDP) is compute bound.

    Backward pass: ``T_math = 8 B D F k / (X C)`` against ``T_comms = 8 D F E / W``, so ``B / X > (E / k) C / W``.
    ``ways``: for a small number of data-parallel nodes the ring's ``(X - 1) / X`` lowers the bar
    (2-way: half of it).
    """
    ratio = positive_int("experts", experts) / positive_int("active", active)
    alpha = critical_intensity(flops_per_s, collective_bytes_per_s) * ratio
    if ways is not None:
        x = positive_int("ways", ways)
        alpha *= (x - 1) / x
    return alpha


def dp_min_global_batch(gpus: int, tokens_per_gpu: float) -> float:
    """Global batch in tokens that every GPU's minimum adds up to."""
    return positive_int("gpus", gpus) * positive("tokens_per_gpu", tokens_per_gpu)


def model_parallel_dp_tokens_per_gpu(flops_per_s: float, node: Node, model_parallel: int) -> float:
    """Data parallelism's per-GPU minimum when each replica's model-parallel group already spans several nodes:
    the AllReduce then runs on ``model_parallel / gpus_per_node`` nodes' egress at once (Quiz 5, Q3)."""
    nodes_spanned = max(1.0, positive_int("model_parallel", model_parallel) / node.gpus)
    return critical_intensity(flops_per_s, node.egress_bytes_per_s * nodes_spanned)


def tp_max_ways(ffw: int, flops_per_s: float, collective_bytes_per_s: float) -> float:
    """Largest tensor-parallel degree that stays compute bound: ``T_math = 4 B D F / (Y C)`` against
    ``T_comms = 4 B D / W`` gives ``Y < F W / C`` (about 11 for F = 28000 across H100 nodes)."""
    return positive_int("ffw", ffw) / critical_intensity(flops_per_s, collective_bytes_per_s)


def tp_max_ways_two_nodes(ffw: int, flops_per_s: float, node: Node) -> float:
    """Tensor parallelism over exactly two nodes doubles the cross-node bandwidth, so the bar becomes
    ``F > alpha (Y - N)``: ``Y < N + F / alpha`` with alpha at the scale-out rate (19 for F = 28000)."""
    return node.gpus + tp_max_ways(ffw, flops_per_s, node.egress_bytes_per_s)


@dataclass(frozen=True)
class ExpertParallelTimes:
    math_s: float
    comms_s: float

    @property
    def compute_bound(self) -> bool:
        return self.math_s >= self.comms_s


def ep_times(batch_tokens: float, d_model: int, ffw: int, k: int, ways: int, flops_per_s: float,
             collective_bytes_per_s: float, gpus_per_node: int = 8) -> ExpertParallelTimes:
    """Expert parallelism over ``ways`` GPUs spanning nodes: ``T_math = 4 B k D F / (Z C)`` against the two
    AllToAlls ``T_comms = 4 B D (Z - N) / (W Z) min(N k / Z, 1)`` (zero while Z stays inside one node)."""
    z, n = positive_int("ways", ways), positive_int("gpus_per_node", gpus_per_node)
    b = positive("batch_tokens", batch_tokens)
    flops = 4 * b * positive_int("k", k) * positive_int("d_model", d_model) * positive_int("ffw", ffw)
    math_s = flops / (z * positive("flops_per_s", flops_per_s))
    comms_s = (4 * b * d_model * max(z - n, 0) / (positive("collective_bytes_per_s", collective_bytes_per_s) * z)
               * min(n * k / z, 1.0))
    return ExpertParallelTimes(math_s, comms_s)


def ep_large_ffw_threshold(flops_per_s: float, node: Node) -> float:
    """``F`` above which expert parallelism can span many nodes: ``N C / W_node`` (19800 on H100)."""
    return node.gpus * critical_intensity(flops_per_s, node.egress_bytes_per_s)


def pp_comms_s(batch_tokens: float, d_model: int, link_bytes_per_s: float, microbatches: int, stages: int,
               bytes_per_value: int = 2) -> float:
    """All pipeline transfers of one step: ``N_MB + N_stages - 2`` hops of ``2 B D / (W N_MB)`` each."""
    mb, st = positive_int("microbatches", microbatches), positive_int("stages", stages)
    hop = bytes_per_value * positive("batch_tokens", batch_tokens) * positive_int("d_model", d_model) / (
        positive("link_bytes_per_s", link_bytes_per_s) * mb)
    return hop * (mb + st - 2)


def pp_bubble_fraction(microbatches: int, stages: int) -> float:
    """Idle share of a plain (GPipe-style) schedule: ``(S - 1) / (M + S - 1)``; zero-bubble schedules avoid it."""
    mb, st = positive_int("microbatches", microbatches), positive_int("stages", stages)
    return (st - 1) / (mb + st - 1)
