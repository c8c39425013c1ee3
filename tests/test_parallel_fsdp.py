"""FSDP through ``jax.jit`` and NamedShardings (``FSDP.make_jit_step``), against the shard_map step.

The shard_map step itself is checked with every other scheme in tests/test_parallel_schemes.py.
Tolerances as there (rtol 1e-5, atol 1e-6, float32, Adam eps 1e-3).
"""

import jax
import numpy as np

from scalelib import compat, hlo, model, train
from scalelib.parallel.compare import ATOL, RTOL
from scalelib.parallel.fsdp import FSDP
from scalelib.parallel.scheme import sum_by_kind

HP = train.Adam(learning_rate=1e-2, eps=1e-3)
CFG = model.small_config()
BATCH, SEQ = 16, 16


def test_jit_fsdp_lets_xla_choose_collectives():
    """Same layout through jax.jit + NamedSharding: XLA gathers the weights itself, but (XLA:CPU,
    JAX 0.10) reduces gradients with one full-size all-reduce and slices it, where the shard_map
    step ReduceScatters: X times the reduced bytes per device for the same result."""
    mesh = compat.make_mesh((8,), ("data",), kind="auto")
    state = train.init_state(jax.random.key(0), CFG)
    tokens = train.batch(jax.random.key(1), CFG, BATCH, SEQ)
    scheme = FSDP(stage=3)
    s, t = scheme.shard_inputs(state, tokens, mesh)
    compiled = scheme.make_jit_step(CFG, mesh, HP).lower(s, t).compile()
    ref, r = jax.jit(train.make_step(CFG, HP)), state
    for _ in range(3):
        s, loss = compiled(s, t)
        r, ref_loss = ref(r, tokens)
        np.testing.assert_allclose(float(loss), float(ref_loss), rtol=RTOL, atol=ATOL)
        jax.tree.map(lambda a, b: np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=RTOL, atol=ATOL),
                     s.params, r.params)
    jit = sum_by_kind(hlo.collective_ops(compiled.as_text(), dict(mesh.shape)))
    smap = sum_by_kind([c for c in scheme.predicted_collectives(CFG, dict(mesh.shape), BATCH, SEQ)
                        if c.phase != "backward" or c.kind != "all_gather"])  # what XLA:CPU keeps
    assert set(k[1] for k in jit) == {("data",)}
    assert jit[("all_gather", ("data",))] >= smap[("all_gather", ("data",))]
    reduced = jit.get(("reduce_scatter", ("data",)), 0) + jit.get(("all_reduce", ("data",)), 0)
    assert reduced >= smap[("reduce_scatter", ("data",))] + 4
