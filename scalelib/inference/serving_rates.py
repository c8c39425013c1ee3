"""The serving engine's rates around prefill and generate: queries, servers, caches, dollars.

Book: section 7.4 (interleaved vs disaggregated serving: prefill servers hand their KV caches
over the network to generate servers; continuous batching refills slots as sequences finish;
prefix caching reuses the cache of a shared prompt start) and section 8 (which chip is cheapest
per FLOP, queries per second per chip, how fast a generate batch turns over, how many prefill
servers keep one generate server busy).

Step and prefill times come from ``step_time``; this module turns them into rates.
"""

from __future__ import annotations


from scalelib import roofline as rl
from scalelib.hardware import Chip, Dtype
from scalelib.validate import positive, positive_int
from scalelib.inference.replica_memory import Replica

SECONDS_PER_HOUR = 3600.0


def flops_per_usd(chip: Chip, dtype: Dtype = "bf16") -> float:
    """Peak FLOPs one dollar of rented chip time buys (section 8.1's choice of hardware)."""
    if chip.usd_per_hour is None:
        raise ValueError(f"scalelib.hardware has no hourly price for {chip.name}; "
                         "pick a chip with usd_per_hour set (H100, TPU v5p, TPU v5e)")
    return chip.flops_per_s(dtype) * SECONDS_PER_HOUR / chip.usd_per_hour


def tokens_per_s(batch: float, step_s: float) -> float:
    """Generate throughput: each step emits one token per sequence of the batch."""
    if batch < 0:
        raise ValueError(f"batch must be >= 0, got {batch!r}")
    return batch / positive("step_s", step_s)


def per_chip(rate: float, chips: int) -> float:
    """A replica's rate shared over its chips (what a chip-hour buys)."""
    return rate / positive_int("chips", chips)


def decode_time_s(step_s: float, decode_tokens: float) -> float:
    """Wall time to generate ``decode_tokens`` tokens, one step each."""
    if decode_tokens < 0:
        raise ValueError(f"decode_tokens must be >= 0, got {decode_tokens!r}")
    return positive("step_s", step_s) * decode_tokens


def queries_per_s(batch: float, step_s: float, decode_tokens: float) -> float:
    """Finished requests per second of a full generate batch: B / (step x decode length)."""
    return batch / decode_time_s(step_s, positive("decode_tokens", decode_tokens))


def sequences_finished_per_step(batch: float, decode_tokens: float) -> float:
    """On average a sequence ends every ``decode_tokens`` steps, so B / G of the batch per step."""
    return batch / positive("decode_tokens", decode_tokens)


def kv_tokens_evicted_per_step(batch: float, prefill_tokens: float, decode_tokens: float) -> float:
    """Cache tokens freed per step: each finished sequence releases its P + G cached tokens."""
    if prefill_tokens < 0:
        raise ValueError(f"prefill_tokens must be >= 0, got {prefill_tokens!r}")
    return sequences_finished_per_step(batch, decode_tokens) * (prefill_tokens + decode_tokens)


def prefill_servers_per_generate_server(prefill_s: float, step_s: float, batch: float, decode_tokens: float) -> float:
    """Prefill:generate servers that keep both busy in disaggregated serving.

    A prefill server turns out 1 / prefill_s sequences a second; a generate server retires
    ``queries_per_s`` of them. The ratio of the two is the number of prefill servers per
    generate server.
    """
    return queries_per_s(batch, step_s, decode_tokens) * positive("prefill_s", prefill_s)


def prefix_cache_compute_fraction(prompt_tokens: int, cached_tokens: int) -> float:
    """Share of a prompt's prefill work left when its first ``cached_tokens`` hit the prefix cache
    (token count only; attention's extra cost for later tokens is ignored)."""
    positive_int("prompt_tokens", prompt_tokens)
    if not (isinstance(cached_tokens, int) and not isinstance(cached_tokens, bool)
            and 0 <= cached_tokens <= prompt_tokens):
        raise ValueError(f"need ints 0 <= cached_tokens <= prompt_tokens, prompt_tokens >= 1; got "
                         f"cached_tokens={cached_tokens!r}, prompt_tokens={prompt_tokens!r}")
    return (prompt_tokens - cached_tokens) / prompt_tokens


def kv_transfer_s(kv_bytes: float, sender: Replica, receiver: Replica) -> float:
    """Moving a finished prefill's cache to a generate replica over the data-centre network.

    Both ends push / pull through their hosts' DCN links; the end with fewer hosts sets the pace.
    """
    rate = min(r.hosts * r.chip.dcn_bytes_per_s_per_host for r in (sender, receiver))
    return rl.comms_time_s(kv_bytes, rate)


def kv_transfer_share(kv_bytes: float, sender: Replica, receiver: Replica, prefill_s: float) -> float:
    """Transfer time over the prefill time it follows: small means disaggregation is nearly free."""
    return kv_transfer_s(kv_bytes, sender, receiver) / positive("prefill_s", prefill_s)
