"""Chapter 9 (profiling TPU programs), reproduced with scalelib.profiling and scalelib.collectives.

The worked profile of 9.2.4 runs a Transformer on the 8 cores of a TPU v2 (a Colab v2-8), used as
a 4 x 2 mesh: X = 4-way data parallelism over the batch, Y = 2-way model parallelism over the FFW
hidden dim and the attention heads. The book gives two TPU v2 figures, 23e12 FLOPs/s per core and
1.2e11 B/s bidirectional ICI: ``hardware.TPU_V2_CORE``. The estimates come from
``profiling.sharded_einsum_time`` (the einsum folded into ``sharded_matmul``'s 2-D product, priced
by ``plan_cost``); per-device FLOPs divided by one core's peak give the book's times.

* ch9-tiling-padding-ratio: f32[3,5] in (2, 2) tiles is stored as [4, 6], 24 / 15 = 1.6.
* ch9-ffw-per-dp-shard-batch: tokens of one data-parallel shard, X[B_X, T, D] with B = 32.
* ch9-ffw-upproj-time, ch9-qproj-time: X[B_X, T, D] . W_in[D, F_Y] and X[B_X, T, D] . W_Q[D, N_Y, H].
* ch9-reducescatter-shard-bytes: the partial sum Out[B_X, T, D]{U_Y} that the down-projection
  Tmp[B_X, T, F_Y] . W_out[F_Y, D] leaves on each core before its ReduceScatter over Y.
* ch9-reducescatter-time: that ReduceScatter over the 2-core axis, ``collectives.reduce_scatter``.
Book slip, not an entry: the up-projection's output is printed as bf16[32, 1024, 16384], but one
core's output is [8, 1024, 16384] (its inputs are the local [8, 1024, 8192] and [8192, 16384]).
Skipped:
* ch9-memory-profile-params: the 7.5 GB of parameters is read off a memory-profile screenshot;
  the model's layer count is not given, so there is nothing to compute it from.
"""

import dataclasses

from scalelib import collectives, profiling
from scalelib.hardware import TPU_V2_CORE
from scalelib.topology import RingAxis, ring_axis

DATA_WAYS, MODEL_WAYS = 4, 2  # "4-way DP, 2-way MP" over the 8 cores
D_MODEL, D_FF = 8192, 32768  # W_in is [8192, 32768] in the worked profile


def _v2_axis(size: int, bidi_bytes_per_s: float = TPU_V2_CORE.ici_bidi_bytes_per_s) -> RingAxis:
    return ring_axis(dataclasses.replace(TPU_V2_CORE, ici_bidi_bytes_per_s=bidi_bytes_per_s), size)


def _mesh(cores: int = DATA_WAYS * MODEL_WAYS) -> dict:
    if cores != DATA_WAYS * MODEL_WAYS:
        raise ValueError(f"the worked profile runs on {DATA_WAYS} x {MODEL_WAYS} cores, not {cores}")
    return {"X": _v2_axis(DATA_WAYS), "Y": _v2_axis(MODEL_WAYS)}


def _up_projection(batch: int, seq: int, d: int = D_MODEL, f: int = D_FF, cores: int = 8,
                   peak: float = TPU_V2_CORE.bf16_flops_per_s) -> profiling.EinsumEstimate:
    return profiling.sharded_einsum_time("X[B_X, T, D]", "Win[D, F_Y]", {"B": batch, "T": seq, "D": d, "F": f},
                                         _mesh(cores), peak)


def _q_projection(i: dict) -> profiling.EinsumEstimate:
    sizes = {k: i[k] for k in ("B", "T", "D", "N", "H")}
    return profiling.sharded_einsum_time("X[B_X, T, D]", "Wq[D, N_Y, H]", sizes, _mesh(i["cores"]),
                                         i["flops_per_s_per_core"])


def _down_projection_partial_bytes(i: dict) -> float:
    sizes = {"B": i["local_batch"] * DATA_WAYS, "T": i["seq"], "D": i["D"], "F": D_FF}
    est = profiling.sharded_einsum_time("Tmp[B_X, T, F_Y]", "Wout[F_Y, D]", sizes, _mesh(),
                                        TPU_V2_CORE.bf16_flops_per_s, out="Out[B_X, T, D_Y]", dtype_bytes=i["bytes"])
    (step,) = est.cost.steps  # the ReduceScatter over Y
    return step.array_bytes


REPRODUCERS = {
    "ch9-tiling-padding-ratio": lambda i: profiling.padding_ratio(i["shape"], i["tile"]),
    "ch9-ffw-per-dp-shard-batch": lambda i: _up_projection(i["local_batch"] * DATA_WAYS, i["seq"]).rows_per_device,
    "ch9-ffw-upproj-time": lambda i: _up_projection(i["B"], i["T"], i["D"], i["F"], i["cores"],
                                                    i["flops_per_s_per_core"]).time_s,
    "ch9-reducescatter-shard-bytes": _down_projection_partial_bytes,
    "ch9-reducescatter-time": lambda i: collectives.reduce_scatter(
        i["shard_bytes"], _v2_axis(MODEL_WAYS, i["ici_bidi_bytes_per_s"])).total_s,
    "ch9-qproj-time": lambda i: _q_projection(i).time_s,
}
