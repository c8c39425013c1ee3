"""scalelib.sharding: the book's A[I_X, J_Y]{U_Z} notation (section 3.1)."""

import jax
import matplotlib
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scalelib import compat
from scalelib.sharding import Sharding, parse, plot, render_text

matplotlib.use("Agg")
MESHES = [((2, 4), ("X", "Y")), ((4, 2), ("X", "Y")), ((8,), ("X",)), ((2, 2, 2), ("X", "Y", "Z"))]


@st.composite
def shardings(draw, axes=("X", "Y", "Z"), ndim=None):
    """A random valid sharding: each mesh axis goes to at most one dim, in a random order."""
    ndim = ndim or draw(st.integers(1, 3))
    dims = ("I", "J", "K")[:ndim]
    order = draw(st.permutations(axes))
    owner = [draw(st.integers(-1, ndim - 1)) for _ in order]
    per_dim = tuple(tuple(a for a, o in zip(order, owner) if o == d) for d in range(ndim))
    return Sharding(dims, per_dim)


def test_book_examples_parse_and_print():
    assert str(parse("A[I_X, J_Y]")) == "A[I_X, J_Y]"
    assert parse("A[I_X, J_Y]").spec == jax.sharding.PartitionSpec("X", "Y")
    assert parse("A[I_XY, J]").spec == jax.sharding.PartitionSpec(("X", "Y"), None)
    c = parse("C[I, K]{U_X}")
    assert c.unreduced == ("X",) and str(c) == "C[I, K]{U_X}"
    assert parse("A[B_{data,model}, D]").axes == (("data", "model"), ())
    assert str(parse("A[B_{data,model}, D]")) == "A[B_{data,model}, D]"


@given(shardings())
def test_text_and_spec_round_trip(s):
    assert Sharding.parse(str(s)) == s
    assert Sharding.from_spec(s.spec, s.dims, s.name) == s


@pytest.mark.parametrize("bad, words", [
    ("A[I_X, J_X]", "shards both I and J"),
    ("A[I_X, J]{U_X}", "both sharding I and unreduced"),
    ("A[I_X J]", "cannot read dimension"),
    ("A(I, J)", "cannot read sharding"),
    ("A[I, I]", "repeat"),
])
def test_invalid_shardings_say_why(bad, words):
    with pytest.raises(ValueError, match=words):
        parse(bad)


def test_size_errors_name_the_value_and_the_fix():
    with pytest.raises(ValueError, match=r"mesh axis 'X' has 3 devices .* dimension I has size 64, "
                                         r"which 3 does not divide; pick a mesh size that divides 64"):
        parse("A[I_X, J]").local_shape((64, 8), {"X": 3})
    with pytest.raises(ValueError, match="mesh only has axes"):
        parse("A[I_Z, J]").local_shape((64, 8), {"X": 2})
    with pytest.raises(ValueError, match="global shape"):
        parse("A[I_X, J]").local_shape((64,), {"X": 2})


def test_book_pop_quiz_bytes():
    # int8[128, 2048] as A[I_XY, J] on {X: 2, Y: 8, Z: 2}: int8[8, 2048] per device, 2 copies in all
    mesh = {"X": 2, "Y": 8, "Z": 2}
    a = parse("A[I_XY, J]")
    assert a.local_shape((128, 2048), mesh) == (8, 2048)
    assert a.local_bytes((128, 2048), mesh, 1) == 16384
    assert a.total_bytes((128, 2048), mesh, 1) == 2 * 128 * 2048
    assert a.replication(mesh) == 2


@pytest.mark.parametrize("shape, names", MESHES)
@settings(max_examples=15, deadline=None)
@given(data=st.data())
def test_blocks_match_jax_named_sharding(shape, names, data):
    s = data.draw(shardings(axes=names, ndim=2))
    mesh = compat.make_mesh(shape, names)
    gshape = (16, 8)
    jax_map = jax.sharding.NamedSharding(mesh, s.spec).devices_indices_map(gshape)
    ours = s.device_slices(gshape, mesh)
    for pos, device in enumerate(mesh.devices.flat):
        want = tuple(slice(sl.start or 0, sl.stop if sl.stop is not None else n) for sl, n in zip(jax_map[device], gshape))
        assert ours[pos] == want, (s, pos)
    per_device = s.local_bytes(gshape, mesh, 4)
    assert per_device == np.prod(gshape) * 4 / np.prod(s.shards(mesh))
    assert s.total_bytes(gshape, mesh, 4) == per_device * mesh.devices.size
    assert s.total_bytes(gshape, mesh, 4) == np.prod(gshape) * 4 * s.replication(mesh)


def test_holders_cover_every_device_once():
    s = parse("A[I_X, J]")
    held = s.holders({"X": 2, "Y": 4})
    assert held == {(0, 0): (0, 1, 2, 3), (1, 0): (4, 5, 6, 7)}


def test_text_picture():
    text = render_text("A[I_X, J_Y]", (4, 128), {"X": 2, "Y": 2}, dtype_bytes=2)
    lines = text.splitlines()
    assert "per device (2, 64)" in lines[0] and "256 bytes per device" in lines[0]
    assert lines[1].split() == ["J", "0:64", "J", "64:128"]
    assert lines[2].split() == ["I", "0:2", "d0", "d1"] and lines[3].split() == ["I", "2:4", "d2", "d3"]
    assert "d0,1" in render_text("A[I_X, J]", (4, 4), {"X": 2, "Y": 2})
    with pytest.raises(ValueError, match="only 1-D and 2-D"):
        render_text("A[I, J, K]", (2, 2, 2), {"X": 2})


def test_plot_returns_figure_and_axes():
    fig, ax = plot("A[I_XY, J]", (8, 4), {"X": 2, "Y": 2})
    assert len(ax.patches) == 4 and "A[I_XY, J]" in ax.get_title()
    fig2, ax2 = plot("A[J_Y]", (8,), {"X": 2, "Y": 2}, ax=ax)
    assert fig2 is fig
    matplotlib.pyplot.close(fig)
