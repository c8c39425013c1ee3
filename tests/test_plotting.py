import matplotlib.pyplot as plt

from scalelib import hardware as hw
from scalelib import plotting


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
