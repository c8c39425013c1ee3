"""scalelib.serving.metrics on hand-made results: TTFT, TPOT, throughput and percentiles."""

import pytest

from scalelib.serving import metrics
from scalelib.serving.engine import Result, StepRecord
from tests.serving_common import no_block_leaks  # noqa: F401


def _result(i, arrival, first, finish, n):
    return Result(i, (1,), tuple(range(n)), "length", arrival, first, finish, 0, 0)


def _record(i, start, end, entries):
    return StepRecord(i, start, end, entries, (), 8, 0, 0, 4)


def test_per_request_times():
    r = _result(0, 1.0, 1.5, 3.5, 5)
    assert metrics.ttft_s(r) == 0.5 and metrics.tpot_s(r) == 0.5
    assert metrics.tpot_s(_result(1, 0.0, 2.0, 2.0, 1)) == 0.0


def test_summary():
    results = [_result(0, 0.0, 1.0, 3.0, 3), _result(1, 1.0, 4.0, 6.0, 5)]
    records = [_record(0, 0.0, 1.0, ((0, 4, "prefill"),)), _record(1, 1.0, 6.0, ((0, 1, "decode"), (1, 7, "prefill")))]
    s = metrics.summarize(results, records)
    assert (s.requests, s.output_tokens, s.prefill_tokens, s.steps, s.wall_s) == (2, 8, 11, 2, 6.0)
    assert s.tokens_per_s == pytest.approx(8 / 6) and s.ttft_p50_s == pytest.approx(2.0)
    assert s.ttft_p99_s == pytest.approx(1.0 + 0.99 * 2.0) and s.tpot_mean_s == pytest.approx((1.0 + 0.5) / 2)
    with pytest.raises(ValueError, match="at least one finished request"):
        metrics.summarize([], records)
