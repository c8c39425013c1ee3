"""Chapter 6 (training LLaMA 3 on TPUs): the run's length, memory and sharding, from the planner.

The parameter and FLOP counts of the model are in ``ch06_params.py``. Here the book's 70e9
parameters are passed to the planner (``n_params``), as the chapter does after counting them.
Chapter 6's memory questions use a 4e6-token batch with 4 (or 12) D-sized checkpoints per layer;
its sharding questions use 4 x 1024 x 1024 tokens.
Book slips (held to the recomputed value by the test):
* ch6-mem-per-chip-12-ckpt: 12 checkpoints per layer give 7.1 GB per chip; the book says 8 GB.
Noted but inside tolerance: 1752 days is 4.8 years, not "nearly four"; the fewest chips is 226
with the exact 21.67 TB (the book divides its rounded 21.6 TB and gets 225).
Exercises 6.1 and 6.2 have no printed solution; their entries are derived from the chapter's rules.
No chapter 6 entry outside ch06_params.py is skipped.
"""

from functools import lru_cache

from scalelib import hardware as hw
from scalelib import transformer as tf
from scalelib import transformer_flops as fl
from scalelib.parallel import thresholds, chip_memory, planner
from scalelib.topology import Slice

V5P = hw.TPU_V5P
PARAMS = 70e9  # the book's rounded count, used for every chapter-6 estimate
SHARD_BATCH = 4 * 1024 * 1024


@lru_cache(maxsize=None)
def _plan(batch: int, remat: float = 4, slices: int = 1) -> planner.TrainingPlan:
    return planner.plan_training(tf.preset("llama3-70b"), V5P, Slice(V5P, V5P.pod_shape), batch, 4096,
                                 mfu=0.4, train_tokens=15e12, slices=slices, remat=remat, n_params=PARAMS)


def _whole(i: dict) -> chip_memory.ChipMemory:
    return chip_memory.training_memory(tf.preset("llama3-70b"), i["batch_tokens"], 4096,
                                  remat=i["checkpoints_per_layer"], n_params=PARAMS)


def _time_s(flops: float, chips: int, mfu: float) -> float:
    return planner.training_time_s(flops, chips, V5P, mfu)


REPRODUCERS = {
    "ch6-train-time-per-token-1chip": lambda i: _time_s(i["flops_per_token"], 1, i["MFU"]),
    "ch6-total-train-flops": lambda i: planner.training_flops(
        i["flops_per_token"] / fl.train_flops_per_param_token(), i["tokens"]),
    "ch6-train-time-1chip": lambda i: _time_s(i["total_flops"], 1, i["MFU"]),
    "ch6-v5p-pod-chips": lambda i: Slice(V5P, tuple(i["topology"])).num_chips,
    "ch6-train-time-full-pod": lambda i: _time_s(_plan(SHARD_BATCH).train_flops, _plan(SHARD_BATCH).chips, i["MFU"]),
    "ch6-mem-params-bf16": lambda i: chip_memory.BOOK_ADAM.memory(i["params"]).params_bytes,
    "ch6-mem-optimizer-fp32": lambda i: chip_memory.BOOK_ADAM.memory(i["params"]).optimizer_bytes,
    "ch6-mem-grad-checkpoints": lambda i: _whole(i).activations_bytes,
    "ch6-mem-total-training": lambda i: _plan(4_000_000).scheme("fsdp").memory.total_bytes * _plan(4_000_000).chips,
    "ch6-min-chips-4m-batch": lambda i: _plan(4_000_000).min_chips_for_memory,
    "ch6-train-time-min-chips": lambda i: _time_s(_plan(4_000_000).train_flops, _plan(4_000_000).min_chips_for_memory,
                                                     0.4),
    "ch6-mem-per-chip-pod": lambda i: _plan(4_000_000).scheme("fsdp").memory.total_bytes,
    "ch6-mem-per-chip-12-ckpt": lambda i: _plan(4_000_000, remat=12).scheme("fsdp").memory.total_bytes,
    "ch6-sequence-batch": lambda i: planner.sequences_per_batch(i["batch_tokens"], 4096),
    "ch6-fsdp-per-chip-batch": lambda i: _plan(SHARD_BATCH).scheme("fsdp").batch_per_chip_tokens,
    "ch6-fsdp-ici-threshold-3axes": lambda i: _plan(SHARD_BATCH).fsdp_critical_batch_per_chip_tokens,
    "ch6-mixed-fsdp-tp-threshold": lambda i: _plan(SHARD_BATCH).mixed_critical_batch_per_chip_tokens,
    "ch6-fsdp-degree-mixed": lambda i: thresholds.mixed_fsdp_ways_range(i["B"], i["F"], i["N"], V5P)[1],
    "ch6-chosen-fsdp-ways": lambda i: _plan(SHARD_BATCH).scheme("fsdp_tp").layout.data_ways,
    "ch6-chosen-tp-ways": lambda i: _plan(SHARD_BATCH).scheme("fsdp_tp").layout.model_ways,
    "ch6-ex6.1-per-chip-batch-4pods": lambda i: _plan(SHARD_BATCH, slices=4).batch_per_chip_tokens,
    "ch6-ex6.1-ideal-train-time-4pods": lambda i: _time_s(
        _plan(SHARD_BATCH, slices=4).train_flops, _plan(SHARD_BATCH, slices=4).chips, i["MFU"]),
    "ch6-ex6.2-l3-405b-total-flops": lambda i: planner.training_flops(
        tf.param_counts(tf.preset("llama3-405b")).total, i["tokens"]),
    "ch6-ex6.2-l3-405b-time-8pods": lambda i: _time_s(i["total_flops"], planner.total_chips(V5P, slices=8), i["MFU"]),
}
