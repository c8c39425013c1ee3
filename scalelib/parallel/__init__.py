"""Training parallelism (book section 5): one module per scheme, plus their cost models and a planner.

Each scheme has a ``shard_map`` training step with its collectives written out, checked against the
single-device step in ``scalelib.train``, and a cost function held against the compiled program.
"""
