"""What a scheme is asked when the planner looks for layouts: the run, the slice and its FSDP x TP split.

Book: "How to Scale Your Model", section 5.1.4 (the optimal FSDP degree of a mixed FSDP x tensor
split, and with Appendix C the range of degrees that stay compute-bound) and section 6 (chapter 6
rounds X ~ 1927 on 8960 chips to the 2048 x 4 power-of-two split).

``PlanContext`` is what ``Scheme.candidate_layouts``, ``sweep_layout`` and ``plan_notes`` read. It
lives below the schemes (it imports only the closed forms of ``thresholds`` and the ``layer``), so a
scheme module imports it without reaching the planner, which sits above every scheme.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from scalelib.hardware import Chip
from scalelib.parallel import thresholds
from scalelib.parallel.layer import LayerModel


def split_axes(ways: int, n_axes: int) -> tuple[int, ...]:
    """``ways`` as ``n_axes`` integer factors, each near ways^(1/n_axes) (ICI axes of a mesh)."""
    out, rest = [], ways
    for k in range(n_axes, 0, -1):
        target = rest ** (1 / k)
        d = min((d for d in range(1, rest + 1) if rest % d == 0), key=lambda d: abs(math.log(d / target)))
        out.append(d)
        rest //= d
    return tuple(out)


@dataclass(frozen=True)
class PlanContext:
    """What the planner asks each scheme about: the layer, the chips of one slice and the run.

    ``axes`` are the slice's ICI axes; ``global_batch_tokens`` the whole step's batch;
    ``pipeline_stages`` / ``microbatches`` what the caller asked for (None: the scheme chooses).
    """

    layer: LayerModel
    chip: Chip
    chips: int
    axes: tuple[int, ...]
    global_batch_tokens: float
    slices: int = 1
    pipeline_stages: int | None = None
    microbatches: int | None = None

    @property
    def n_axes(self) -> int:
        """ICI axes longer than one chip (at least 1)."""
        return len([a for a in self.axes if a > 1]) or 1

    @property
    def m_x(self) -> int:
        """Axes section 5.1.4 gives FSDP (all but one)."""
        return max(1, self.n_axes - 1)

    def split(self, ways: int) -> tuple[int, ...]:
        """``ways`` spread over as many axes as the slice has."""
        return split_axes(ways, self.n_axes)

    def mixed_axes(self, batch_tokens: float) -> dict[str, Any]:
        """The FSDP x TP split of the slice for ``batch_tokens``, as Layout keyword arguments: the most
        FSDP that stays compute-bound (the larger root of Appendix C), else the optimal degree, rounded
        to powers of two."""
        d_ff = self.layer.effective_d_ff
        rng = thresholds.mixed_fsdp_ways_range(batch_tokens, d_ff, self.chips, self.chip, self.m_x, 1)
        target = rng[1] if rng else thresholds.optimal_fsdp_ways(batch_tokens, d_ff, self.chips, self.m_x, 1)
        x, y = thresholds.power_of_two_split(self.chips, min(max(1.0, target), self.chips))
        return {"data_axes": split_axes(x, self.m_x), "model_axes": (y,)}

    def optimal_axes(self, batch_tokens: float) -> dict[str, Any]:
        """The power-of-two FSDP x TP split nearest section 5.1.4's optimal FSDP degree."""
        target = thresholds.optimal_fsdp_ways(batch_tokens, self.layer.effective_d_ff, self.chips, self.m_x)
        x, y = thresholds.power_of_two_split(self.chips, min(self.chips, max(1.0, target)))
        return {"data_axes": split_axes(x, self.m_x), "model_axes": (y,)}
