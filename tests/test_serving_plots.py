"""scalelib.serving.plots draw what the records say (points per kind, the occupancy stack)."""

import matplotlib.pyplot as plt

from scalelib.serving import plots
from scalelib.serving.engine import StepRecord
from tests.serving_common import no_block_leaks  # noqa: F401

RECORDS = [
    StepRecord(0, 0.0, 1.0, ((0, 8, "prefill"), (1, 4, "prefill")), (), 16, 3, 0, 6),
    StepRecord(1, 1.0, 2.0, ((0, 1, "decode"), (1, 4, "prefill")), (2,), 16, 5, 1, 6),
    StepRecord(2, 2.0, 3.0, ((1, 1, "decode"),), (), 8, 2, 3, 6),
]


def test_timeline_marks_each_scheduled_sequence_and_preemption():
    ax = plots.timeline(RECORDS)
    counts = {c.get_label(): len(c.get_offsets()) for c in ax.collections}
    assert counts == {"prefill": 3, "decode": 2, "preempted": 1}
    plt.close(ax.figure)


def test_occupancy_stacks_used_and_cached_blocks_under_the_pool_size():
    ax = plots.occupancy(RECORDS)
    assert [c.get_label() for c in ax.collections] == ["in use", "free, cached prefix"]
    tops = ax.collections[1].get_paths()[0].vertices[:, 1].max()
    assert tops == max(r.used_blocks + r.cached_free_blocks for r in RECORDS) and ax.lines[0].get_ydata()[0] == 6
    plt.close(ax.figure)
