import matplotlib.pyplot as plt
import pytest

from scalelib import hardware as hw
from scalelib import plotting
from scalelib.gpus import fabric as fb


def test_plots_draw_lines_and_return_axes():
    ax = plotting.chip_rooflines([hw.TPU_V5E, hw.H100])
    assert len(ax.get_lines()) >= 2 and ax.get_xscale() == "log"
    ax = plotting.roofline_plot([("a", 1e12, 1e10)], [("op", 1.0, 1e10)])
    assert any(t.get_text() == "op" for t in ax.texts)
    ax = plotting.matmul_intensity_plot(hw.TPU_V5E, 1024, 4096, [1, 10, 100])
    assert len(ax.get_lines()) == 2
    ax = plotting.two_chip_matmul_plot(8, 1024, [256, 1024, 65536], 1e14, 1e10)
    assert len(ax.get_lines()) == 3
    plt.close("all")


def test_fat_tree_plot_has_one_group_per_level():
    levels = fb.H100_SUPERPOD.levels()
    ax = plotting.fat_tree_bandwidths(levels)
    assert len(ax.containers) == 2 and all(len(c) == len(levels) for c in ax.containers)
    (dots,) = ax.get_lines()
    assert list(dots.get_ydata()) == [lv.collective_bytes_per_s for lv in levels]
    assert [t.get_text().split("\n")[0] for t in ax.get_xticklabels()] == ["node", "leaf", "spine"]
    assert ax.get_yscale() == "log"
    with pytest.raises(ValueError, match="levels is empty"):
        plotting.fat_tree_bandwidths([])
    plt.close("all")
