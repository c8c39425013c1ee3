"""scalelib.parallel.chip_memory: bytes per chip of a training step under each layout (sections 5.1.1, 6.2)."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scalelib import hardware as hw
from scalelib import transformer as tf
from scalelib.parallel import chip_memory
from scalelib.parallel.layout import Layout

V5P = hw.TPU_V5P
pow2 = st.integers(min_value=0, max_value=6).map(lambda k: 2**k)


@settings(max_examples=30, deadline=None)
@given(pow2, st.sampled_from(["full", "dots", "mlp_outputs", 4]))
def test_memory_per_chip_falls_with_fsdp_degree(x, remat):
    cfg = tf.preset("llama3-8b")
    a, b = (chip_memory.memory_per_chip(Layout("fsdp", data_axes=(n,)), cfg, 2**20, 4096, remat) for n in (x, 2 * x))
    assert b.total_bytes == pytest.approx(a.total_bytes / 2)
    dp = chip_memory.memory_per_chip(Layout("data", data_axes=(2 * x,)), cfg, 2**20, 4096, remat)
    assert dp.state_bytes >= b.state_bytes and dp.activations_bytes == pytest.approx(b.activations_bytes)


def test_memory_book_numbers():
    assert chip_memory.BOOK_ADAM.bytes_per_param == 10 and chip_memory.ADAM_WITH_GRADS.bytes_per_param == 12
    assert chip_memory.max_params_data_parallel(V5P) == pytest.approx(9.6e9)
    cfg = tf.preset("llama3-70b")
    whole = chip_memory.training_memory(cfg, 4e6, 4096, remat=4, n_params=70e9)
    assert whole.total_bytes == pytest.approx(21.672e12, rel=1e-4)
    assert chip_memory.min_chips_for_memory(whole, V5P) == 226
    assert chip_memory.min_chips_for_memory(96e9 * 225, V5P) == 225
    with pytest.raises(ValueError, match="remat"):
        chip_memory.activation_bytes(cfg, 1e6, 4096, "sometimes")
