"""A small serving engine for ``scalelib.model``: continuous batching, paged and prefix KV caches.

Book: "How to Scale Your Model", section 7.4 (the serving engine) and section 8 (serving
LLaMA 3-70B). ``scalelib.inference`` prices these ideas; this package runs them. One module per
idea, each readable in one sitting:

* ``request``: a request and its sampling parameters, checked when made.
* ``sampling``: greedy / temperature / top-k / top-p picks, keyed by seed and token position.
* ``block_pool``: the pool of KV blocks with reference counts.
* ``prefix_cache``: chained block hashes, reuse of cached prefixes, eviction, hit statistics.
* ``eviction``: which cached prefix goes first, a policy: LRU, FIFO, LFU, segmented LRU.
* ``cache_lab``: the eviction policies on seeded traces (chat, scan, system prompts), with no model.
* ``paged``: the jitted model step that reads keys and values through block tables.
* ``scheduler``: waiting and running queues, the token budget, chunked prefill, preemption; the
  schedule policy (first come first served, or shortest prompt first).
* ``engine``: the loop that ties them together, records every step and cancels a request.
* ``static``: static batching on the same step, the baseline continuous batching is measured against.
* ``speculative``: draft-and-verify decoding that keeps the target's distribution exactly.
* ``metrics`` and ``plots``: time to first token, time per output token, throughput, pictures.
* ``predicted_steps``: chapter 7's step-time model on the measured machine, beside the engine's step times.
"""

from scalelib.serving import (
                              block_pool,
                              cache_lab,
                              engine,
                              eviction,
                              metrics,
                              paged,
                              plots,
                              predicted_steps,
                              prefix_cache,
                              request,
                              sampling,
                              scheduler,
                              speculative,
                              static,
)

__all__ = ["block_pool", "cache_lab", "engine", "eviction", "metrics", "paged", "plots", "predicted_steps",
           "prefix_cache", "request", "sampling", "scheduler", "speculative", "static"]
