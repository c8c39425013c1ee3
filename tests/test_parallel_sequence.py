"""Sequence-parallel attention (scalelib.parallel.sequence) against single-device attention.

Float32 at RTOL / ATOL: the online softmax visits the keys in blocks, so only the order of the
sums differs from ``reference_attention``. The training steps (both methods) are checked with every
other scheme in tests/test_parallel_schemes.py.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from scalelib import compat
from scalelib.kernels import reference_attention
from scalelib.parallel import sequence as sp
from scalelib.parallel.compare import ATOL, RTOL

METHODS = ["all_gather", "ring"]


def assert_trees_close(a, b):
    jax.tree.map(lambda x, y: np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=RTOL, atol=ATOL), a, b)


def mesh_of(n):
    return compat.make_mesh((n,), ("seq",), devices=jax.devices()[:n])


@pytest.mark.parametrize("method", METHODS)
def test_attention_and_grads_equal_reference(method):
    mesh = mesh_of(4)
    ks = jax.random.split(jax.random.key(0), 4)
    q = jax.random.normal(ks[0], (2, 16, 4, 8))  # [B, T, N, H]
    k = jax.random.normal(ks[1], (2, 16, 2, 8))  # [B, T, K, H] GQA, G = 2
    v = jax.random.normal(ks[2], (2, 16, 2, 8))  # [B, T, K, H]
    w = jax.random.normal(ks[3], q.shape)  # [B, T, N, H] output cotangent
    put = lambda a: jax.device_put(a, NamedSharding(mesh, P(None, "seq")))  # noqa: E731

    def out_and_grads(attn, *qkv):  # the output and the vjp of a random cotangent, in one program
        out, vjp = jax.vjp(attn, *qkv)
        return out, vjp(w)

    sharded = jax.jit(lambda *a: out_and_grads(lambda *b: sp.SequenceParallel(method).attention(*b, mesh), *a))
    out, grads = sharded(put(q), put(k), put(v))
    ref_out, ref_grads = jax.jit(lambda *a: out_and_grads(reference_attention, *a))(q, k, v)
    np.testing.assert_allclose(np.asarray(out), np.asarray(ref_out), rtol=RTOL, atol=ATOL)
    assert_trees_close(grads, ref_grads)


def test_attention_errors():
    z = jnp.zeros((1, 6, 2, 4))
    with pytest.raises(ValueError, match="multiple of the 'seq' axis size 4"):
        sp.SequenceParallel().attention(z, z, z, mesh_of(4))
