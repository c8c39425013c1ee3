"""Serving a Transformer: the cost side of inference and a real decode loop with a KV cache.

Book: "How to Scale Your Model", section 7 (All About Transformer Inference) and section 8
(Serving LLaMA 3-70B on TPUs). One module per idea:

* ``replica_memory``: bytes of weights and KV caches, what a group of chips holds, the smallest slice.
* ``step_time``: the roofline of a generate (decode) step and of prefill, critical batch sizes,
  latency and throughput against batch, and the predicted cost of ``decode``'s step.
* ``model_parallel``: the generate step sharded over chips (weights per chip, ICI time of the
  activation collectives, how far model parallelism goes, 2D weight-stationary sharding).
* ``serving_rates``: the rates of the engine around the two steps (queries per second, prefill / generate server
  ratio, cache eviction, prefix caching, moving a KV cache between servers, FLOPs per dollar).
* ``decode``: prefill and greedy generation on ``scalelib.model`` with a KV cache.

Only ``decode`` imports JAX; the cost modules are plain Python.
"""
