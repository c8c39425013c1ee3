"""The planner as controls: pick a model, a chip, a count and a layout, and see the plan change.

Book: sections 5 and 6 (memory per chip and step time of a training layout; the thresholds). A thin
view over ``scalelib.training_plan.training``: every number shown is that call's, and no formula lives here.

Built on ipywidgets and matplotlib, the two that every place a student works already has: Colab ships
ipywidgets (its own 7.x) and renders it, JupyterLab renders ipywidgets 8 through its lab extension, and
both draw matplotlib figures inline. Where nothing renders widgets (nbval, Run All in a bare kernel, a
script) the cell still shows the default plan as text and a figure: ``show`` prints and draws those first,
then adds the controls, whose own output area follows every change. ``PlanControls.set`` drives the same
callbacks without a front end (the tests turn every control through every value that way).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from scalelib import hardware
from scalelib import training_plan as plan
from scalelib import transformer as tf
from scalelib.parallel import registry

# What each control offers (the first is the default unless ``show`` is given another).
OPTIONS: dict[str, tuple[Any, ...]] = {
    "model": tuple(tf.PRESETS),
    "chip": tuple(hardware.CHIPS),
    "chips": (8960, 8192, 4096, 2048, 1024, 512, 256, 128, 64, 32, 16, 8),
    "scheme": registry.names(),
    "tensor": (None, 1, 2, 4, 8, 16, 32, 64),
    "pipeline": (1, 2, 4, 8, 16),
    "global_batch_tokens": tuple(2**k for k in range(24, 16, -1)),
    "seq_len": (4096, 2048, 8192, 16384),
    "remat": plan.REMATS,
    "mfu": (0.4, 0.3, 0.5, 0.6),
}
DEFAULTS = {"model": "llama3-70b", "chip": "TPU v5p", "chips": 8960, "scheme": "fsdp_tp", "tensor": None,
            "pipeline": 1, "global_batch_tokens": 2**22, "seq_len": 4096, "remat": "full", "mfu": 0.4}
_LABELS = {"tensor": lambda v: "planner's" if v is None else str(v),
           "global_batch_tokens": lambda v: f"{v / 2**20:g}M tokens" if v >= 2**20 else f"{v / 2**10:g}K tokens",
           "remat": lambda v: f"{v} checkpoints" if isinstance(v, int) else str(v)}


@dataclass(frozen=True)
class View:
    """What the widget shows for one set of values: the plan's table, or why there is none."""

    values: Mapping[str, Any]
    plan: plan.Plan | None
    text: str


def view(values: Mapping[str, Any], n_params: float | None = None) -> View:
    """The plan for ``values`` (``DEFAULTS``' keys), or a message saying what to change."""
    try:
        p = plan.training(**values, n_params=n_params)
    except ValueError as err:
        return View(dict(values), None, f"no plan: {err}")
    return View(dict(values), p, p.table())


def draw(v: View, fig: Any = None) -> Any:
    """Memory per chip by part against HBM, and step time by part, as two bar charts (the figure, for a plan)."""
    import matplotlib.pyplot as plt

    fig = fig or plt.figure(figsize=(9, 3.2))
    fig.clear()
    ax_m, ax_t = fig.subplots(1, 2)
    if v.plan is None:
        for ax in (ax_m, ax_t):
            ax.axis("off")
        ax_m.text(0, 0.5, v.text, wrap=True, fontsize=9, va="center")
        return fig
    p, gib = v.plan, 2**30
    left = 0.0
    for name, value in (("parameters", p.memory.params_bytes), ("gradients", p.memory.grads_bytes),
                        ("optimizer", p.memory.optimizer_bytes), ("activations", p.memory.activations_bytes)):
        ax_m.barh(0, value / gib, left=left, label=name)
        left += value / gib
    ax_m.axvline(p.hbm_bytes / gib, color="k", ls="--", label=f"HBM {p.hbm_bytes / gib:.0f} GiB")
    ax_m.set(yticks=[], xlabel="GiB per chip", title="fits" if p.fits else "does not fit")
    ax_m.legend(fontsize=8, loc="upper right")
    left = 0.0
    for name, value in (("compute", p.compute_s), ("exposed comms", p.exposed_comms_s), ("bubble", p.bubble_s)):
        ax_t.barh(0, value, left=left, label=name)
        left += value
    ax_t.set(yticks=[], xlabel="seconds per step", title=f"waiting on {p.bound}")
    ax_t.legend(fontsize=8, loc="upper right")
    fig.suptitle(f"{p.model} on {p.chips} x {p.chip.name}: {p.scheme}, tensor {p.layout.model_ways}, "
                 f"pipeline {p.layout.stages}", fontsize=10)
    fig.tight_layout()
    return fig


class PlanControls:
    """One dropdown per ``OPTIONS`` entry and an output area that shows ``view`` of their values on every change."""

    def __init__(self, render: bool = True, n_params: float | None = None, **values: Any) -> None:
        import ipywidgets as w

        self.render = render  # False: the callbacks update ``current`` and draw nothing (tests turn every value)
        self.n_params = n_params  # held fixed: the parameters counted (None: the config's exact count)
        unknown = set(values) - set(DEFAULTS)
        if unknown:
            raise ValueError(f"unknown control {sorted(unknown)}; the controls are {', '.join(DEFAULTS)}")
        self.values = {**DEFAULTS, **values}
        self.dropdowns = {}
        for key, opts in OPTIONS.items():
            shown = opts if self.values[key] in opts else (self.values[key], *opts)
            label = _LABELS.get(key, str)
            dd = w.Dropdown(options=[(label(o), o) for o in shown], value=self.values[key], description=key,
                            style={"description_width": "initial"})
            dd.observe(self._changed, names="value")
            self.dropdowns[key] = dd
        self.output = w.Output()
        self.current = view(self.values, self.n_params)
        self.box = w.VBox([w.HBox(list(self.dropdowns.values())[:5]), w.HBox(list(self.dropdowns.values())[5:]),
                           self.output])

    def set(self, **values: Any) -> View:
        """Turn controls as a student would (each change runs the same callback); the view it leads to."""
        for key, value in values.items():
            self.dropdowns[key].value = value
        return self.current

    def _changed(self, change: Mapping[str, Any]) -> None:
        key = next(k for k, d in self.dropdowns.items() if d is change["owner"])
        self.values[key] = change["new"]
        self.current = view(self.values, self.n_params)
        if self.render:
            self._render()

    def _render(self) -> None:
        self.output.clear_output(wait=True)
        with self.output:
            print(self.current.text)
            _display_figure(draw(self.current))


def _display_figure(fig: Any) -> None:
    """Show ``fig`` as a PNG output of the cell whatever matplotlib's backend (inline in Colab and JupyterLab, Agg
    in a bare kernel, where a figure would print as its text), once, and free it."""
    import io

    import matplotlib.pyplot as plt
    from IPython.display import Image, display

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=80)
    plt.close(fig)
    display(Image(data=buf.getvalue(), format="png"))


def show(n_params: float | None = None, **values: Any) -> PlanControls:
    """The default plan as text and a figure (for any notebook, rendered or not), then the controls."""
    from IPython.display import display

    controls = PlanControls(n_params=n_params, **values)
    print(controls.current.text)
    _display_figure(draw(controls.current))
    display(controls.box)
    return controls
