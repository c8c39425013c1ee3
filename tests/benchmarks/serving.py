"""Serving benchmarks (python -m tests.benchmarks --serving): figures side by side in one run, nothing asserted.

* continuous batching (scalelib.serving.engine) against static batching (serving.static: fixed batches, padded to
  the longest prompt, each batch generating until its longest answer is done) on 64 requests of mixed lengths,
  answers uniform or long-tailed: tokens/s and their ratio, p50/p99 time to first token (every request arrives at
  the start); the engine once with as many rows as a static batch, once with the same KV memory and more rows;
* a shared-prefix workload with and without prefix caching: prompt tokens computed, time to first token, ratios;
* speculative decoding (serving.speculative) against the plain decode (inference.decode.generate, the same
  target): draft tokens accepted per round against the expectation for the measured acceptance rate, and speed.

Every timed run follows an identical warm-up run, so compiling is not timed.

"same tokens" compares the greedy answers of two ways of serving. They are equal only while each way computes the
logits alike: batched with other requests, chunked differently or padded, a matmul may round differently (on a GPU,
float32 matmuls run in TF32 unless the precision is "highest"), and where two tokens nearly tie the argmax can
flip, after which the answers part. So where they differ the line says how many requests and where the first one
parted; ``--highest`` runs everything at "highest" matmul precision, to tell such rounding from a scheduling bug.
"""

from __future__ import annotations

import time

import jax
import jax.numpy as jnp
import numpy as np

from scalelib import model
from scalelib import transformer as tf
from scalelib.inference import decode
from scalelib.serving import engine, metrics, paged, request, speculative, static

MIXED_CFG = model.small_config(d_model=256, n_layers=4, n_heads=4, n_kv_heads=2, head_dim=64, d_ff=768, vocab_size=512,
                               name="bench-4L")
SPEC_CFG = model.small_config(d_model=512, n_layers=8, n_heads=8, n_kv_heads=4, head_dim=64, d_ff=1536,
                              vocab_size=1024, name="bench-8L")


def _init(cfg):
    return jax.jit(model.init, static_argnums=1)(jax.random.key(0), cfg)


def mixed_requests(n: int = 64, seed: int = 0, long_tailed: bool = False) -> list[request.Request]:
    """Prompts of 8-127 tokens; answers of 8-127 tokens, uniform or log-uniform (many short, a few long, as in chat)."""
    rng = np.random.default_rng(seed)
    reqs = []
    for _ in range(n):
        prompt = rng.integers(0, MIXED_CFG.vocab_size, int(rng.integers(8, 128))).tolist()
        answer = int(np.exp(rng.uniform(np.log(8), np.log(128)))) if long_tailed else int(rng.integers(8, 128))
        reqs.append(request.request(prompt, answer))
    return reqs


def shared_prefix_requests(n: int = 64, prefix: int = 192, seed: int = 1) -> list[request.Request]:
    rng = np.random.default_rng(seed)
    system = rng.integers(0, MIXED_CFG.vocab_size, prefix).tolist()
    return [request.request(system + rng.integers(0, MIXED_CFG.vocab_size, int(rng.integers(8, 32))).tolist(), 16)
            for _ in range(n)]


def _timed(fn):
    """Run ``fn`` once to compile, then time it; returns (result, seconds)."""
    fn()
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def agreement(a: list, b: list) -> str:
    """How many requests got the same tokens both ways; where they did not, where the first one parted."""
    differ = [(i, x.tokens, y.tokens) for i, (x, y) in enumerate(zip(a, b, strict=True)) if x.tokens != y.tokens]
    if not differ:
        return f"yes, all {len(a)} requests"
    i, x, y = differ[0]
    at = next((j for j, (s, t) in enumerate(zip(x, y)) if s != t), min(len(x), len(y)))
    return f"NO, {len(a) - len(differ)} of {len(a)} requests (request {i} first parts at new token {at} of {len(x)})"


def _row(name: str, s: metrics.Summary, extra: str = "") -> str:
    return (f"{name:28s} {s.tokens_per_s:9.1f} {s.ttft_p50_s:8.3f} {s.ttft_p99_s:8.3f} {s.steps:6d} "
            f"{s.prefill_tokens:8d} {extra}")


HEADER = f"{'':28s} {'tokens/s':>9s} {'TTFT p50':>8s} {'TTFT p99':>8s} {'steps':>6s} {'prefill':>8s}"


def continuous_vs_static(batch: int = 16, long_tailed: bool = False) -> None:
    """Static batches of ``batch`` against the engine, first with the same number of rows, then with the same KV memory.

    Static batching reserves a whole context (prompt + longest answer, up to ``max_context``) per row, so its
    batch of 16 needs 16 x 256 token slots; the engine's pool has exactly those 4096 slots (256 blocks of 16)
    and, handing out blocks as sequences grow, fits more sequences in them: that is paging's gain.
    """
    params, reqs = _init(MIXED_CFG), mixed_requests(long_tailed=long_tailed)
    same_rows = engine.EngineConfig(num_blocks=256, block_size=16, max_running=batch, token_budget=128,
                                    max_context=256)
    same_memory = engine.EngineConfig(num_blocks=256, block_size=16, max_running=4 * batch, token_budget=128,
                                      max_context=256)

    def run_engine(cfg: engine.EngineConfig):
        eng = engine.Engine(params, MIXED_CFG, cfg)
        return eng.run(reqs), eng

    (res_s, rec_s), _ = _timed(lambda: static.serve_static(params, MIXED_CFG, reqs, batch, same_rows.block_size))
    s = metrics.summarize(res_s, rec_s)
    padded = sum(r.padded_tokens for r in rec_s if r.entries and r.entries[0][2] == "prefill")
    answers = "log-uniform" if long_tailed else "uniform"
    mean = np.mean([r.max_tokens for r in reqs])
    print(f"\ncontinuous vs static batching: {len(reqs)} requests, prompts 8-127 tokens, answers 8-127 tokens "
          f"({answers}, mean {mean:.0f}), "
          f"{MIXED_CFG.name} ({tf.param_counts(MIXED_CFG).total / 1e6:.1f}M params), batch {batch}; "
          f"KV pool {same_rows.num_blocks} blocks x {same_rows.block_size} = {batch} x {same_rows.max_context} slots")
    print(HEADER)
    print(_row(f"static (batches of {batch})", s, f"(padded prefill tokens run: {padded})"))
    for label, cfg in ((f"engine, <= {batch} running", same_rows), (f"engine, <= {4 * batch} running", same_memory)):
        (res_e, eng), _ = _timed(lambda cfg=cfg: run_engine(cfg))
        e = metrics.summarize(res_e, eng.records)
        print(_row(label, e, f"({eng.compiled_programs} compiled step shapes, "
                             f"{sum(r.preemptions for r in res_e)} preemptions)"))
        same = agreement(res_s, res_e)
        print(f"  {label} / static: {e.tokens_per_s / s.tokens_per_s:.2f}x tokens/s, "
              f"TTFT p50 {s.ttft_p50_s / e.ttft_p50_s:.2f}x and p99 {s.ttft_p99_s / e.ttft_p99_s:.2f}x lower; "
              f"same tokens: {same}")


def prefix_caching() -> None:
    params, reqs = _init(MIXED_CFG), shared_prefix_requests()
    rows = {}
    for on in (False, True):
        cfg = engine.EngineConfig(num_blocks=256, block_size=16, max_running=16, token_budget=256, max_context=256,
                                  prefix_caching=on)

        def run(cfg=cfg):
            eng = engine.Engine(params, MIXED_CFG, cfg)
            return eng.run(reqs), eng
        (res, eng), _ = _timed(run)
        rows[on] = (metrics.summarize(res, eng.records), eng.cache.stats, res)
    print(f"\nprefix caching: {len(reqs)} requests sharing a 192-token system prompt, 8-31 own tokens, 16 new tokens")
    print(HEADER)
    for on in (False, True):
        s, stats, _ = rows[on]
        print(_row("prefix cache " + ("on" if on else "off"), s, f"(hit rate {stats.hit_rate:.2f})" if on else ""))
    (off, _, r_off), (on, _, r_on) = rows[False], rows[True]
    print(f"on / off: {off.prefill_tokens / on.prefill_tokens:.2f}x fewer prompt tokens computed, "
          f"TTFT p50 {off.ttft_p50_s / on.ttft_p50_s:.2f}x lower, {on.tokens_per_s / off.tokens_per_s:.2f}x tokens/s; "
          f"same tokens: {agreement(r_off, r_on)}")


def speculative_decoding(new_tokens: int = 96, prompts: int = 4) -> None:
    target_params = speculative.scale_upper_layers(_init(SPEC_CFG), 1, 0.1)
    d_params, d_cfg = speculative.early_exit_draft(target_params, SPEC_CFG, 1)
    # Both sides get their weights unstacked once, before timing (as plain_params below): a server keeps them so.
    draft = (paged.unstacked(d_params), d_cfg)
    target = (paged.unstacked(target_params), SPEC_CFG)
    rng = np.random.default_rng(2)
    prompt_list = [rng.integers(0, SPEC_CFG.vocab_size, 32).tolist() for _ in range(prompts)]
    plain_params = decode.unstack_layers(target_params)
    generate = jax.jit(decode.generate, static_argnums=(2, 3))

    def plain():
        return [np.asarray(generate(plain_params, jnp.asarray([p]), SPEC_CFG, new_tokens)[0])[0].tolist()
                for p in prompt_list]
    ref, plain_s = _timed(plain)
    print(f"\nspeculative decoding: target {SPEC_CFG.name} ({tf.param_counts(SPEC_CFG).total / 1e6:.1f}M params, layers "
          f"2-8 damped x0.1), draft = its first layer; {prompts} prompts x {new_tokens} new tokens, one at a time")
    print(f"plain decode (inference.decode.generate): {prompts * new_tokens / plain_s:.1f} tokens/s")
    print(f"{'sampling':>9s} {'k':>2s} {'accept':>7s} {'tokens/round':>12s} {'expected':>9s} {'tokens/s':>9s} "
          f"{'speed-up':>8s} {'= plain':>7s}")
    for temperature in (0.0, 1.0):
        for k in (2, 4):
            reqs = [request.request(p, new_tokens, temperature=temperature, seed=i) for i, p in enumerate(prompt_list)]

            def spec(reqs=reqs, k=k):
                return [speculative.generate(target, draft, r, k) for r in reqs]
            out, spec_s = _timed(spec)
            rounds = sum(st.rounds for _, st in out)
            drafted, accepted = sum(st.drafted for _, st in out), sum(st.accepted for _, st in out)
            stats = speculative.SpecStats(k, rounds, drafted, accepted, sum(st.emitted for _, st in out))
            same = "yes" if temperature == 0 and [o for o, _ in out] == ref else ("-" if temperature else "NO")
            print(f"{'greedy' if temperature == 0 else 'T=1':>9s} {k:2d} {stats.acceptance_rate:7.2f} "
                  f"{stats.tokens_per_round:12.2f} {stats.expected_tokens_per_round:9.2f} "
                  f"{prompts * new_tokens / spec_s:9.1f} {plain_s / spec_s:7.2f}x {same:>7s}")


def eviction_policies(num_blocks: int = 48, block_size: int = 8) -> None:
    """The prefix cache's eviction policies on cache_lab's seeded traces (the block pool only: no model runs)."""
    from scalelib.serving import cache_lab

    print(f"\neviction policies: {num_blocks} blocks of {block_size} tokens, seeded traces (serving.cache_lab)")
    print(f"{'trace':15s} {'policy':6s} {'hit rate':>8s} {'recomputed':>10s} {'evictions':>9s} {'prefill/request':>15s}")
    for r in cache_lab.compare(num_blocks, block_size):
        print(f"{r.trace:15s} {r.policy:6s} {r.hit_rate:8.3f} {r.recomputed_tokens:10d} {r.evictions:9d} "
              f"{r.mean_prefill_tokens:15.1f}")


def main() -> None:
    precision = jax.config.jax_default_matmul_precision or "default"
    print(f"jax {jax.__version__}, {jax.devices()[0].platform}; one device, float32, matmul precision {precision}")
    continuous_vs_static()
    continuous_vs_static(long_tailed=True)
    prefix_caching()
    eviction_policies()
    speculative_decoding()
