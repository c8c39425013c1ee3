"""scalelib.systolic: the weight-stationary MXU model of section 2, Appendix B."""

import matplotlib
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from scalelib import hardware as hw
from scalelib.systolic import draw_cycle, draw_cycles, mxu_padding, simulate, tiled_matmul

matplotlib.use("Agg")
RTOL = 1e-12  # float64 sums of at most a few hundred terms


@st.composite
def int_operands(draw):
    m, k, n = (draw(st.integers(1, 6)) for _ in range(3))
    ints = st.integers(-50, 50)
    return draw(hnp.arrays(np.int64, (m, k), elements=ints)), draw(hnp.arrays(np.int64, (k, n), elements=ints))


@settings(max_examples=40, deadline=None)
@given(int_operands())
def test_integer_matmul_is_exact(ops):
    x, w = ops
    run = simulate(x, w)
    assert np.array_equal(run.result, x @ w)
    m, k, n = x.shape + w.shape[1:]
    assert run.load_cycles == k and run.compute_cycles == m + k + n - 2


@settings(max_examples=40, deadline=None)
@given(int_operands())
def test_dataflow_timing(ops):
    """X[m, k] sits in PE (k, n) at compute cycle m + k + n; Y[m, n] leaves at m + K - 1 + n."""
    x, w = ops
    run = simulate(x, w, load_weights=False)
    k_dim = x.shape[1]
    for c in run.cycles:
        for (k, n), m in np.ndenumerate(c.row):
            if m >= 0:
                assert m + k + n == c.t and c.x[k, n] == x[m, k]
        for m, n, value in c.outputs:
            assert c.t == m + k_dim - 1 + n and value == (x @ w)[m, n]
    assert sum(len(c.outputs) for c in run.cycles) == x.shape[0] * w.shape[1]


def test_weights_enter_from_the_top_row_by_row():
    w = np.arange(6.0).reshape(3, 2)
    run = simulate(np.ones((1, 3)), w)
    first = run.cycles[0].weights
    assert np.array_equal(first[0], w[2]) and np.isnan(first[1:]).all()
    assert np.array_equal(run.cycles[2].weights, w)


def test_float_matmul_and_tiling_against_numpy():
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((9, 5)), rng.standard_normal((5, 7))
    np.testing.assert_allclose(simulate(x, w).result, x @ w, rtol=RTOL, atol=RTOL)
    x, w = rng.standard_normal((3, 20)), rng.standard_normal((20, 11))
    out, cycles = tiled_matmul(x, w, 8)  # K: 3 tiles, N: 2 tiles, each padded to 8
    np.testing.assert_allclose(out, x @ w, rtol=RTOL, atol=RTOL)
    assert cycles == 6 * (8 + 3 + 8 + 8 - 2)


def test_utilization_rises_with_more_lhs_rows():
    w = np.ones((4, 4))
    few, many = simulate(np.ones((1, 4)), w), simulate(np.ones((64, 4)), w)
    assert few.utilization < 0.2 < 0.8 < many.utilization <= 1.0


def test_bad_shapes_are_explained():
    with pytest.raises(ValueError, match="equal K"):
        simulate(np.ones((2, 3)), np.ones((4, 2)))


def test_mxu_padding_book_sizes():
    assert mxu_padding(8, 128, 128, chip=hw.TPU_V5E).wasted_fraction == 0.0
    # a 129-wide weight pads to 256 on a 128 array: just over half is useful per padded dim
    assert mxu_padding(8, 129, 128, chip=hw.TPU_V5E).useful_fraction == pytest.approx(129 / 256)
    # v6e's 256x256 array wastes 3/4 on a 128x128 weight that v5e runs without padding
    assert mxu_padding(8, 128, 128, chip=hw.TPU_V6E).useful_fraction == pytest.approx(0.25)
    assert mxu_padding(1, 128, 128, mxu_dim=128).padded_shape == (8, 128, 128)
    with pytest.raises(ValueError, match="no MXU size"):
        mxu_padding(8, 128, 128, chip=hw.H100)
    with pytest.raises(ValueError, match="positive int"):
        mxu_padding(0, 128, 128, mxu_dim=128)


@given(st.integers(1, 1000), st.integers(1, 1000), st.integers(1, 1000), st.sampled_from([128, 256]))
def test_padding_never_shrinks_and_stays_within_one_tile(m, k, n, d):
    p = mxu_padding(m, k, n, mxu_dim=d)
    assert 0 < p.useful_fraction <= 1
    assert all(0 <= q - s < t for s, q, t in zip(p.shape, p.padded_shape, (8, d, d)))


def test_drawing_returns_figures():
    run = simulate(np.arange(6.0).reshape(2, 3), np.ones((3, 2)))
    fig, ax = draw_cycle(run.cycles[4])
    assert ax.get_title().startswith("cycle 4")
    grid = draw_cycles(run, ts=[0, 3, 5], ncols=2)
    assert len(grid.axes) == 4
    matplotlib.pyplot.close("all")


def test_the_cycle_drawings_text_is_readable_and_fits_its_pe():
    """Issue 49 (chapter 2's figure text was a few points): every text of the figure chapter 2 draws is at least
    8 points at a width a notebook shows unscaled (under 8 inches), and each PE's text stays inside its square."""
    rs = np.random.default_rng(0)
    run = simulate(rs.integers(1, 5, (2, 3)).astype(float), rs.integers(1, 5, (3, 3)).astype(float))
    fig = draw_cycles(run, ts=[2, 3, 5, 7])
    try:
        assert fig.get_size_inches()[0] <= 8.0, fig.get_size_inches()
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()
        for ax in fig.axes:
            texts = [ax.title, ax.xaxis.label, ax.yaxis.label, *ax.texts, *ax.get_xticklabels(), *ax.get_yticklabels()]
            assert min(t.get_fontsize() for t in texts if t.get_text()) >= 8, ax.get_title()
            for t in ax.texts:
                n, k = t.get_position()
                box = t.get_window_extent(renderer)
                (x0, y0), (x1, y1) = ax.transData.transform([(n - 0.5, k + 0.5), (n + 0.5, k - 0.5)])
                assert x0 <= box.x0 and box.x1 <= x1 and y0 <= box.y0 and box.y1 <= y1, (ax.get_title(), t.get_text())
    finally:
        matplotlib.pyplot.close("all")
