"""scalelib.plan_widget: the planner's controls, driven headlessly as a student turns them, and in JupyterLab in a
real Chromium (issue 52)."""

import contextlib
import io

import matplotlib
import pytest

from scalelib import plan_widget
from scalelib import training_plan as plan

matplotlib.use("Agg")


def test_every_value_of_every_control_gives_a_plan_or_says_why_not():
    controls = plan_widget.PlanControls(render=False)
    seen = set()
    for key, options in plan_widget.OPTIONS.items():
        for value in options:
            v = controls.set(**{key: value})
            assert v.values[key] == value
            if v.plan is None:
                assert v.text.startswith("no plan: ") and len(v.text) > 30, (key, value, v.text)
            else:
                assert v.text == v.plan.table() == plan.training(**v.values).table()  # the same call, no formula
            seen.add(v.plan is None)
        controls.set(**{key: plan_widget.DEFAULTS[key]})
    assert seen == {True, False}  # some values are impossible (a dense model's expert scheme), most are not


def test_moving_the_tensor_ways_changes_the_numbers_and_the_figure():
    controls = plan_widget.PlanControls(render=False)
    four, sixty_four = controls.set(tensor=4), controls.set(tensor=64)
    assert "tensor 4" in four.text and "tensor 64" in sixty_four.text
    assert four.plan and sixty_four.plan and sixty_four.plan.step_time_s > four.plan.step_time_s
    widths = []
    for v in (four, sixty_four):
        fig = plan_widget.draw(v)
        ax_time = fig.axes[1]
        widths.append(sum(p.get_width() for p in ax_time.patches))
    assert widths[1] == pytest.approx(sixty_four.plan.step_time_s) and widths[1] > widths[0]
    impossible = controls.set(scheme="expert")
    fig = plan_widget.draw(impossible)
    assert any("no plan" in t.get_text() for ax in fig.axes for t in ax.texts)


def test_without_a_front_end_the_cell_shows_the_default_plan_as_text_and_a_figure():
    from unittest import mock

    out, shown = io.StringIO(), []
    with contextlib.redirect_stdout(out), mock.patch("IPython.display.display", side_effect=shown.append):
        controls = plan_widget.show(tensor=8)
    assert out.getvalue().startswith(plan.training(tensor=8).table())
    assert [type(x).__name__ for x in shown] == ["Image", "VBox"]  # the figure as a PNG output, then the controls
    assert shown[0].data[:8] == b"\x89PNG\r\n\x1a\n"
    assert controls.dropdowns["tensor"].value == 8
    with pytest.raises(ValueError, match="unknown control"):
        plan_widget.PlanControls(tensors=8)


PLAN_NOTEBOOK = {
    "cells": [{"cell_type": "code", "execution_count": None, "id": "plan", "metadata": {}, "outputs": [],
               "source": ["from scalelib import plan_widget\n", "controls = plan_widget.show()"]}],
    "metadata": {"kernelspec": {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"},
                 "language_info": {"name": "python"}},
    "nbformat": 4, "nbformat_minor": 5,
}


@pytest.mark.student  # as a student meets it: once, in the floor suite (the JAX Colab ships)
def test_in_jupyterlab_the_widget_renders_and_turning_a_control_redraws_it(tmp_path):
    """JupyterLab (ipywidgets 8 and its lab extension) in Chromium: run the cell, see the controls and the plan;
    pick 64 tensor ways, see the text and the figure change. Screenshots of the widget before and after are kept
    in tmp_path (plan-before.png, plan-after.png) and must differ; a widget that does not render fails the wait."""
    import json

    from tests import formgrader_browser as fb

    sync_api = fb.browser_or_skip()
    (tmp_path / "plan.ipynb").write_text(json.dumps(PLAN_NOTEBOOK), encoding="utf-8")
    with fb.jupyter_server(tmp_path, tmp_path / "jupyter.log") as (base, token), fb.chromium_page(sync_api) as page:
        page.set_default_timeout(90_000)
        page.goto(f"{base}/lab/tree/plan.ipynb?token={token}")
        page.wait_for_selector(".jp-Notebook .jp-Cell")
        page.wait_for_selector("text=Python 3 (ipykernel) | Idle")  # the kernel is up (a cell run earlier is lost)
        page.click(".jp-Cell .jp-InputArea-editor")
        page.keyboard.press("Shift+Enter")
        tensor = page.locator(".widget-dropdown select").nth(list(plan_widget.OPTIONS).index("tensor"))
        try:
            tensor.wait_for()
        except Exception:
            page.screenshot(path=str(tmp_path / "page.png"))
            raise
        widget = page.locator(".jupyter-widgets.widget-vbox").first
        assert page.locator(".widget-dropdown select").count() == len(plan_widget.OPTIONS)
        page.wait_for_selector("text=data 2048 x tensor 4")  # the default plan, printed under the cell
        before = widget.screenshot(path=str(tmp_path / "plan-before.png"))
        tensor.select_option(label="64")
        page.wait_for_selector(".widget-output >> text=tensor 64")  # the controls' own output, redrawn
        page.wait_for_selector(".widget-output img")  # and its figure
        after = widget.screenshot(path=str(tmp_path / "plan-after.png"))
    assert len(before) > 2000 and len(after) > len(before) and before != after
