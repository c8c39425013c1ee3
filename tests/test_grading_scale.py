"""Grading at class scale: course-site exports, Colab-mangled notebooks, hostile submissions, statuses.

One grading run (two workers) of a zip holding every kind of submission is shared by most tests.
Hostile submissions put a *wrong* answer in one exercise and then try to make it pass (or to read,
write, hang, flood, hog or crash); each must earn nothing it does not deserve and change no one else.
"""

from __future__ import annotations

import csv
import json
import re
import tempfile
import time
import zipfile
from pathlib import Path

import nbformat
import pytest

from autograder import course
from autograder.grading import class_run
from autograder.sandbox import probes

pytestmark = pytest.mark.grading

CH = "01_rooflines"
FULL = 15.0
SANDBOXED = probes.available() == ""


def _solutions():
    nb = nbformat.read(course.SOLUTIONS / f"{CH}.ipynb", as_version=4)
    return {c.metadata["nbgrader"]["grade_id"]: re.sub(r"^[ \t]*### (BEGIN|END) SOLUTION[ \t]*\n", "", c.source, flags=re.M)
            for c in nb.cells if c.metadata.get("nbgrader", {}).get("solution")}


SOL = _solutions()


def _nb(**answers):
    """The student notebook, every exercise solved, except ``answers`` (exercise id -> cell source)."""
    nb = nbformat.read(course.CHAPTERS / f"{CH}.ipynb", as_version=4)
    for c in nb.cells:
        gid = c.metadata.get("nbgrader", {}).get("grade_id", "")
        eid = course.exercise_of_answer(gid)
        if eid is not None:
            c.source = answers.get(eid, SOL[gid])
    return nb


def _wrong(eid, old="/ 2", new="/ 3"):
    src = SOL[course.answer_id(eid)]
    assert old in src
    return src.replace(old, new)


MIXED, INT8, GPU, CRIT, PER = "ch01-ex1-2-mixed", "ch01-ex1-1-int8", "ch01-ex1-5-gpu", "ch01-critical-intensity", "ch01-ex1-4-per-example"


def _colab_stripped():
    """What Colab may hand back: no nbgrader metadata, no cell ids, no scalelib metadata, outputs kept."""
    nb = json.loads(nbformat.writes(_nb()))
    for c in nb["cells"]:
        c.pop("id", None)
        c["metadata"] = {}
        if c["cell_type"] == "code":
            c["outputs"] = [{"output_type": "stream", "name": "stdout", "text": "stale output " * 10}]
    nb["metadata"] = {"colab": {"provenance": []}}
    nb["nbformat_minor"] = 4
    return json.dumps(nb)


TWO = "ch01-two-chip"


def _hostile_patchers():
    """Wrong answers plus every trick to make them pass, each on its own exercise: patched helpers,
    builtins, numpy, math.isclose and scalelib; an object equal to anything; edited and deleted tests."""
    nb = _nb(**{
        CRIT: ALWAYS_EQUAL,
        PER: "def per_example_intensity(B, D, F):\n    return 1.0\n",
        TWO: _wrong(TWO, "2 * B * F / link", "B * F / link"),
        # 1. patch the assertion helper (both the module attribute and the name tests use)
        MIXED: _wrong(MIXED) + "\nimport scalelib.exercise as _e\n_e.check_close = lambda *a, **k: None\n"
               "ex.check_close = _e.check_close\n_e.check_array_close = lambda *a, **k: None\n",
        # 2. patch builtins, numpy and math.isclose
        INT8: _wrong(INT8, "i_crit / 2", "i_crit / 3") + "\nimport builtins, math, numpy\nmath.isclose = lambda *a, **k: True\n"
              "numpy.isclose = lambda *a, **k: numpy.True_\nnumpy.allclose = lambda *a, **k: True\n"
              "builtins.abs = lambda x: 0\nbuiltins.AssertionError = type('Nope', (Exception,), {})\n",
        # 3. patch scalelib so that its "expected" values equal the wrong answer
        GPU: _wrong(GPU, "/ 2 /", "/ 4 /") + "\nfrom scalelib import roofline as _rl\n"
             "_rl.matmul_critical_batch = lambda f, b, **k: f / b / 2\n"
             "_rl.chip_matmul_critical_batch = lambda chip, *a, **k: chip.bf16_flops_per_s / chip.hbm_bytes_per_s / 2\n",
    })
    keep = []
    for c in nb.cells:
        gid = c.metadata.get("nbgrader", {}).get("grade_id", "")
        if gid == TWO:
            c.source = f"# Test {TWO} (2 points)\nprint('visible checks passed')\n"  # edited to pass
        if gid == PER:
            continue  # deleted
        keep.append(c)
    nb.cells = keep
    return nb


ALWAYS_EQUAL = '''
class Anything(float):
    def __eq__(self, other): return True
    def __ne__(self, other): return False
    def __lt__(self, other): return False
    def __gt__(self, other): return False
    def __le__(self, other): return True
    def __ge__(self, other): return True
    def __float__(self): return 1.0
    def __abs__(self): return 0.0
    def __sub__(self, other): return Anything(0.0)
    __rsub__ = __sub__
    def __hash__(self): return 0

def critical_intensity_of(chip):
    return Anything(1.0)
'''


def _reader(others: Path):
    """Tries to read solutions, the gradebook/results and another student's file; right only if it could."""
    paths = [str(course.SOLUTIONS / f"{CH}.ipynb"), str(course.ROOT / ".git" / "HEAD"), str(others)]
    src = f'''
import os, glob
SEEN = []
for p in {paths!r} + glob.glob("/tmp/**/results/*.json", recursive=True)[:3]:
    try:
        SEEN.append(open(p).read()[:100])
    except OSError:
        pass

def mixed_critical_batch(bf16_flops_per_s, hbm_bytes_per_s):
    return bf16_flops_per_s / hbm_bytes_per_s / (2 if SEEN else 3)
'''
    return src


def _file_snoop(others: Path, targets: list[Path]):
    """Reads (solutions, .git, results, another student's zip) on one exercise, writes on another."""
    return _nb(**{MIXED: _reader(others), GPU: _writer(targets)})


def _writer(targets: list[Path]):
    src = f'''
for p in {[str(t) for t in targets]!r}:
    try:
        with open(p, "w") as f:
            f.write("student,chapter,score\\nwriter,{CH},999\\n")
    except OSError:
        pass
''' + _wrong(GPU, "/ 2 /", "/ 4 /")
    return src


HANG = _nb(**{
    MIXED: "while True:\n    pass\n",  # answer cell never ends: interrupted
    GPU: "import time\ndef gpu_critical_batch(a, b):\n    time.sleep(3600)\n",  # hidden-test calls hang
})
IGNORE_SIGINT = _nb(**{MIXED: "import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True:\n    time.sleep(0.1)\n"})
FLOOD = _nb(**{MIXED: "import sys\nfor _ in range(200):\n    sys.stdout.write('x' * 100_000 + '\\n')\n" + _wrong(MIXED)})
HOG = _nb(**{MIXED: "hog = bytearray(64 * 2**30)\n" + SOL[course.answer_id(MIXED)],
             GPU: "def gpu_critical_batch(a, b):\n    hog = bytearray(64 * 2**30)\n    return a / 2 / b\n"})
# the crash's detail quotes the last line the kernel wrote to its stderr, as the student's: this one imitates the
# sandbox's verdict and is markup that would act as HTML
MARKUP = '<img src=x onerror="document.title=1"> [click](javascript:alert(1))'
CRASH = _nb(**{GPU: f"import os\nos.write(2, b'sandbox: {MARKUP}\\n')\nos._exit(3)\n"})
BOUNDS = "ch01-roofline-bounds"
# Hostile finding 1: switch off every switch-off the kernel could hold, then hand the work to the library by every
# route there is. Under the old deny-list this earned full marks; the library is not in this kernel at all.
SWITCH_OFF = _nb(**{BOUNDS: """
import builtins, contextlib, glob, importlib, importlib.util, os, sys
try:
    from scalelib import exercise as _ex
    _ex.forbid = lambda *a, **k: contextlib.nullcontext()
except Exception:
    pass
_real_import = builtins.__import__
builtins.__import__ = lambda name, *a, **k: _real_import(name, *a, **k)

def _routes():
    yield lambda: rl                                              # the chapter's own alias
    yield lambda: importlib.import_module("scalelib.roofline")
    yield lambda: sys.modules["scalelib.roofline"]
    for folder in [p for p in sys.path if os.path.isdir(p)]:        # the library's source or bytecode, anywhere
        for path in glob.glob(os.path.join(folder, "**", "roofline*.py*"), recursive=True):
            def load(path=path):
                spec = importlib.util.spec_from_file_location("stolen_roofline", path)
                mod = importlib.util.module_from_spec(spec)
                spec.loader.exec_module(mod)
                return mod
            yield load

def roofline_bounds(flops, num_bytes, flops_per_s, bytes_per_s):
    for route in _routes():
        try:
            t = route().roofline_time(flops, num_bytes, flops_per_s, bytes_per_s)
            return t.lower_bound_s, t.upper_bound_s
        except Exception:
            continue
    return 0.0, 0.0
"""})
# Hostile finding 2: a reply far over the channel's cap costs its exercise only.
BIG_REPLY = _nb(**{GPU: "def gpu_critical_batch(a, b):\n    return [0.5] * 20_000_000\n"})
# Issue 19, class 2: three processes write 96 MB in 96 files into the scratch folder, /tmp and /dev/shm; the disk
# limit is 64 MB for all of a kernel's files together.
DISK_HOG = _nb(**{MIXED: """
import os
kids = []
for i, folder in enumerate((".", "/tmp", "/dev/shm")):
    pid = os.fork()
    if pid == 0:
        try:
            for n in range(32):
                with open(f"{folder}/diskhog-{i}-{n}", "wb") as f:
                    f.write(b"x" * 2**20)
        except OSError:
            pass
        os._exit(0)
    kids.append(pid)
for pid in kids:
    os.waitpid(pid, 0)
import time
time.sleep(3)
""" + SOL[course.answer_id(MIXED)]})
FORK_BOMB = _nb(**{MIXED: "import os, time\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        time.sleep(0.01)\n"})

ROSTER = """student,name,id,email
alice,Alice Adams,1001,aa@uni.edu
colab,Carl Colab,1002,cc@uni.edu
carol,Carol Cole,1003,carol@uni.edu
patcher,Pat Cher,1004,p@uni.edu
snoop,Rea Der,1006,r@uni.edu
hang,Han Ging,1008,h@uni.edu
nosig,No Sig,1009,n@uni.edu
flood,Flo Od,1010,f@uni.edu
hog,Ho Gg,1011,hog@uni.edu
crash,Cra Sh,1012,cr@uni.edu
forker,For Ker,1017,fk@uni.edu
switcher,Swit Cher,1018,sw@uni.edu
bigreply,Big Reply,1019,br@uni.edu
diskhog,Disk Hog,1020,dh@uni.edu
dave,Dave Invalid,1013,d@uni.edu
erin,Erin Wrong,1014,e@uni.edu
frank,Frank Partial,1015,fr@uni.edu
gina,Gina Missing,1016,g@uni.edu
"""


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("scale")
    out = tmp / "out"
    (out / "results").mkdir(parents=True)
    canary = out / "results" / "zz-canary.json"  # a gradebook record the writer tries to overwrite
    canary.write_text('{"student": "canary"}')
    outside = tmp / "pwned.txt"
    files: dict[str, tuple[str, float]] = {}  # name in zip -> (content, mtime)
    t0 = time.mktime((2025, 3, 1, 12, 0, 0, 0, 0, -1))
    w = lambda nb: nbformat.writes(nb)  # noqa: E731
    files["adams_1001_5001_01_rooflines.ipynb"] = (w(_nb(**{MIXED: _wrong(MIXED)})), t0)  # superseded below
    files["adams_1001_5002_01_rooflines-1.ipynb"] = (w(_nb()), t0 + 3600)  # resubmission, later: wins
    files["cc/Copy of Untitled (1).ipynb"] = (_colab_stripped(), t0)
    files["cole_1003_5003_rooflines.ipynb"] = (w(_nb(**{MIXED: _wrong(MIXED)})), t0)
    files["cher_1004_5004_01_rooflines.ipynb"] = (w(_hostile_patchers()), t0)
    files["der_1006_5006_01_rooflines.ipynb"] = (w(_file_snoop(tmp / "subs.zip", [canary, outside, out / "grades.csv",
                                                                course.SOLUTIONS / "pwned.ipynb"])), t0)
    files["ging_1008_5008_01_rooflines.ipynb"] = (w(HANG), t0)
    files["sig_1009_5009_01_rooflines.ipynb"] = (w(IGNORE_SIGINT), t0)
    files["od_1010_5010_01_rooflines.ipynb"] = (w(FLOOD), t0)
    files["gg_1011_5011_01_rooflines.ipynb"] = (w(HOG), t0)
    files["sh_1012_5012_01_rooflines.ipynb"] = (w(CRASH), t0)
    files["ker_1017_5017_01_rooflines.ipynb"] = (w(FORK_BOMB), t0)
    files["swit_1018_5018_01_rooflines.ipynb"] = (w(SWITCH_OFF), t0)
    files["reply_1019_5019_01_rooflines.ipynb"] = (w(BIG_REPLY), t0)
    files["dhog_1020_5020_01_rooflines.ipynb"] = (w(DISK_HOG), t0)
    files["invalid_1013_5013_01_rooflines.ipynb"] = ("{ this is not json", t0)
    ch2 = nbformat.read(course.CHAPTERS / "02_tpus.ipynb", as_version=4)
    files["wrong_1014_5014_01_rooflines.ipynb"] = (w(ch2), t0)  # named for ch 1, but is chapter 2
    partial = _nb()
    partial.cells = [c for c in partial.cells
                     if c.metadata.get("nbgrader", {}).get("grade_id") != course.answer_id(MIXED)]
    files["partial_1015_5015_01_rooflines.ipynb"] = (w(partial), t0)
    files["numpy.py"] = ("raise SystemExit('shadowed numpy')\n", t0)
    files["stranger_9999_9999_01_rooflines.ipynb"] = (w(_nb()), t0)  # on no roster
    archive = tmp / "subs.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        for name, (text, mtime) in files.items():
            info = zipfile.ZipInfo(name, date_time=time.localtime(mtime)[:6])
            zf.writestr(info, text)
    roster = tmp / "roster.csv"
    roster.write_text(ROSTER)
    start = time.perf_counter()
    results = class_run.grade(archive, CH, out, roster=roster, workers=2, cell_timeout_s=10, notebook_timeout_s=120,
                          memory_mb=6144, disk_mb=64, max_output_bytes=200_000)
    seconds = time.perf_counter() - start
    rows = {r["student"]: r for r in csv.DictReader((out / "grades.csv").open())}
    yield {r.student: r for r in results}, rows, out, tmp, archive, roster, seconds, canary, outside
    (course.SOLUTIONS / "pwned.ipynb").unlink(missing_ok=True)  # only if the sandbox failed


def test_course_site_names_roster_and_latest_submission(run):
    res, rows, out, *_ = run
    assert res["alice"].file == "adams_1001_5002_01_rooflines-1.ipynb"  # the later resubmission
    assert res["alice"].status == "graded" and res["alice"].score == FULL
    assert res["colab"].file == "cc/Copy of Untitled (1).ipynb"  # matched by folder (roster email), chapter by content
    assert res["carol"].file == "cole_1003_5003_rooflines.ipynb"
    manifest = list(csv.DictReader((out / "submissions.csv").open()))
    uses = {m["file"]: (m["use"], m["student"]) for m in manifest}
    assert uses["adams_1001_5001_01_rooflines.ipynb"] == ("superseded", "alice")
    assert uses["numpy.py"][0] == "unmatched"
    assert uses["stranger_9999_9999_01_rooflines.ipynb"][0] == "unmatched"
    assert "stranger" not in res


def test_every_status(run):
    res, rows, *_ = run
    assert res["dave"].status == "invalid notebook"
    assert res["erin"].status == "wrong chapter" and "02_tpus" in res["erin"].detail
    assert res["gina"].status == "missing" and rows["gina"]["score"] == "0"
    frank = res["frank"]
    assert frank.status == "partially graded" and MIXED in frank.detail
    assert frank.score == FULL - 2 and frank.exercises[MIXED] == 0
    # a kernel that dies is restarted without the exercise it died in: the others still count
    crash = res["crash"]
    assert crash.status == "crashed" and crash.exercises[GPU] == 0 and "crashed the kernel" in crash.messages[GPU]
    assert crash.score == FULL - res["alice"].exercises[GPU] and f"restarted without {GPU}" in crash.detail
    nosig = res["nosig"]
    assert nosig.status == "timed out" and nosig.score == FULL - res["alice"].exercises[MIXED]
    assert "killed" in nosig.messages[MIXED]
    assert set(class_run.STATUSES) <= {r.status for r in res.values()}


def test_what_a_kernel_printed_shows_as_text_in_formgrader_and_nbgraders_feedback(run):
    """The crash's detail quotes what its kernel wrote last (a tag with a handler, a javascript: link). It reaches
    the graded copy's summary cell, which formgrader renders as Markdown, and the answer cells' comments, which
    nbgrader's feedback renders as Markdown; nbconvert lets raw HTML and link targets through, so both escape it."""
    from html.parser import HTMLParser

    from nbconvert import HTMLExporter
    from nbconvert.filters.markdown_mistune import markdown2html_mistune
    from nbgrader.api import Gradebook

    res, _, out, *_ = run
    assert MARKUP in res["crash"].detail  # else this test proves nothing
    course_dir = out / "nbgrader"
    html, _ = HTMLExporter().from_filename(str(course_dir / "autograded" / "crash" / CH / f"{CH}.ipynb"))
    with Gradebook(f"sqlite:///{course_dir / 'gradebook.db'}") as gb:
        comments = [c.auto_comment for c in gb.find_submission_notebook(CH, CH, "crash").comments if c.auto_comment]
    assert [c for c in comments if "<img" in c.replace("\\<", "")] == [] and any("img src" in c for c in comments)
    acting, text = [], []

    class Tags(HTMLParser):
        def handle_starttag(self, tag, attrs):
            acting.extend((tag, a, v) for a, v in attrs if a.startswith("on") or (v or "").startswith("javascript:"))

        def handle_data(self, data):
            text.append(data)

    for page in [html, *(markdown2html_mistune(c) for c in comments)]:
        Tags().feed(page)
    assert acting == []
    # the summary shows it, as text and as the student's, not as the sandbox's verdict
    assert f"[last line your kernel wrote to its stderr: sandbox: {MARKUP}]" in "".join(text)
    assert f"[sandbox: {MARKUP}]" not in res["crash"].detail and "exit status 3" in res["crash"].detail


def test_colab_stripped_notebook_is_graded_in_full(run):
    res, *_ = run
    assert res["colab"].status == "graded" and res["colab"].score == FULL


def test_one_wrong_answer_loses_exactly_its_points(run):
    res, rows, out, *_ = run
    assert res["carol"].score == FULL - 2 and res["carol"].exercises[MIXED] == 0
    page = (out / "feedback" / "carol.html").read_text()
    assert MIXED in page and "ExerciseError" in page and "Carol" not in page.replace("carol", "")


def test_patching_helpers_builtins_numpy_scalelib_gains_nothing(run):
    res, *_ = run
    p = res["patcher"]
    assert p.exercises[MIXED] == 0  # ex.check_close patched
    assert p.exercises[INT8] == 0  # builtins, numpy, math.isclose patched
    assert p.exercises[GPU] == 0  # scalelib patched


def test_always_equal_objects_and_edited_or_deleted_tests_gain_nothing(run):
    res, *_ = run
    t = res["patcher"]
    assert t.exercises[CRIT] == 0  # returns an object equal to anything
    assert t.exercises[PER] == 0  # wrong, and its test cell deleted
    assert t.exercises[TWO] == 0  # wrong, and its test cell edited to pass
    assert t.score == FULL - 2 - 2 - 1 - 1 - 1 - 2  # every honest answer still counts
    assert t.status == "graded"  # deleted or edited tests are not a problem: the instructor's ran


@pytest.mark.skipif(not SANDBOXED, reason=f"no OS sandbox here: {probes.available()}")
def test_cannot_read_solutions_gradebook_or_other_submissions(run):
    res, *_ = run
    assert res["snoop"].exercises[MIXED] == 0


@pytest.mark.skipif(not SANDBOXED, reason=f"no OS sandbox here: {probes.available()}")
def test_cannot_write_outside_scratch(run):
    res, rows, out, tmp, archive, roster, seconds, canary, outside = run
    assert not outside.exists() and not (course.SOLUTIONS / "pwned.ipynb").exists()
    assert json.loads(canary.read_text())["student"] == "canary"
    assert rows["alice"]["score"] == "15" and "999" not in (out / "grades.csv").read_text()
    assert res["snoop"].score == FULL - 2 - 1


def test_hanging_code_is_interrupted_and_others_still_graded(run):
    res, *_ = run
    h = res["hang"]
    assert h.status == "partially graded" and "timed out" in h.detail
    assert h.exercises[MIXED] == 0 and h.exercises[GPU] == 0
    assert "Timeout" in h.messages[GPU]
    assert h.score == FULL - 2 - 1  # later exercises still graded after the interrupt
    assert res["nosig"].exercises[MIXED] == 0


@pytest.mark.skipif(not SANDBOXED, reason=f"no OS sandbox here: {probes.available()}")
def test_fork_bomb_is_stopped_and_costs_only_its_exercise(run):
    res, *_ = run
    f = res["forker"]
    assert f.status == "crashed" and f.exercises[MIXED] == 0
    assert f.score == FULL - res["alice"].exercises[MIXED]


def test_huge_output_is_capped(run):
    res, rows, out, *_ = run
    f = res["flood"]
    assert f.exercises[MIXED] == 0 and "bytes" in f.detail
    assert (out / "results" / "flood.json").stat().st_size < 100_000
    assert (out / "feedback" / "flood.html").stat().st_size < 100_000


def test_memory_hog_fails_alone(run):
    res, *_ = run
    h = res["hog"]
    assert h.exercises[MIXED] == 0 and h.exercises[GPU] == 0
    assert h.score == FULL - 2 - 1 and "MemoryError" in h.messages[GPU], (h.exercises, h.messages, h.detail)


def test_hostile_submissions_do_not_change_honest_ones(run):
    res, *_ = run
    for s in ("alice", "colab"):
        assert res[s].score == FULL, (s, res[s].messages)


def test_feedback_shows_only_that_student(run):
    res, rows, out, *_ = run
    pages = {p.stem: p.read_text() for p in (out / "feedback").glob("*.html")}
    assert set(res) <= set(pages)
    for student, page in pages.items():
        assert f"{CH}: {student}<" in page
        assert not [s for s in res if s != student and (f"{CH}: {s}<" in page or (res[s].file and res[s].file in page))], student


def test_resumable_rerun_skips_graded_students(run):
    res, rows, out, tmp, archive, roster, seconds, *_ = run
    before = (out / "results" / "alice.json").read_text()
    start = time.perf_counter()
    again = {r.student: r for r in class_run.grade(archive, CH, out, roster=roster, workers=2, quiet=True)}
    assert time.perf_counter() - start < 15  # nothing re-executed
    assert {s: (r.status, r.score) for s, r in again.items()} == {s: (r.status, r.score) for s, r in res.items()}
    assert (out / "results" / "alice.json").read_text() == before


def test_switching_off_the_switch_off_gains_nothing(run):
    """Hostile finding 1: ex.forbid and __import__ rebound, then the library sought by alias, import, sys.modules
    and its files: nothing of scalelib.roofline is in the kernel, so the answer scores 0, and the rest is honest."""
    res, *_ = run
    s = res["switcher"]
    assert s.exercises[BOUNDS] == 0 and s.score == FULL - res["alice"].exercises[BOUNDS], s.messages


def test_an_oversized_reply_costs_only_its_exercise(run):
    res, *_ = run
    b = res["bigreply"]
    assert b.exercises[GPU] == 0 and b.score == FULL - res["alice"].exercises[GPU], (b.detail, b.messages)



@pytest.mark.skipif(not SANDBOXED, reason=f"no OS sandbox here: {probes.available()}")
def test_a_disk_hog_is_stopped_at_the_limit_and_costs_only_its_exercise(run):
    """Issue 19, class 2: all of a kernel's files (every process, scratch, /tmp and /dev/shm) count against one
    limit; past it the kernel is stopped, the row says why, and none of the files reached the host's disk."""
    res, rows, out, tmp, *_ = run
    d = res["diskhog"]
    assert d.status == "crashed" and d.exercises[MIXED] == 0, (d.detail, d.messages)
    assert "over the disk limit of 64 MB" in d.detail and "over the disk limit of 64 MB" in rows["diskhog"]["detail"]
    assert d.score == FULL - res["alice"].exercises[MIXED]
    assert res["alice"].score == FULL
    assert not list(tmp.rglob("diskhog-*")) and not list(Path(tempfile.gettempdir()).glob("grade-*/**/diskhog-*"))
