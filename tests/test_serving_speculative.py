"""scalelib.serving.speculative: the acceptance rule keeps the target's distribution, exactly.

Exactness is checked by enumeration on a tiny vocabulary with the rule's own pieces
(``acceptance_probability``, ``residual``): the first emitted token is distributed as the target's
p, and with k = 2 the first two emitted tokens as p(x1) p(x2 | x1), for context-dependent draft
and target distributions. ``verify`` is then held to those pieces at the boundaries of its
uniform draws. End to end, greedy speculative decoding returns the target's greedy tokens
(``inference.decode``), with a draft that disagrees and one that always agrees.
"""

import itertools

import jax
import numpy as np
import pytest

from scalelib import model
from scalelib.serving import request, speculative
from tests.serving_common import (  # noqa: F401
    CFG,
    MAX_NEW,
    PROMPTS,
    fast_compiles,
    no_block_leaks,
    params,
    plain,
)

V = 4
ATOL = 1e-6


def _dist(rng, zeros=0):
    p = rng.random(V) + 0.05
    p[rng.permutation(V)[:zeros]] = 0
    return (p / p.sum()).astype(np.float32)


PAIRS = [(0, 0), (1, 0), (0, 2), (2, 1), (0, 3), (3, 3)]  # zeros in p, zeros in q


@pytest.mark.parametrize("zp, zq", PAIRS)
def test_first_emitted_token_is_distributed_as_the_target(zp, zq):
    rng = np.random.default_rng(zp * 10 + zq)
    p, q = _dist(rng, zp), _dist(rng, zq)
    a = np.asarray(speculative.acceptance_probability(p, q))
    r = np.asarray(speculative.residual(p, q))
    emitted = sum(q[d] * (a[d] * np.eye(V)[d] + (1 - a[d]) * r) for d in range(V))
    np.testing.assert_allclose(emitted, p, atol=ATOL)
    same = np.asarray(speculative.residual(p, p))
    np.testing.assert_allclose(same, p, atol=ATOL)  # nothing to correct: never used, but well defined


def test_two_emitted_tokens_are_distributed_as_the_target_by_enumeration():
    rng = np.random.default_rng(7)
    target = {ctx: _dist(rng, len(ctx)) for n in range(3) for ctx in itertools.product(range(V), repeat=n)}
    draft = {ctx: _dist(rng, 1) for ctx in target}

    def a(ctx, x):
        return float(np.asarray(speculative.acceptance_probability(target[ctx], draft[ctx]))[x])

    def res(ctx):
        return np.asarray(speculative.residual(target[ctx], draft[ctx]))

    def first_round(ctx):  # k = 1 from ctx: distribution of the one token it emits for sure
        return sum(draft[ctx][d] * (a(ctx, d) * np.eye(V)[d] + (1 - a(ctx, d)) * res(ctx)) for d in range(V))

    joint = np.zeros((V, V))
    for d1, d2 in itertools.product(range(V), repeat=2):  # one round with k = 2 drafts
        w = draft[()][d1] * draft[(d1,)][d2]
        joint[d1] += w * a((), d1) * (a((d1,), d2) * np.eye(V)[d2] + (1 - a((d1,), d2)) * res((d1,)))
        for x1 in range(V):  # d1 rejected: x1 from the residual, x2 from the next round
            joint[x1] += w * (1 - a((), d1)) * res(())[x1] * first_round((x1,))
    want = target[()][:, None] * np.stack([target[(x,)] for x in range(V)])
    np.testing.assert_allclose(joint, want, atol=ATOL)


def test_verify_follows_its_pieces_at_the_boundaries_of_its_draws():
    rng = np.random.default_rng(1)
    k = 3
    p = np.stack([_dist(rng) for _ in range(k + 1)])
    q = np.stack([_dist(rng) for _ in range(k)])
    draft = np.array([0, 2, 1])
    a = np.asarray(speculative.acceptance_probability(p[:k], q))[np.arange(k), draft]
    verify = jax.jit(speculative.verify)
    for j in range(k + 1):  # accept the first j, reject the next (if any)
        u = np.where(np.arange(k) < j, a - 1e-4, np.minimum(a + 1e-4, 0.9999)).astype(np.float32)
        dist = np.asarray(speculative.residual(p[j], q[j])) if j < k else p[k]
        cdf = np.cumsum(dist)
        for x in range(V):
            if dist[x] < 1e-3:
                continue
            v = np.float32(cdf[x] - dist[x] / 2)  # inside token x's interval
            n, nxt = verify(p, q, draft, u, v)
            if j < k and a[j] >= 0.9999:
                continue  # this draft token cannot be rejected
            assert (int(n), int(nxt)) == (j, x)


def test_inverse_cdf_hits_each_token_on_its_interval():
    probs = np.array([0.1, 0.0, 0.6, 0.3], np.float32)
    got = [int(speculative.inverse_cdf(probs, np.float32(u))) for u in (0.0, 0.099, 0.1, 0.69, 0.71, 0.9999)]
    assert got == [0, 0, 2, 2, 3, 3]


def test_expected_tokens_per_round():
    assert speculative.expected_tokens_per_round(0.0, 4) == 1.0
    assert speculative.expected_tokens_per_round(1.0, 4) == 5.0
    assert speculative.expected_tokens_per_round(0.5, 2) == pytest.approx(1.75)
    stats = speculative.SpecStats(k=2, rounds=4, drafted=8, accepted=4, emitted=8)
    assert stats.acceptance_rate == 0.5 and stats.tokens_per_round == 2.0 and stats.expected_tokens_per_round == 1.75
    with pytest.raises(ValueError, match="acceptance must be a probability"):
        speculative.expected_tokens_per_round(1.5, 2)


@pytest.fixture(scope="module")
def other_draft():
    """A draft with the target's shapes but other weights: it disagrees, so most tokens are rejected."""
    return jax.jit(model.init, static_argnums=1)(jax.random.key(1), CFG)


@pytest.mark.parametrize("prompt", [PROMPTS[0], PROMPTS[1], PROMPTS[2][:1]])  # a one-token prompt too
def test_greedy_speculative_decoding_returns_the_targets_greedy_tokens(other_draft, prompt):
    req = request.request(prompt, MAX_NEW)
    target = (params(), CFG)
    out, stats = speculative.generate(target, (other_draft, CFG), req, 3)
    assert tuple(out) == plain(prompt) and stats.emitted == MAX_NEW
    assert stats.accepted < stats.drafted
    out, stats = speculative.generate(target, target, req, 3)  # the target as its own draft: all accepted
    assert tuple(out) == plain(prompt) and stats.accepted == stats.drafted and stats.rounds == -(-MAX_NEW // 4)


def test_sampled_speculative_decoding_is_reproducible_and_stops(other_draft):
    req = request.request(PROMPTS[0], MAX_NEW, temperature=1.0, seed=5)
    target = (params(), CFG)
    first, stats = speculative.generate(target, (other_draft, CFG), req, 3)
    again, _ = speculative.generate(target, (other_draft, CFG), req, 3)
    assert first == again and len(first) == MAX_NEW and 0 < stats.accepted < stats.drafted
    stop = request.request(PROMPTS[0], MAX_NEW, stop=[plain(PROMPTS[0])[2]])
    out, _ = speculative.generate(target, (other_draft, CFG), stop, 3)
    assert tuple(out) == plain(PROMPTS[0])[:3]


def test_bad_speculative_inputs_are_refused(other_draft):
    req = request.request([1, 2], 3)
    with pytest.raises(ValueError, match="k .draft tokens per round. must be a positive int"):
        speculative.generate((params(), CFG), (other_draft, CFG), req, 0)
    small = model.small_config(vocab_size=128)
    with pytest.raises(ValueError, match="draft and target must share a vocabulary"):
        speculative.generate((params(), CFG), (other_draft, small), req, 2)
    with pytest.raises(ValueError, match="token id 300 is outside the vocabulary of 256"):
        speculative.generate((params(), CFG), (other_draft, CFG), request.request([300], 2), 2)


def test_an_early_exit_draft_is_the_target_when_the_upper_layers_are_silenced():
    silenced = speculative.scale_upper_layers(params(), 1, 0.0)
    draft, draft_cfg = speculative.early_exit_draft(silenced, CFG, 1)
    assert draft_cfg.n_layers == 1 and draft["layers"]["wq"].shape[0] == 1
    tokens = np.asarray([PROMPTS[0]])
    forward = jax.jit(model.forward, static_argnums=2)
    np.testing.assert_allclose(forward(silenced, tokens, CFG), forward(draft, tokens, draft_cfg), rtol=1e-6, atol=1e-6)
    assert not np.allclose(forward(params(), tokens, CFG), forward(draft, tokens, draft_cfg), atol=1e-2)
    with pytest.raises(ValueError, match=r"layers must be an int in \[1, 2\)"):
        speculative.early_exit_draft(params(), CFG, 2)


@pytest.mark.parametrize("k", [1, 2])
def test_round_cells_cover_every_outcome_and_verify_emits_the_targets_distribution(k):
    rng = np.random.default_rng(11 + k)
    p = np.stack([_dist(rng, z) for z in [1, 0, 2][:k + 1]])
    q = np.stack([_dist(rng, z) for z in [0, 2][:k]])
    cells = speculative.round_cells(p, q)
    assert sum(c[3] for c in cells) == pytest.approx(1.0, abs=ATOL)
    verify = jax.jit(speculative.verify)
    first = np.zeros(V)
    second = np.zeros(V)  # second token emitted in the same round (after an accepted first draft)
    for draft, u, v, prob, emitted in cells:
        n, nxt = verify(p.astype(np.float32), q.astype(np.float32), np.array(draft), np.float32(u), np.float32(v))
        got = tuple(draft[:int(n)]) + (int(nxt),)
        assert got == emitted
        first[got[0]] += prob
        if len(got) > 1:
            second[got[1]] += prob
    np.testing.assert_allclose(first, p[0], atol=ATOL)
    if k > 1:  # given an accepted first draft, the next token follows the target's next row
        accepted = float(np.minimum(p[0], q[0]).sum())
        np.testing.assert_allclose(second, accepted * p[1], atol=ATOL)
