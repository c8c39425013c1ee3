"""NVIDIA GPUs as the book's GPU part ("How to Think About GPUs") models them.

One module per idea, each building on the one before it:

* :mod:`~scalelib.gpus.gpu_specs`: what is inside one chip (SMs, CUDA cores, Tensor Cores, registers,
  SMEM, L2, HBM, FLOPs/s by precision) for V100 to B200, and the NVLink generations;
* :mod:`~scalelib.gpus.fabric`: a node (NVLink and NVSwitches) and the scale-out fat tree of a DGX
  SuperPod (scalable units, leaf and spine switches), with each level's bandwidth;
* :mod:`~scalelib.gpus.comm_costs`: how long AllGather, ReduceScatter, AllReduce (with and without
  SHARP) and AllToAll take inside a node and across the tree;
* :mod:`~scalelib.gpus.parallel_rooflines`: when data, tensor, expert and pipeline parallelism stay
  compute bound on GPUs;
* :mod:`~scalelib.gpus.two_level`: a real two-level AllReduce in ``shard_map`` (reduce-scatter inside a
  node, all-reduce across nodes, all-gather inside), checked against ``psum`` and priced on the tree.

The figures shared with the rest of the library (bf16 FLOPs/s, HBM, NVLink egress) are read from the
:class:`scalelib.hardware.Chip` records, never typed twice.
"""
