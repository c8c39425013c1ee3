"""The hierarchical gradient reduction across slices, priced (``multislice.reduction_time``).

The executed multislice step is checked with every other scheme in tests/test_parallel_schemes.py.
"""

import pytest

from scalelib import hardware, model
from scalelib.parallel import multislice


def test_hierarchical_reduction_beats_flat_dcn():
    cfg = model.small_config(d_model=4096, d_ff=16384, n_layers=32, n_heads=32, n_kv_heads=8, head_dim=128)
    t = multislice.model_reduction_time(cfg, n_slices=4, slice_chips=256, chip=hardware.TPU_V5P)
    assert t.flat_dcn_all_reduce_s == pytest.approx(256 * t.dcn_all_reduce_s)  # DCN moves 1/X of the bytes
    assert t.hierarchical_s < t.flat_dcn_all_reduce_s and t.speedup > 10


def test_reduction_time_rejects_bad_sizes():
    with pytest.raises(ValueError, match="n_slices must be a positive int, got 0"):
        multislice.reduction_time(1e9, 0, 8, hardware.TPU_V5P)
