"""Pipeline timetables (scalelib.parallel.schedule): GPipe and 1F1B as valid schedules, and their drawing.

The executed pipeline step is checked with every other scheme in tests/test_parallel_schemes.py.
"""

import math

import matplotlib.pyplot as plt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scalelib.parallel import schedule as pp


# ----------------------------------------------------------------------------- schedules

@settings(max_examples=60, deadline=None)
@given(kind=st.sampled_from(["gpipe", "1f1b"]), s=st.integers(1, 6), m=st.integers(1, 8))
def test_schedule_is_a_valid_timetable(kind, s, m):
    sched = pp.schedule(kind, s, m)
    when = {(o.op, o.stage, o.microbatch): o.time for o in sched.table}
    assert len(when) == len(sched.table) == 2 * s * m  # every op exactly once
    busy = [(o.time, o.stage) for o in sched.table]
    assert len(set(busy)) == len(busy)  # one op per stage per tick
    for i in range(m):
        for j in range(s):
            assert when[("F", j, i)] < when[("B", j, i)]
            if j:
                assert when[("F", j - 1, i)] < when[("F", j, i)]
                assert when[("B", j, i)] < when[("B", j - 1, i)]
    assert sched.n_ticks == 2 * (m + s - 1)
    assert math.isclose(sched.bubble_fraction, (s - 1) / (m + s - 1))
    peaks = sched.peak_in_flight()
    if kind == "gpipe":
        assert peaks == (m,) * s  # every microbatch's activations are held at once
    else:
        assert peaks == tuple(min(s - j, m) for j in range(s))  # stage 0 holds at most S


def test_schedule_rejects_unknown_kind_and_sizes():
    with pytest.raises(ValueError, match="gpipe"):
        pp.schedule("interleaved", 2, 2)
    with pytest.raises(ValueError, match="n_microbatches"):
        pp.schedule("1f1b", 2, 0)


def test_draw_schedule_draws_every_op():
    sched = pp.schedule("1f1b", 3, 4)
    fig, ax = pp.draw_schedule(sched)
    assert len(ax.collections) == len(sched.table) == 24 and len(ax.texts) == 24
    assert "bubble 33%" in ax.get_title()
    plt.close(fig)
