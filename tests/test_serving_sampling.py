"""scalelib.serving.sampling against a plain numpy filter, and its keys against the batch.

The distribution a row samples from must be the softmax of logits / temperature over the tokens
kept by top-k and then top-p (the smallest set of most likely tokens reaching top_p), computed
here independently in numpy. A row's draw depends on its seed and position, not on its row.
"""

import jax
import numpy as np
import pytest

from scalelib.serving import request, sampling
from tests.serving_common import fast_compiles, no_block_leaks  # noqa: F401

V = 12
RTOL = ATOL = 1e-6


def numpy_probs(logits, p: request.SamplingParams):
    if p.greedy:
        out = np.zeros_like(logits)
        out[np.argmax(logits)] = 1
        return out
    z = logits / p.temperature
    order = np.argsort(-z)
    kept = order[:p.top_k] if p.top_k else order
    w = np.exp(z[kept] - z[kept].max())
    w /= w.sum()
    n = int(np.sum(np.cumsum(w) - w < p.top_p))
    out = np.zeros_like(logits)
    chosen = kept[:max(n, 1)]
    out[chosen] = np.exp(z[chosen] - z[chosen].max())
    return out / out.sum()


CASES = [request.SamplingParams(*c) for c in
         [(0.0, 0, 1.0, 0), (1.0, 0, 1.0, 1), (0.7, 3, 1.0, 2), (1.3, 0, 0.5, 3), (1.0, 5, 0.8, 4), (2.0, 1, 1.0, 5),
          (0.5, 0, 0.05, 6), (1.0, 20, 0.999, 7)]]


def test_probabilities_equal_the_numpy_filter():
    logits = np.random.default_rng(0).normal(size=(len(CASES), V)).astype(np.float32) * 2
    rp = sampling.row_params(CASES, list(range(len(CASES))), len(CASES))
    got = np.asarray(jax.jit(sampling.probabilities)(logits, rp))
    want = np.stack([numpy_probs(row.astype(np.float64), p) for row, p in zip(logits, CASES)])
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)
    assert (got[2] > 0).sum() == 3 and (got[5] > 0).sum() == 1


def test_a_draw_depends_on_seed_and_position_not_on_the_row():
    logits = np.random.default_rng(1).normal(size=(4, V)).astype(np.float32)
    params = [request.SamplingParams(1.0, 0, 1.0, s) for s in (3, 3, 4, 3)]
    sample = jax.jit(sampling.sample)
    batch = np.asarray(sample(logits, sampling.row_params(params, [5, 5, 5, 6], 4)))
    for i in range(4):  # each row alone, padded to the same shape with greedy rows
        alone = np.asarray(sample(logits[[i, 0, 0, 0]], sampling.row_params([params[i]], [[5, 5, 5, 6][i]], 4)))
        assert alone[0] == batch[i]
    draws = [int(sample(logits[[0] * 4], sampling.row_params([params[0]], [pos], 4))[0]) for pos in range(40)]
    assert len(set(draws)) > 3  # positions give independent draws
    greedy = np.asarray(sample(logits, sampling.row_params([], [], 4)))
    np.testing.assert_array_equal(greedy, logits.argmax(-1))


def test_sampling_matches_its_distribution_on_many_positions():
    """Over 4000 positions the draws of one row follow ``probabilities`` (chi-square, p < 1e-6 to fail)."""
    logits = np.random.default_rng(2).normal(size=(1, V)).astype(np.float32)
    p = request.SamplingParams(1.0, 6, 0.95, 9)
    n = 4000
    rp = sampling.row_params([p] * n, list(range(n)), n)
    draws = np.asarray(jax.jit(sampling.sample)(np.repeat(logits, n, 0), rp))
    probs = np.asarray(jax.jit(sampling.probabilities)(logits, sampling.row_params([p], [0], 1)))[0]
    counts = np.bincount(draws, minlength=V)
    assert counts[probs == 0].sum() == 0
    kept = probs > 0
    chi2 = (((counts[kept] - n * probs[kept]) ** 2) / (n * probs[kept])).sum()
    assert chi2 < 40.0, (chi2, counts, probs)  # chi-square with <= 5 degrees of freedom: P(> 40) < 2e-7


def test_row_params_checks_its_sizes():
    with pytest.raises(ValueError, match="do not fit 1 rows"):
        sampling.row_params([request.SamplingParams()] * 2, [0, 1], 1)
