"""scalelib.validate: the shared checks of numeric arguments, above all the one rule for counts (``positive_int``)."""

import fractions

import numpy as np
import pytest

from scalelib import hardware as hw
from scalelib import topology, transformer
from scalelib.inference import replica_memory
from scalelib.serving import block_pool
from scalelib.validate import positive_int


@pytest.mark.parametrize("value", [1, 2, 4096, 2**70])
def test_positive_ints_pass_unchanged(value):
    got = positive_int("chips", value)
    assert got == value and type(got) is int


@pytest.mark.parametrize("value", [np.int64(8), np.int32(1), np.uint8(3), np.array(5)[()]])
def test_numpy_integers_pass_as_python_ints(value):
    # sizes read from shapes or drawn with numpy.random arrive as NumPy integers: they are counts all the same
    got = positive_int("chips", value)
    assert got == int(value) and type(got) is int


@pytest.mark.parametrize("value, why", [
    (True, "of type bool"), (False, "of type bool"), (np.bool_(True), "of type bool"),  # a flag is not a count
    (0, "got 0; give a whole number >= 1"), (-3, "got -3; give a whole number >= 1"),
    (np.int64(0), "; give a whole number >= 1"),
    (2.0, "of type float"), (1.5, "of type float"), (np.float64(4.0), "of type float64"),
    (float("nan"), "of type float"), (float("inf"), "of type float"),
    (fractions.Fraction(2, 1), "of type Fraction"), ("8", "of type str"), (None, "of type NoneType"),
])
def test_everything_else_is_refused_with_its_name_and_what_to_give(value, why):
    with pytest.raises(ValueError) as err:
        positive_int("chips", value)
    text = str(err.value)
    assert text.startswith("chips must be a positive int, got ") and why in text and "whole number >= 1" in text


def test_jax_scalars_are_refused():
    jnp = pytest.importorskip("jax.numpy")
    with pytest.raises(ValueError, match="chips must be a positive int"):
        positive_int("chips", jnp.int32(4))  # a traced value would be no count at trace time


@pytest.mark.parametrize("make, stored", [
    (lambda v: replica_memory.Replica(hw.TPU_V5E, v), lambda r: r.chips),
    (lambda v: topology.Slice(hw.TPU_V5E, (v, 4)), lambda s: s.shape[0]),
    (lambda v: block_pool.BlockPool(v, 16), lambda p: p.num_blocks),
    (lambda v: transformer.dense_mha_config(128, v, 100), lambda c: c.n_layers),
])
def test_call_sites_share_the_rule(make, stored):
    for bad in (True, 0, -1, 2.0):
        with pytest.raises(ValueError, match="must be a positive int"):
            make(bad)
    got = stored(make(np.int64(2)))  # a NumPy count is kept as a Python int
    assert got == 2 and type(got) is int
