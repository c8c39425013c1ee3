"""Static batching: the baseline that continuous batching is measured against.

Book: section 7.4 (the simplest engine prefills a batch of prompts, then generates until every
sequence of the batch is done; nobody joins or leaves in between).

Requests are taken in arrival order, ``batch_size`` at a time. A batch runs one prefill step of
batch x (longest prompt) tokens, shorter prompts padded, then generate steps of one token per row
until its longest answer is done; rows that finished early keep computing a padding token. Every
row reserves blocks for the longest request up front. It uses the same jitted step and the same
sampling as ``engine.Engine``, so the two differ only in scheduling, and produce the same tokens.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from collections.abc import Sequence

import numpy as np

from scalelib import model
from scalelib.serving import paged, sampling
from scalelib.serving.engine import Result, StepRecord
from scalelib.serving.request import Request
from scalelib.transformer import TransformerConfig
from scalelib.validate import positive_int


def _pad(a: np.ndarray, size: int, value: int = 0) -> np.ndarray:
    return np.pad(a, (0, size - len(a)), constant_values=value).astype(np.int32)


def serve_static(params: model.Params, cfg: TransformerConfig, requests: Sequence[Request], batch_size: int,
                 block_size: int = 16, clock: Callable[[], float] = time.perf_counter,
                 ) -> tuple[list[Result], list[StepRecord]]:
    """Serve ``requests`` (all arriving at the start) in fixed batches: (results in order, step records)."""
    batch_size = positive_int("batch_size", batch_size)
    if not requests:
        return [], []
    params = paged.unstacked(params)
    width = -(-max(len(r.prompt) + r.max_tokens for r in requests) // block_size)  # blocks per row
    num_blocks = batch_size * width
    dropped = num_blocks * block_size  # an out-of-range slot: padding writes nothing
    kv = paged.init_pool(cfg, num_blocks, block_size, params["embed"].dtype)
    tables = np.arange(num_blocks, dtype=np.int32).reshape(batch_size, width)  # row r owns blocks r*width..
    start, results = clock(), []
    records: list[StepRecord] = []
    for b0 in range(0, len(requests), batch_size):
        batch = list(requests[b0:b0 + batch_size])
        seqs = [list(r.prompt) for r in batch]
        first: list[float] = [0.0] * len(batch)
        finish: list[float] = [0.0] * len(batch)
        reasons: list[str | None] = [None] * len(batch)
        p_len = max(len(r.prompt) for r in batch)
        prefill = True
        while any(reason is None for reason in reasons):
            per_row = p_len if prefill else 1
            t = batch_size * per_row
            tokens, slots = np.zeros(t, np.int32), np.full(t, dropped, np.int32)
            positions = np.tile(np.arange(per_row, dtype=np.int32), batch_size)
            rows, out = np.repeat(np.arange(batch_size, dtype=np.int32), per_row), np.zeros(batch_size, np.int32)
            for row, seq in enumerate(seqs):
                live = reasons[row] is None
                pos = list(range(len(seq))) if prefill else [len(seq) - 1]
                for j, p in enumerate(pos):
                    i = row * per_row + j
                    tokens[i], positions[i] = seq[p], p
                    slots[i] = tables[row, p // block_size] * block_size + p % block_size if live else dropped
                out[row] = row * per_row + len(pos) - 1
            t_pad = paged.bucket(t, 8, 1 << (t - 1).bit_length())
            inp = paged.StepInput(_pad(tokens, t_pad), _pad(positions, t_pad), _pad(slots, t_pad, dropped),
                                  _pad(rows, t_pad), tables, out)
            rp = sampling.row_params([r.sampling for r in batch], [len(s) for s in seqs], batch_size)
            t0 = clock()
            new, kv = paged.step_jit(params, kv, inp, rp, cfg)
            new = np.asarray(new).tolist()
            now = clock()
            entries = []
            for row, r in enumerate(batch):
                if reasons[row] is not None:
                    continue
                entries.append((b0 + row, len(seqs[row]) if prefill else 1, "prefill" if prefill else "decode"))
                seqs[row].append(new[row])
                first[row] = now if prefill else first[row]
                if new[row] in r.stop or len(seqs[row]) - len(r.prompt) >= r.max_tokens:
                    finish[row], reasons[row] = now, "stop" if new[row] in r.stop else "length"
            records.append(StepRecord(len(records), t0, now, tuple(entries), (), t_pad, len(batch) * width, 0,
                                      num_blocks))  # a batch holds its reservation until it ends
            prefill = False
        for row, r in enumerate(batch):
            results.append(Result(b0 + row, r.prompt, tuple(seqs[row][len(r.prompt):]), str(reasons[row]), start,
                                  first[row], finish[row], 0, 0))
    return results, records
