"""Shared pieces of the tests/test_serving_*.py modules.

A tiny model, prompts that share prefixes (two lengths only, so the plain decode compiles twice),
greedy references from ``inference.decode.generate`` on each prompt alone, and the block-leak
check that runs after every test: every ``BlockPool`` made during a test must satisfy its
invariants (used + free == pool size, no negative refcount), and every engine left without work
must hold no block.
"""

from __future__ import annotations

from functools import cache

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from scalelib import compat, model
from scalelib.inference import decode
from scalelib.serving import block_pool, engine

CFG = model.small_config()
MAX_NEW = 10  # the references hold this many greedy tokens; requests ask for at most as many
_rng = np.random.default_rng(2024)
_BASE = _rng.integers(0, CFG.vocab_size, 16).tolist()


def _rand(n: int) -> list[int]:
    return _rng.integers(0, CFG.vocab_size, n).tolist()


PROMPTS: tuple[tuple[int, ...], ...] = tuple(tuple(p) for p in (
    _rand(7), _rand(7), _BASE[:4] + _rand(3),
    _BASE + _rand(3), _BASE + _rand(3), _BASE[:8] + _rand(11), _rand(19), _BASE[:4] + _rand(15)))
MAX_CONTEXT = 32


@cache
def params() -> model.Params:
    return jax.jit(model.init, static_argnums=1)(jax.random.key(0), CFG)


_generate = jax.jit(decode.generate, static_argnums=(2, 3))


@cache
def plain(prompt: tuple[int, ...]) -> tuple[int, ...]:
    """MAX_NEW greedy tokens of the plain KV-cached decode of ``prompt`` alone."""
    tokens, _ = _generate(params(), jnp.asarray([prompt], jnp.int32), CFG, MAX_NEW)
    return tuple(np.asarray(tokens[0]).tolist())


def config(**changes) -> engine.EngineConfig:
    """A test engine: every step shape pinned but the block size (one compiled step per block size)."""
    base = {"num_blocks": 32, "array_blocks": 64, "block_size": 4, "max_running": 4, "token_budget": 16,
            "max_context": MAX_CONTEXT, "min_token_bucket": 16, "min_rows_bucket": 4, "check_blocks": True}
    base.update(changes)
    return engine.EngineConfig(**base, min_width_bucket=-(-MAX_CONTEXT // base["block_size"]))


@pytest.fixture(scope="module", autouse=True)
def fast_compiles():
    """Compile with XLA's LLVM optimizations off for this module (same HLO; both sides of every comparison)."""
    before = jax.config.read("jax_disable_most_optimizations")
    compat.fast_compiles(True)
    yield
    compat.fast_compiles(before)


@pytest.fixture(autouse=True)
def no_block_leaks(monkeypatch):
    pools: list[block_pool.BlockPool] = []
    engines: list[engine.Engine] = []
    pool_init, engine_init = block_pool.BlockPool.__init__, engine.Engine.__init__

    def record_pool(self, *a, **k):
        pool_init(self, *a, **k)
        pools.append(self)

    def record_engine(self, *a, **k):
        engine_init(self, *a, **k)
        engines.append(self)

    monkeypatch.setattr(block_pool.BlockPool, "__init__", record_pool)
    monkeypatch.setattr(engine.Engine, "__init__", record_engine)
    yield
    for pool in pools:
        pool.check()
    for eng in engines:
        if not eng.has_work:
            assert eng.pool.num_used == 0, f"an idle engine still holds {eng.pool.num_used} blocks"
