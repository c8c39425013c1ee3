"""Grading end to end for every chapter: the solution earns full marks, the untouched notebook zero, a second honest
answer written differently (tests/second_answers/) full marks too.

Chapter 1 has a fuller scenario (one wrong answer, an invalid file) in test_grading.py.
"""

import ast
import shutil

import nbformat
import pytest

from autograder import course
from autograder.grading import class_run
from autograder.judging.student_steps import NOT_RUN_STUB
from autograder.outputs import tables
from tests.notebook_answers import answered, delegating, second_answers, solution_cells
from tests.second_answers import SECOND

pytestmark = pytest.mark.grading

CHAPTERS = [c for c in course.chapter_names() if not c.startswith("01_")]


def exercise_count(chapter):
    nb = nbformat.read(course.SOLUTIONS / f"{chapter}.ipynb", as_version=4)
    return sum(bool(c.metadata.get("nbgrader", {}).get("grade")) for c in nb.cells)


def write_class(chapter, subs):
    """The class graded for ``chapter`` (tests below; ``python -m tests.benchmarks --grading-profile``): each
    student's notebook in ``subs``; returns the students whose kernels get all of scalelib."""
    (subs / "bob").mkdir(parents=True)
    nbformat.write(answered(chapter), subs / "alice.ipynb")
    shutil.copy(course.CHAPTERS / f"{chapter}.ipynb", subs / "bob" / f"{chapter}.ipynb")  # untouched
    if chapter in HOSTILE:
        nbformat.write(answered(chapter, lambda gid, src: HOSTILE[chapter].get(gid, src)), subs / "mallory.ipynb")
    nbformat.write(delegating(chapter), subs / "delegator.ipynb")
    nbformat.write(delegating(chapter), subs / "delegator_open.ipynb")  # graded with all of scalelib reachable
    nbformat.write(second_answers(chapter), subs / "second.ipynb")
    return frozenset({"delegator_open"})


@pytest.fixture(scope="module", params=CHAPTERS)
def graded(request, tmp_path_factory):
    chapter = request.param
    tmp = tmp_path_factory.mktemp(f"grading-{chapter}")
    unrestricted = write_class(chapter, tmp / "subs")
    results = class_run.grade(tmp / "subs", chapter, tmp / "out", unrestricted=unrestricted)
    return chapter, {r.student: r for r in results}, tmp / "out"


# Answers that are wrong in value, written by someone who also disables the assertion helpers in their
# kernel. Tests that trace the student's function run part of their work in that kernel (``@ex.probe``);
# the comparisons must still happen in the grader.
PATCH_HELPERS = """
from scalelib import exercise as _ex
_ex.check_close = _ex.check_array_close = lambda *a, **k: None
_ex.plain_number = lambda v, *a, **k: 1.0
"""
HOSTILE = {
    "09_profiling": {
        "ch09-dominant-op-answer": PATCH_HELPERS + """
def dominant_op(ops):
    longest = max(ops, key=lambda op: op.duration_s)  # the longest single run, not the largest total
    return longest.name, longest.duration_s / sum(op.duration_s for op in ops)
""",
        "ch09-exposed-comms-answer": PATCH_HELPERS + """
def exposed_fraction(ops, device):
    comm = sum(op.duration_s for op in ops if op.device == device and op.kind == "collective")  # ignores overlap
    return comm / (max(op.start_s + op.duration_s for op in ops) - min(op.start_s for op in ops))
""",
        "ch09-roofline-gap-answer": PATCH_HELPERS + """
def roofline_gap(ops, name, flops_per_s, bytes_per_s):
    mine = sorted(op.duration_s for op in ops if op.name == name)  # counts a collective's wait as work
    first = next(op for op in ops if op.name == name)
    measured = mine[len(mine) // 2] if len(mine) % 2 else (mine[len(mine) // 2 - 1] + mine[len(mine) // 2]) / 2
    predicted = max(first.flops / flops_per_s, first.bytes / bytes_per_s)
    return measured, predicted, measured / predicted
""",
    },
    "03_sharding": {
        "ch03-ring-allgather-answer": PATCH_HELPERS + """
def ring_all_gather(x, axis_name):
    n = jax.lax.axis_size(axis_name)
    for _ in range(1, n):
        x = jax.lax.ppermute(x, axis_name, [(j, (j + 1) % n) for j in range(n)])
    return jnp.zeros((n * x.shape[0],) + x.shape[1:], x.dtype)
""",
        "ch03-case3-psum-answer": PATCH_HELPERS + """
def case3_matmul(a, b, mesh, axis):
    f = compat.shard_map(lambda x: jax.lax.psum(x, axis), mesh=mesh, in_specs=P(), out_specs=P())
    return jax.jit(f)(jnp.zeros((a.shape[0], b.shape[1]), jnp.float32))
""",
    },
    "07_inference": {
        "ch07-cached-attention-answer": PATCH_HELPERS + """
def cached_attention_step(q, k_new, v_new, k_cache, v_cache, length):
    b, n, h = q.shape
    kv_heads = k_cache.shape[1]
    at = (0, 0, length, 0)
    k_cache = jax.lax.dynamic_update_slice(k_cache, k_new[:, :, None, :], at)
    v_cache = jax.lax.dynamic_update_slice(v_cache, v_new[:, :, None, :], at)
    qg = q.reshape(b, kv_heads, n // kv_heads, h)
    probs = jax.nn.softmax(jnp.einsum("bkgh,bksh->bkgs", qg, k_cache) / math.sqrt(h), axis=-1)  # no mask
    return jnp.einsum("bkgs,bksh->bkgh", probs, v_cache).reshape(b, n, h), k_cache, v_cache
""",
        "ch07-block-allocator-answer": PATCH_HELPERS + """
def pool_allocate(state, n):
    if n > len(state["free"]):
        return state, None
    blocks, refcount = state["free"][:n], list(state["refcount"])
    for b in blocks:
        refcount[b] = 1
    return {"free": state["free"][n:], "refcount": refcount}, blocks

def pool_share(state, blocks):
    refcount = list(state["refcount"])
    for b in blocks:
        refcount[b] += 1
    return {"free": list(state["free"]), "refcount": refcount}

def pool_release(state, blocks):  # frees a shared block while another holder still has it
    free, refcount = list(state["free"]), list(state["refcount"])
    for b in blocks:
        refcount[b] = 0
        if b not in free:
            free.append(b)
    return {"free": free, "refcount": refcount}
""",
        "ch07-schedule-step-answer": PATCH_HELPERS + """
def schedule_step(running, waiting, token_budget, max_running, free_blocks, block_size):
    budget, free, scheduled = token_budget, free_blocks, []
    for seq_id, computed, total, blocks in running:  # never preempts: overcommits the pool instead
        n = min(total - computed, budget)
        if n > 0:
            scheduled.append([seq_id, n])
            budget, free = budget - n, free - (-(-(computed + n) // block_size) - blocks)
    for seq_id, total in waiting[:max(0, max_running - len(running))]:
        n = min(total, budget)
        if n > 0 and -(-n // block_size) <= free:
            scheduled.append([seq_id, n])
            budget, free = budget - n, free + -(-n // block_size)
    return scheduled, []
""",
        "ch07-spec-accept-answer": PATCH_HELPERS + """
def speculative_accept(p, q, draft, u, v):  # redraws from the target itself after a rejection
    k = len(draft)
    for i, d in enumerate(draft):
        if not u[i] < min(1.0, p[i][d] / q[i][d]):
            dist = list(p[i])
            break
    else:
        i, dist = k, list(p[k])
    cumulative = 0.0
    for x, w in enumerate(dist):
        cumulative += w
        if cumulative > v * sum(dist):
            return i, x
    return i, len(dist) - 1
""",
    },
    "11_gpus": {
        "ch11-q2-3-all-gather-answer": PATCH_HELPERS + """
def node_all_gather(num_bytes, gpus, gpu_egress_bytes_per_s):  # the book's slip: bisection instead of one GPU's egress
    return num_bytes * (gpus - 1) / (gpus * gpu_egress_bytes_per_s), num_bytes / (gpus * gpu_egress_bytes_per_s)
""",
        "ch11-pop2-all-to-all-answer": PATCH_HELPERS + """
def all_to_all_bf16(rows, gpus, gpu_egress_bytes_per_s, k):  # rows taken as bytes, as the book's slip did
    approx = rows / (gpus * gpu_egress_bytes_per_s)
    return approx * (gpus - 1) / gpus, approx, approx * min(k / gpus, 1.0)
""",
    },
    "05_training": {
        "ch05-dp-grad-reduce-answer": PATCH_HELPERS + """
def reduce_grads(grads, axis):
    return jax.tree.map(lambda g: lax.psum(g, axis), grads)  # a sum, not the mean
""",
        "ch05-megatron-mlp-answer": PATCH_HELPERS + """
def megatron_mlp(x, w_in, w_out, axis):
    return lax.pmean(jax.nn.gelu(x @ w_in) @ w_out, axis)  # a mean, not the sum
""",
    },
}


def test_full_marks_for_the_solution(graded):
    chapter, results, _ = graded
    alice = results["alice"]
    assert alice.status == "graded", (chapter, alice.detail)
    assert alice.score == alice.max_score > 0, (chapter, alice.exercises)
    assert len(alice.exercises) == exercise_count(chapter)


def test_untouched_notebook_scores_zero(graded):
    chapter, results, out = graded
    bob = results["bob"]
    assert bob.status == "graded" and bob.score == 0, (chapter, bob.exercises)
    assert bob.exercises and all(v == 0 for v in bob.exercises.values())
    # every answer is its released stub: said so, and no kernel was started for him (none wrote to his log)
    assert bob.messages == dict.fromkeys(bob.exercises, NOT_RUN_STUB), (chapter, bob.messages)
    assert not (out / "logs" / "bob.kernel.log").exists()


def test_the_instructors_notebook_runs_cleanly_in_the_grader(graded):
    """Every cell of the solution up to the last test runs in the grader's own (trusted) run: a cell that raised
    there (a renamed library function in a hidden test, a failing demo) would leave a test unable to judge."""
    chapter, _, out = graded
    log = out / "logs" / tables.INSTRUCTOR_LOG
    assert not log.exists(), (chapter, log.read_text())


def test_every_exercise_is_judged_in_the_grader(graded):
    """No test hands the student's function something that cannot be sent, or outside its surface."""
    chapter, results, _ = graded
    assert "could not be judged" not in results["alice"].detail, (chapter, results["alice"].detail)


def test_wrong_answers_with_patched_helpers_earn_nothing(graded):
    chapter, results, _ = graded
    if chapter not in HOSTILE:
        pytest.skip("no hostile answers written for this chapter")
    mallory = results["mallory"]
    hostile = [course.exercise_of_answer(gid) for gid in HOSTILE[chapter]]
    for eid in hostile:
        assert mallory.exercises[eid] == 0, (eid, mallory.messages.get(eid))
    assert mallory.score == results["alice"].score - sum(results["alice"].exercises[eid] for eid in hostile)


def test_answers_that_delegate_to_the_library_earn_nothing(graded):
    """Each answer calls the scalelib function its test (or the chapter's demo) uses for the same quantity. Its
    kernel holds only what the exercise declares, so every one of them must score 0."""
    chapter, results, _ = graded
    d = results["delegator"]
    assert len(d.exercises) == exercise_count(chapter)
    scored = {e: (v, d.messages.get(e)) for e, v in d.exercises.items() if v}
    assert not scored, (chapter, scored)


def test_the_delegating_answers_do_compute_the_answers(graded):
    """The same notebook graded with all of scalelib reachable earns full marks: each delegation is right, so the
    zeros above come from the library being out of reach, not from a broken answer."""
    chapter, results, _ = graded
    o = results["delegator_open"]
    assert o.score == o.max_score, (chapter, {e: o.messages.get(e) for e, v in o.exercises.items() if not v})


def test_a_second_honest_answer_scores_full_marks(graded):
    """Written differently from the solution (properties and methods of what the test hands over, numpy for jax,
    loops for formulas): what passes the visible checks in a notebook passes when graded."""
    chapter, results, _ = graded
    check_second_answers_score_full(chapter, results)


def check_second_answers_score_full(chapter, results):
    s = results["second"]
    lost = {e: (v, s.messages.get(e)) for e, v in s.exercises.items() if v != results["alice"].exercises[e]}
    assert not lost, (chapter, lost)
    assert s.status == "graded" and s.score == s.max_score > 0, (chapter, s.status, s.detail)


def _normalized(src):
    """The code without comments, docstrings or layout."""
    tree = ast.parse(src)
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) and isinstance(
                getattr(body[0], "value", None), ast.Constant) and isinstance(body[0].value.value, str):
            node.body = body[1:] or [ast.Pass()]
    return ast.dump(tree)


@pytest.mark.parametrize("chapter", course.chapter_names())
def test_every_exercise_has_a_second_answer_unlike_the_solution(chapter):
    assert chapter in SECOND, f"tests/second_answers/ has no answers for {chapter}: add a module for it"
    solved = {course.exercise_of_answer(gid): c.source
              for gid, c in solution_cells(nbformat.read(course.SOLUTIONS / f"{chapter}.ipynb", as_version=4)).items()}
    assert set(SECOND[chapter]) == set(solved), (chapter, set(SECOND[chapter]) ^ set(solved))
    same = [eid for eid, src in SECOND[chapter].items() if _normalized(src) == _normalized(solved[eid])]
    assert not same, (chapter, same)
