"""Every mistake a chapter's text warns about loses points (issue 49).

``MISTAKES`` lists, per exercise, the slips the chapter's own text warns about next to it (a ceiling of a count
taken as a floor or a round, bf16's 2 bytes as fp32's 4, 6ND as 2ND, the optimizer state forgotten, per chip
against in total, ...), each written as a rewrite of the reference answer: ``(old text, new text)``. For each one
the test runs the exercise's whole test cell (visible part and hidden part) against the rewritten answer and
holds that some check fails with ``ex.ExerciseError`` (an ``AssertionError``): a crash of the answer itself or of
the test would say nothing about the checks, so it fails this test too.

No kernel is started: the chapter's code cells run once, in order, in one namespace of this process (the set-up
cell's ``devices.setup(8)`` finds the 8 devices tests/conftest.py asked for before JAX started); the namespace as
it stood just above each answer cell is kept, and each rewritten answer runs with its test cell in a copy of it.
The test cells run in full, as in the notebook: what the grader adds (a kernel with only the declared part of
scalelib) can only make an answer fail more, never pass a check it fails here.

Rewrites that give the reference's value on every input an exercise allows are not mistakes and are not listed:
in 6.F, ``batch_tokens / seq_len`` (or its round or ceiling) for the floor, since a batch must be a whole number of
sequences (``planner.sequences_per_batch`` refuses any other); in 6.H, leaving out the clip of the target to
``[1, N]``, since the larger root is at least ``sqrt(2 B N / F)``, above 1 for every batch of one sequence or more
on eight chips or more, and the cap at ``N``'s power of two does the clip's work above; in 1.D, ``D // 2`` for
``D / 2``, since D is even wherever the exercise splits it over two chips.
"""

from __future__ import annotations

import contextlib
import io
import time
from collections.abc import Iterator

import matplotlib.pyplot as plt
import pytest

from autograder import course
from autograder.instructor import chapter_model
from scalelib import exercise as ex

# exercise id -> [(the mistake the text warns about, (text of the reference answer, the text that replaces it))]
MISTAKES: dict[str, list[tuple[str, tuple[str, str]]]] = {
    # ---------------------------------------------------------------- chapter 1
    "ch01-roofline-bounds": [
        ("the bounds swapped: the sum as the lower bound, the max as the upper", (
            "return max(t_math, t_comms), t_math + t_comms", "return t_math + t_comms, max(t_math, t_comms)")),
        ("the faster clock for the lower bound (min for max)", ("return max(t_math, t_comms)",
                                                                 "return min(t_math, t_comms)")),
        ("the arithmetic alone as the lower bound", ("return max(t_math, t_comms)", "return t_math")),
    ],
    "ch01-critical-intensity": [
        ("the ratio upside down: bytes/s over FLOPs/s", ("chip.bf16_flops_per_s / chip.hbm_bytes_per_s",
                                                          "chip.hbm_bytes_per_s / chip.bf16_flops_per_s")),
        ("an ICI link's bandwidth for HBM's", ("chip.bf16_flops_per_s / chip.hbm_bytes_per_s",
                                               "chip.bf16_flops_per_s / chip.ici_one_way_bytes_per_s")),
        ("the int8 rate for bf16's", ("chip.bf16_flops_per_s / chip.hbm_bytes_per_s",
                                      "chip.int8_ops_per_s / chip.hbm_bytes_per_s")),
    ],
    "ch01-einsum-intensity": [
        ("one FLOP per multiply-add instead of two", ("flops = 2 * math.prod", "flops = math.prod")),
        ("the output's bytes left out", ("for t in terms)", "for t in terms[:-1])")),
        ("elements for bytes", ("* dtype_bytes for t in terms", "for t in terms")),
        ("bits for bytes", ("* dtype_bytes for t in terms", "* dtype_bytes * 8 for t in terms")),
        ("an index counted once per term it appears in, not once", ('set("".join(terms))',
                                                                   '"".join(lhs.split(","))')),
        ("only the output's indices in the FLOPs (the contracted ones dropped)", ('set("".join(terms))',
                                                                                  "set(out)")),
    ],
    "ch01-ex1-1-int8": [
        ("bf16's critical batch (intensity about B) where int8's 1-byte weights give about 2B",
         ("return i_crit, i_crit / 2", "return i_crit, i_crit")),
        ("the factor 2 the wrong way", ("return i_crit, i_crit / 2", "return i_crit, i_crit * 2")),
        ("bits for bytes", ("i_crit = int8_ops_per_s / hbm_bytes_per_s",
                            "i_crit = int8_ops_per_s / (8 * hbm_bytes_per_s)")),
    ],
    "ch01-ex1-2-mixed": [
        ("bf16 weights (2 bytes) where they are int8 (1)", ("return bf16_flops_per_s / hbm_bytes_per_s / 2",
                                                            "return bf16_flops_per_s / hbm_bytes_per_s")),
        ("the halved bytes doubling the batch instead of halving it", (
            "return bf16_flops_per_s / hbm_bytes_per_s / 2", "return bf16_flops_per_s / hbm_bytes_per_s * 2")),
        ("the activations taken as int8 too (a factor 4)", ("return bf16_flops_per_s / hbm_bytes_per_s / 2",
                                                            "return bf16_flops_per_s / hbm_bytes_per_s / 4")),
    ],
    "ch01-ex1-4-per-example": [
        ("one weight matrix shared by the batch (D x F bytes, not B x D x F)", (
            "(B * D + B * D * F + B * F)", "(B * D + D * F + B * F)")),
        ("one OP per multiply-add", ("return 2 * B * D * F", "return B * D * F")),
        ("the output's bytes left out (exact intensity asked)", ("(B * D + B * D * F + B * F)",
                                                                  "(B * D + B * D * F)")),
        ("the weights' bytes only (the approximation, not the exact value)", ("(B * D + B * D * F + B * F)",
                                                                              "(B * D * F)")),
        ("2 bytes per element where everything is int8", ("(B * D + B * D * F + B * F)",
                                                          "(2 * (B * D + B * D * F + B * F))")),
    ],
    "ch01-ex1-5-gpu": [
        ("the sparse spec-sheet figure used as the dense rate", (
            "return sparse_spec_flops_per_s / 2 / hbm_bytes_per_s",
            "return sparse_spec_flops_per_s / hbm_bytes_per_s")),
        ("the spec-sheet figure doubled instead of halved", (
            "return sparse_spec_flops_per_s / 2 / hbm_bytes_per_s",
            "return sparse_spec_flops_per_s * 2 / hbm_bytes_per_s")),
        ("halved twice", ("return sparse_spec_flops_per_s / 2 / hbm_bytes_per_s",
                          "return sparse_spec_flops_per_s / 4 / hbm_bytes_per_s")),
    ],
    "ch01-two-chip": [
        ("the whole contraction on one chip, not its half", ("t_math = 2 * B * (D / 2) * F",
                                                              "t_math = 2 * B * D * F")),
        ("one FLOP per multiply-add", ("t_math = 2 * B * (D / 2) * F", "t_math = B * (D / 2) * F")),
        ("partial sums sent in fp32 (4 bytes), not bf16 (2)", ("t_comms = 2 * B * F", "t_comms = 4 * B * F")),
        ("elements for bytes in the message", ("t_comms = 2 * B * F", "t_comms = B * F")),
        ("the link's two directions counted, where the text sends in one", (
            "t_comms = 2 * B * F / link_bytes_per_s", "t_comms = 2 * B * F / (2 * link_bytes_per_s)")),
    ],
    "ch01-fit-roofline": [
        ("the slowest point for the peak (min for max)", ("peak = max(f / s", "peak = min(f / s")),
        ("the slowest point for the bandwidth", ("bw = max(b / s", "bw = min(b / s")),
        ("the ridge upside down (bandwidth over peak)", ("return peak, bw, peak / bw", "return peak, bw, bw / peak")),
        ("the mean of the points, where no run can beat a ceiling", (
            "peak = max(f / s for f, b, s in measurements)",
            "peak = sum(f / s for f, b, s in measurements) / len(measurements)")),
        ("the bandwidth of the least intense point only", (
            "bw = max(b / s for f, b, s in measurements)",
            "bw = min(measurements, key=lambda m: m[0] / m[1])[1] / min(measurements, key=lambda m: m[0] / m[1])[2]")),
        ("the ridge at the fastest point's intensity, not where the ceilings meet", (
            "return peak, bw, peak / bw",
            "return peak, bw, max(measurements, key=lambda m: m[0] / m[2])[0] / "
            "max(measurements, key=lambda m: m[0] / m[2])[1]")),
    ],
    # ---------------------------------------------------------------- chapter 6
    "ch06-param-count": [
        ("an ungated MLP: two D x F matrices per layer, not three", ("mlp = 3 * D", "mlp = 2 * D")),
        ("tied embeddings: one V x D table, where the text says separate input and output tables",
         ("vocab = 2 * V", "vocab = V")),
        ("no grouped-query attention: W_K and W_V taken as D x NH", ("(N + K)", "(N + N)")),
        ("the RMSNorm scales left out of the total", ("+ norms", "")),
        ("one RMSNorm per layer instead of two", ("(2 * L + 1)", "(L + 1)")),
        ("the final RMSNorm forgotten", ("(2 * L + 1)", "(2 * L)")),
    ],
    "ch06-train-flops": [
        ("2P per token (the forward pass only) for 6P", ("return 6 * n_params, 6 * n_params * tokens",
                                                        "return 2 * n_params, 2 * n_params * tokens")),
        ("4P per token (the backward pass only) for 6P", ("return 6 * n_params, 6 * n_params * tokens",
                                                         "return 4 * n_params, 4 * n_params * tokens")),
        ("the run's FLOPs at 2PT while the per-token figure is 6P", ("6 * n_params * tokens", "2 * n_params * tokens")),
    ],
    "ch06-train-time": [
        ("one pod's chips for several pods", ("math.prod(shape) * pods", "math.prod(shape)")),
        ("the axes of a slice added instead of multiplied", ("math.prod(shape) * pods", "sum(shape) * pods")),
        ("the MFU left out (time at 100% of peak)", ("(chips * flops_per_s * mfu)", "(chips * flops_per_s)")),
        ("the MFU multiplied instead of divided", ("(chips * flops_per_s * mfu)", "(chips * flops_per_s) * mfu")),
        ("one chip's time for the slice's (per chip against the total)", ("(chips * flops_per_s * mfu)",
                                                                          "(flops_per_s * mfu)")),
    ],
    "ch06-train-memory": [
        ("weights in fp32 (4 bytes) where the text keeps them in bf16 (2)", ("params = 2 * n_params",
                                                                            "params = 4 * n_params")),
        ("the optimizer state forgotten", ("optimizer = 8 * n_params", "optimizer = 0 * n_params")),
        ("one Adam moment instead of two (or both in bf16): 4 bytes per parameter, not 8",
         ("optimizer = 8 * n_params", "optimizer = 4 * n_params")),
        ("the gradients counted as well, which the text says are consumed layer by layer",
         ("optimizer = 8 * n_params", "optimizer = 10 * n_params")),
        ("checkpoints in fp32 (4 bytes) instead of bf16 (2)", ("checkpoints = 2 *", "checkpoints = 4 *")),
        ("the checkpoints of one layer, not of all L", ("* D * L", "* D")),
        ("one checkpoint per layer whatever k", ("2 * ckpts_per_layer *", "2 *")),
        ("a fractional k cut to a whole number", ("2 * ckpts_per_layer *", "2 * int(ckpts_per_layer) *")),
        ("the checkpoints left out of the total", ("params + optimizer + checkpoints", "params + optimizer")),
    ],
    "ch06-chips-for-memory": [
        ("the chip count rounded to nearest where the text takes a ceiling",
         ("math.ceil(total_bytes / hbm_bytes_per_chip)", "round(total_bytes / hbm_bytes_per_chip)")),
        ("the chip count's floor for its ceiling", ("math.ceil(total_bytes / hbm_bytes_per_chip)",
                                                   "total_bytes // hbm_bytes_per_chip")),
        ("a ceiling written as the floor plus one (one chip too many when HBM holds the total exactly)",
         ("math.ceil(total_bytes / hbm_bytes_per_chip)", "int(total_bytes / hbm_bytes_per_chip) + 1")),
        ("a ceiling written as round(x + 0.5) (Python rounds a half to even)",
         ("math.ceil(total_bytes / hbm_bytes_per_chip)", "round(total_bytes / hbm_bytes_per_chip + 0.5)")),
        ("a fractional number of chips", ("math.ceil(total_bytes / hbm_bytes_per_chip)",
                                          "total_bytes / hbm_bytes_per_chip")),
        ("the share over the fewest chips instead of over all of them", (
            "total_bytes / chips", "total_bytes / math.ceil(total_bytes / hbm_bytes_per_chip)")),
    ],
    "ch06-fsdp-alone": [
        ("the chips for the sequences (data parallelism's limit is the batch's sequences)",
         ("batch_tokens // seq_len", "min(batch_tokens // seq_len, chips)")),
        ("alpha from one-way bandwidth where the text divides by the bidirectional one",
         ("(n_axes * ici_bidi_bytes_per_s)", "(n_axes * ici_bidi_bytes_per_s / 2)")),
        ("the threshold of one axis whatever the axes FSDP runs over", ("(n_axes * ici_bidi_bytes_per_s)",
                                                                        "(ici_bidi_bytes_per_s)")),
        ("sequences per chip for tokens per chip", ("batch_tokens / chips", "batch_tokens / seq_len / chips")),
    ],
    "ch06-mixed-split": [
        ("M_X M_Y taken as 1 in the threshold", ("4 * alpha ** 2 / (2 * F)", "4 * alpha ** 2 / F")),
        ("2 alpha^2 for 4 alpha^2", ("4 * alpha ** 2 / (2 * F)", "2 * alpha ** 2 / (2 * F)")),
        ("the smaller root for the larger", ("(-b_ + math.sqrt(disc))", "(-b_ - math.sqrt(disc))")),
        ("alpha from one-way bandwidth", ("alpha = flops_per_s / ici_bidi_bytes_per_s",
                                          "alpha = 2 * flops_per_s / ici_bidi_bytes_per_s")),
        ("M_X = 1 in the quadratic", ("a, b_, c = F / (2 * N)", "a, b_, c = F / (1 * N)")),
        ("a double root (a batch exactly at the threshold) taken as no root", ("if disc < 0:", "if disc <= 0:")),
        ("0 for None when there is no root", ("return critical, None", "return critical, 0.0")),
    ],
    "ch06-choose-sharding": [
        ("the power of two below the target (floor of log2) for the nearest", (
            "2 ** round(math.log2(target))", "2 ** int(math.log2(target))")),
        ("the power of two above the target (ceiling of log2) for the nearest", (
            "2 ** round(math.log2(target))", "2 ** math.ceil(math.log2(target))")),
        ("the power of two nearest on a linear scale, where the text says on a log scale", (
            "2 ** round(math.log2(target))", "min((2 ** k for k in range(40)), key=lambda p: abs(p - target))")),
        ("X not capped at the largest power of two <= N", (
            "x = min(2 ** round(math.log2(target)), 2 ** int(math.log2(N)))\n    y = 2 ** int(math.log2(N // x))",
            "x = 2 ** round(math.log2(target))\n    y = 2 ** int(math.log2(max(1, N // x)))")),
        ("Y as N // X, not a power of two", ("y = 2 ** int(math.log2(N // x))", "y = N // x")),
        ("Y's power of two rounded to nearest where the text takes the largest with XY <= N",
         ("y = 2 ** int(math.log2(N // x))", "y = 2 ** round(math.log2(N // x))")),
        ("Y's power of two rounded up", ("y = 2 ** int(math.log2(N // x))", "y = 2 ** math.ceil(math.log2(N // x))")),
        ("the smaller root for the larger", ("(-b_ + math.sqrt(disc))", "(-b_ - math.sqrt(disc))")),
        ("alpha from one-way bandwidth", ("alpha = chip.bf16_flops_per_s / chip.ici_bidi_bytes_per_s",
                                          "alpha = chip.bf16_flops_per_s / chip.ici_one_way_bytes_per_s")),
        ("M_X = 1 in the quadratic", ("a, b_, c = F_ / (2 * N)", "a, b_, c = F_ / (1 * N)")),
        ("the no-root fallback without the factor M_X = 2", ("math.sqrt(B * 2 * N / F_)", "math.sqrt(B * N / F_)")),
    ],
    "ch06-ex6-1-dcn": [
        ("the hosts rounded to nearest where a partly filled host still brings its whole link",
         ("math.ceil(pod_chips / chips_per_host)", "round(pod_chips / chips_per_host)")),
        ("the hosts' floor for their ceiling", ("math.ceil(pod_chips / chips_per_host)",
                                                "pod_chips // chips_per_host")),
        ("a ceiling written as the floor plus one", ("math.ceil(pod_chips / chips_per_host)",
                                                    "pod_chips // chips_per_host + 1")),
        ("a fractional number of hosts", ("math.ceil(pod_chips / chips_per_host)", "pod_chips / chips_per_host")),
        ("a DCN link per chip, not per host", ("(hosts * dcn_bytes_per_s_per_host)",
                                               "(pod_chips * dcn_bytes_per_s_per_host)")),
        ("one chip's FLOPs/s for the pod's", ("pod_chips * flops_per_s /", "flops_per_s /")),
        ("the whole batch for each pod's share", ("batch_tokens / pods", "batch_tokens")),
    ],
}

CHAPTERS = sorted({name for name in course.chapter_names()
                   for eid in MISTAKES if eid.startswith(f"ch{name.split('_')[0]}-")})
CASES = [(eid, what, rewrite) for eid, entries in MISTAKES.items() for what, rewrite in entries]


def chapter_of(eid: str) -> str:
    return next(name for name in course.chapter_names() if eid.startswith(f"ch{name.split('_')[0]}-"))


class Run:
    """A chapter's code cells run once in order; ``check(eid, answer)`` runs ``answer`` and the exercise's test cell
    in a copy of the namespace that stood above its answer cell."""

    def __init__(self, chapter: str) -> None:
        self.chapter = chapter_model.load_chapter(course.SOLUTIONS / f"{chapter}.ipynb")
        self.name = chapter
        self.above: dict[str, tuple[dict, str]] = {}  # exercise -> (namespace above its answer cell, that cell's name)
        self.tests: dict[str, tuple[str, str]] = {}  # exercise -> (its test cell's source, that cell's name)
        ns: dict = {"__name__": "__main__"}
        for i, (kind, src, eid) in enumerate(self.chapter.cells):
            cell = f"<{chapter} cell {i} ({kind} {eid})>".replace(" ()", "")
            if kind == "answer":
                self.above[eid] = (dict(ns), cell)
            elif kind == "test":
                self.tests[eid] = (src, cell)
            self._exec(src, cell, ns)  # the reference answers pass every check: a failure here is the chapter's
            plt.close("all")

    @staticmethod
    def _exec(src: str, cell: str, ns: dict) -> None:
        with contextlib.redirect_stdout(io.StringIO()):
            exec(compile(chapter_model._strip_magics(src), cell, "exec"), ns)  # the course's own notebook cells

    def check(self, eid: str, answer: str) -> None:
        above, answer_cell = self.above[eid]
        ns = dict(above)
        self._exec(answer, answer_cell, ns)
        src, test_cell = self.tests[eid]
        try:
            self._exec(src, test_cell, ns)
        finally:
            plt.close("all")


@pytest.fixture(scope="module")
def runs() -> Iterator[dict[str, Run]]:
    """Each chapter of the table, run once; grading's strict checks (an unanswered exercise fails, not skips)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(ex.STRICT_ENV, "1")
        started = time.perf_counter()
        done = {chapter: Run(chapter) for chapter in CHAPTERS}
        print(f"chapters {', '.join(CHAPTERS)} ran in {time.perf_counter() - started:.1f} s")
        yield done


def test_the_table_names_exercises_and_rewrites_of_their_reference_answers(runs: dict[str, Run]) -> None:
    for chapter in CHAPTERS:
        exercises = runs[chapter].chapter.exercises
        missing = sorted(set(exercises) - set(MISTAKES))
        assert not missing, f"{chapter}: no mistakes listed for {missing}"
    for eid, what, (old, new) in CASES:
        answer = runs[chapter_of(eid)].chapter.exercises[eid].answer_source
        assert answer.count(old) == 1, f"{eid} ({what}): the rewrite's old text occurs {answer.count(old)} times"
        assert old != new, f"{eid} ({what}): the rewrite changes nothing"


@pytest.mark.parametrize(("eid", "what", "rewrite"), CASES, ids=[f"{e}: {w[:60]}" for e, w, _ in CASES])
def test_a_check_catches_the_mistake(runs: dict[str, Run], eid: str, what: str, rewrite: tuple[str, str]) -> None:
    old, new = rewrite
    run = runs[chapter_of(eid)]
    mistaken = run.chapter.exercises[eid].answer_source.replace(old, new)
    with pytest.raises(AssertionError):
        run.check(eid, mistaken)
