"""Shards and merge (autograder.grading.shards), the SLURM and Kubernetes recipes (autograder/deploy), LMS exports.

One small class is graded twice: once in one run, once as two shards through the SLURM array script (run here
with the environment SLURM would give it) and joined by the merge script. Every file a class gets must come out
byte for byte the same.
"""

from __future__ import annotations

import csv
import hashlib
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import nbformat
import pytest
import yaml

from autograder import course
from autograder.grading import class_run, shard_merge, shards
from autograder.grading.grading_errors import MergeError
from autograder.intake import file_names
from tests.notebook_answers import answered, delegating

pytestmark = pytest.mark.grading

CH = "06_training_llama3"
DEPLOY = course.ROOT / "autograder" / "deploy"
# Before issue 19 an id that is not plain ASCII became 'readable part-10 hex digits', itself a plain id: a student
# with this id shared zoë's results/ and feedback/ files (and a merge kept one of the two).
ZOE_OLD_STEM = "zoe-" + hashlib.sha256("zoë".encode()).hexdigest()[:10]
ROSTER = f"""student,name,id,sis_id,login,section
alice,Alice Adams,101,S-101,aadams,A
bob,Bob Brown,102,S-102,bbrown,A
dora,Dora Dele,103,S-103,ddele,B
zoë,Zoë Zed,104,S-104,zzed,B
gina,Gina Gone,105,S-105,ggone,B
{ZOE_OLD_STEM},Zoe Stem,106,S-106,zstem,B
"""
CLASS = {"alice", "bob", "dora", "zoë", "gina", ZOE_OLD_STEM}


def _slurm(script: str, env: dict[str, str]) -> None:
    full = {**os.environ, "REPO": str(course.ROOT), "SCALELIB_PYTHON": sys.executable, **env}
    run = subprocess.run(["bash", str(DEPLOY / "slurm" / script)], env=full, capture_output=True, text=True,
                         timeout=900, check=False)
    assert run.returncode == 0, (script, run.stdout[-2000:], run.stderr[-2000:])


@pytest.fixture(scope="module")
def classes(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("shards")
    subs = tmp / "subs"
    subs.mkdir()
    nbformat.write(answered(CH), subs / "adams_101_1_06_training_llama3.ipynb")
    shutil.copy(course.CHAPTERS / f"{CH}.ipynb", subs / "brown_102_2_06_training_llama3.ipynb")  # untouched
    nbformat.write(delegating(CH), subs / "dele_103_3_06_training_llama3.ipynb")
    nbformat.write(answered(CH), subs / "zed_104_4_06_training_llama3.ipynb")
    (subs / "zed_104_9_06_training_llama3.ipynb").write_text("{ not json")  # older, superseded
    os.utime(subs / "zed_104_9_06_training_llama3.ipynb", (315_700_000, 315_700_000))  # 1980, the oldest a zip keeps
    archive, roster = tmp / "export.zip", tmp / "roster.csv"
    with zipfile.ZipFile(archive, "w") as zf:
        for p in sorted(subs.iterdir()):
            zf.write(p, p.name)
    roster.write_text(ROSTER, encoding="utf-8")
    single = tmp / "single"
    class_run.grade(archive, CH, single, roster=roster, workers=2, quiet=True, lms="canvas")
    env = {"SUBMISSIONS": str(archive), "CHAPTER": CH, "ROSTER": str(roster), "OUT_ROOT": str(tmp / "sharded"),
           "SLURM_ARRAY_TASK_COUNT": "2", "SLURM_CPUS_PER_TASK": "2", "LMS": "canvas"}
    for k in (0, 1):
        _slurm("grade.sbatch", {**env, "SLURM_ARRAY_TASK_ID": str(k)})
    _slurm("merge.sbatch", env)
    return single, tmp / "sharded", tmp


def _files(folder: Path) -> dict[str, bytes]:
    """The class's files: the CSVs and shard.json at the top, and every feedback page."""
    paths = [*folder.glob("*.csv"), *folder.glob("*.json"), *(folder / "feedback").glob("*.html")]
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(paths)}


def test_two_shards_merged_equal_one_run_byte_for_byte(classes):
    single, sharded, _ = classes
    merged = sharded / "class"
    one, two = _files(single), _files(merged)
    assert set(one) == set(two)
    assert {"grades.csv", "grades_long.csv", "submissions.csv", "canvas.csv", "shard.json"} <= set(one)
    assert len([f for f in one if f.startswith("feedback/")]) == len(CLASS)
    for name in one:
        assert one[name] == two[name], name
    for path in (single / "results").glob("*.json"):  # the same results, apart from how long each took
        a, b = json.loads(path.read_text()), json.loads((merged / "results" / path.name).read_text())
        a.pop("seconds"), b.pop("seconds")
        assert a == b, path.name


def test_the_shards_split_the_class_and_the_gradebook_holds_it(classes):
    single, sharded, _ = classes
    parts = [set(json.loads((sharded / f"shard-{k}" / "shard.json").read_text())["students"]) for k in (0, 1)]
    assert parts[0] and parts[1] and not parts[0] & parts[1]
    assert parts[0] | parts[1] == CLASS
    assert all(shards.shard_of(s, 2) == k for k, part in enumerate(parts) for s in part)
    from nbgrader.api import Gradebook

    scores = []
    for folder in (single, sharded / "class"):
        with Gradebook(f"sqlite:///{folder / 'nbgrader' / 'gradebook.db'}") as gb:
            scores.append({s.id: gb.find_submission(CH, s.id).score for s in gb.students
                           if s.id not in ("gina", ZOE_OLD_STEM)})
    assert scores[0] == scores[1] and scores[0]["alice"] > 0


def test_a_missing_or_failed_shard_is_named_and_nothing_partial_is_written(classes):
    _, sharded, tmp = classes
    with pytest.raises(MergeError, match="missing: shard 1/2"):
        shard_merge.merge([sharded / "shard-0"], tmp / "partial")
    broken = tmp / "broken-1"
    shutil.copytree(sharded / "shard-1", broken)
    marker = json.loads((broken / "shard.json").read_text())
    (broken / "shard.json").write_text(json.dumps({**marker, "complete": False}))
    with pytest.raises(MergeError, match=r"failed or still running: shard 1/2"):
        shard_merge.merge([sharded / "shard-0", broken], tmp / "partial")
    assert not (tmp / "partial" / "grades.csv").exists()
    shard_merge.merge([sharded / "shard-0"], tmp / "partial", allow_partial=True)
    rows = list(csv.DictReader((tmp / "partial" / "grades.csv").open(encoding="utf-8")))
    assert {r["student"] for r in rows} == set(json.loads((sharded / "shard-0" / "shard.json").read_text())["students"])
    assert json.loads((tmp / "partial" / "shard.json").read_text())["complete"] is False


def test_two_ids_that_used_to_share_a_file_keep_their_own_files_after_a_merge(classes):
    """Issue 19, class 5: zoë and the student whose id is zoë's old file stem each keep a result and a page."""
    _, sharded, _ = classes
    merged = sharded / "class"
    rows = {r["student"]: r for r in csv.DictReader((merged / "grades.csv").open(encoding="utf-8"))}
    assert set(rows) == CLASS
    assert float(rows["zoë"]["score"]) > 0 and rows[ZOE_OLD_STEM]["status"] == "missing"
    stems = {s: file_names.file_stem(s) for s in ("zoë", ZOE_OLD_STEM)}
    assert len(set(stems.values())) == 2
    for student, stem in stems.items():
        assert json.loads((merged / "results" / f"{stem}.json").read_text(encoding="utf-8"))["student"] == student
        page = (merged / "feedback" / f"{stem}.html").read_text(encoding="utf-8")
        assert f"<title>{CH}: {student}</title>" in page
    assert len(list((merged / "feedback").glob("*.html"))) == len(CLASS)


# Issue 19, class 7: merge checks what the shards wrote. Each test tampers with a copy of an honest shard's output.


def _shard(sharded: Path, tmp: Path, k: int, name: str) -> Path:
    copy = tmp / "tampered" / name
    shutil.copytree(sharded / f"shard-{k}", copy)
    return copy


def _marker(folder: Path) -> dict:
    return json.loads((folder / "shard.json").read_text(encoding="utf-8"))


def _set_marker(folder: Path, data: dict) -> None:
    (folder / "shard.json").write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


def _refused(folders: list[Path], out: Path, *expected: str) -> str:
    """merge refuses, its message holds every ``expected`` text and says what to do, and nothing is written."""
    with pytest.raises(MergeError) as err:
        shard_merge.merge(folders, out)
    text = str(err.value)
    for part in expected:
        assert part in text, text
    assert "grade again" in text or "rerun" in text, text
    assert not out.exists()
    return text


def _other(sharded: Path, k: int) -> Path:
    return sharded / f"shard-{1 - k}"


def test_merge_refuses_an_edited_score(classes):
    _, sharded, tmp = classes
    k = shards.shard_of("bob", 2)
    stem = file_names.file_stem("bob")
    for how in ("score only", "score and exercise"):
        copy = _shard(sharded, tmp, k, f"score-{how}")
        path = copy / "results" / f"{stem}.json"
        r = json.loads(path.read_text(encoding="utf-8"))
        assert r["score"] == 0  # bob's notebook is the untouched student notebook
        eid = sorted(r["exercises"])[0]
        r["score"] = 1.0
        if how == "score and exercise":  # consistent with itself: only the shard's record shows it
            r["exercises"][eid] = 1.0
        path.write_text(json.dumps(r, indent=1, ensure_ascii=False), encoding="utf-8")
        folders = sorted([copy, _other(sharded, k)], key=lambda f: _marker(f)["shard"][0])
        text = _refused(folders, tmp / "out-score", f"results/{stem}.json was changed after grading",
                        f"shard {k}/2 ({copy})")
        assert ("exercises add up to 0" in text) == (how == "score only"), text
    copy = _shard(sharded, tmp, k, "page")  # the page a student reads, edited to show another score
    page = copy / "feedback" / f"{stem}.html"
    page.write_text(page.read_text(encoding="utf-8").replace("Score: <b>0 /", "Score: <b>9 /"), encoding="utf-8")
    _refused(sorted([copy, _other(sharded, k)], key=lambda f: _marker(f)["shard"][0]), tmp / "out-score",
             f"shard {k}/2 ({copy}): feedback/{stem}.html was changed after grading")


def test_merge_refuses_a_student_listed_by_two_shards(classes):
    _, sharded, tmp = classes
    k = shards.shard_of("bob", 2)
    copy = _shard(sharded, tmp, 1 - k, "bob-twice")
    for sub, ext in (("results", "json"), ("feedback", "html")):  # bob's files too, and recorded: a careful edit
        name = f"{file_names.file_stem('bob')}.{ext}"
        shutil.copyfile(sharded / f"shard-{k}" / sub / name, copy / sub / name)
    data = _marker(copy)
    data["students"] = sorted([*data["students"], "bob"])
    data["files"] = shards.files_digest(copy, data["students"])
    _set_marker(copy, data)
    _refused(sorted([copy, sharded / f"shard-{k}"], key=lambda f: _marker(f)["shard"][0]), tmp / "out-twice",
             "student 'bob' is listed by shard 0/2", "and shard 1/2", f"lists 'bob', who belongs to shard {k}/2")


def test_merge_refuses_a_shard_that_leaves_a_student_out(classes):
    _, sharded, tmp = classes
    k = shards.shard_of("alice", 2)
    copy = _shard(sharded, tmp, k, "alice-left-out")
    data = _marker(copy)
    data["students"].remove("alice")
    for name in shards.student_files("alice"):
        (copy / name).unlink()
        data["files"].pop(name)
    _set_marker(copy, data)
    _refused(sorted([copy, _other(sharded, k)], key=lambda f: _marker(f)["shard"][0]), tmp / "out-left",
             f"shard {k}/2 ({copy}) leaves out 'alice', whom its K owns")


def test_merge_refuses_shards_graded_under_different_limits(classes):
    _, sharded, tmp = classes
    copy = _shard(sharded, tmp, 1, "limits")
    data = _marker(copy)
    honest = data["limits"]["memory_mb"]
    data["limits"]["memory_mb"] = honest // 2
    _set_marker(copy, data)
    _refused([sharded / "shard-0", copy], tmp / "out-limits", f"shard 1/2 ({copy}) is not a shard of the same run",
             f"limit memory_mb: {honest} vs {honest // 2}")


def test_merge_refuses_shards_of_different_exports_that_share_file_names(classes):
    _, sharded, tmp = classes
    k = shards.shard_of("zoë", 2)
    copy = _shard(sharded, tmp, k, "other-export")
    data = _marker(copy)
    file = data["graded"]["zoë"]
    other = hashlib.sha256(b"another export's notebook of the same name").hexdigest()
    data["export"][file] = other  # what a shard that read another export with this file name records
    _set_marker(copy, data)
    text = _refused(sorted([copy, _other(sharded, k)], key=lambda f: _marker(f)["shard"][0]), tmp / "out-export",
                    "is not a shard of the same run", f"export file {file!r}: content SHA-256")
    assert other[:16] in text
    # merged alone (the other shard lost), its zoë result is not of the file it says it read
    with pytest.raises(MergeError, match=r"was not graded from 'zed_104_4_06_training_llama3.ipynb' as the shard read"):
        shard_merge.merge([copy], tmp / "out-export", allow_partial=True)
    assert not (tmp / "out-export").exists()


def test_merge_refuses_a_shard_whose_marker_was_copied_from_another(classes):
    _, sharded, tmp = classes
    copy = _shard(sharded, tmp, 1, "copied-marker")
    shutil.copyfile(sharded / "shard-0" / "shard.json", copy / "shard.json")
    zero = _marker(sharded / "shard-0")["students"]
    _refused([copy, sharded / "shard-1"], tmp / "out-copied", f"shard 0/2 ({copy}): feedback/",
             f"are missing ({2 * len(zero)} of its students' {2 * len(zero)} result and feedback files) (its shard.json "
             "describes none of the files beside it: copied from another shard?)")
    _refused([sharded / "shard-0", copy], tmp / "out-copied", "shard 0/2 given twice",
             f"({copy}): feedback/")


def test_canvas_and_long_csv_headers_and_values(classes):
    single, _, _ = classes
    grades = {r["student"]: r for r in csv.DictReader((single / "grades.csv").open(encoding="utf-8"))}
    with (single / "canvas.csv").open(encoding="utf-8", newline="") as f:
        rows = list(csv.reader(f))
    assert rows[0] == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", CH]
    assert rows[1][0] == "Points Possible" and float(rows[1][5]) == float(grades["alice"]["max_score"])
    body = {r[1]: r for r in rows[2:]}
    assert [r[1] for r in rows[2:]] == ["101", "102", "103", "104", "105", "106"]  # roster order
    assert body["101"][:5] == ["Alice Adams", "101", "S-101", "aadams", "A"]
    for sid, student in (("101", "alice"), ("102", "bob"), ("103", "dora"), ("104", "zoë"), ("105", "gina")):
        assert body[sid][5] == grades[student]["score"]
    assert body["101"][5] == grades["alice"]["max_score"] and body["105"][5] == "0"
    long = list(csv.DictReader((single / "grades_long.csv").open(encoding="utf-8")))
    assert list(long[0]) == ["student", "chapter", "exercise", "title", "points", "max_points", "status",
                             "scored_by", "auto_points"]
    assert {(r["scored_by"], r["auto_points"] == r["points"]) for r in long} == {("autograder", True)}
    exercises = [k for k in grades["alice"] if k.startswith("ch06-")]
    assert len(long) == len(CLASS) * len(exercises)
    for row in long:
        assert row["points"] == grades[row["student"]][row["exercise"]] and row["title"].startswith("Exercise 6.")
    assert sum(float(r["max_points"]) for r in long if r["student"] == "bob") == float(grades["bob"]["max_score"])


def test_a_merge_into_a_class_keeps_the_scores_typed_in_its_formgrader(classes, tmp_path, capsys):
    """Issue 48: merging the shards again into a class folder whose formgrader holds a manual score writes that score
    into grades.csv, grades_long.csv and canvas.csv (the gradebook keeps it, as a re-grade does) and names it."""
    from nbgrader.api import Gradebook

    from autograder.outputs import gradebook

    _, sharded, tmp = classes
    out = tmp_path / "class"
    shutil.copytree(sharded / "class", out)  # the merged class of the other tests stays as it was
    eid = next(k for k in json.loads((out / "results" / "alice.json").read_text())["exercises"])
    with Gradebook(gradebook.db_url(out / "nbgrader")) as gb:
        g = gb.find_grade(eid, CH, CH, "alice")
        auto, g.manual_score = g.auto_score, 0.5
        gb.db.commit()
    capsys.readouterr()
    shard_merge.merge([sharded / "shard-0", sharded / "shard-1"], out, roster=tmp / "roster.csv", lms="canvas")
    said = capsys.readouterr().out
    assert "kept 1 manual score from formgrader" in said
    assert f"\n  alice, {eid}: {auto:g} -> 0.5 (manual score 0.5)\n" in said
    single = {r["student"]: r for r in csv.DictReader((sharded / "class" / "grades.csv").open(encoding="utf-8"))}
    grades = {r["student"]: r for r in csv.DictReader((out / "grades.csv").open(encoding="utf-8"))}
    assert float(grades["alice"]["score"]) == pytest.approx(float(single["alice"]["score"]) - auto + 0.5)
    assert float(grades["alice"][eid]) == 0.5 and grades["bob"] == single["bob"]
    canvas = {r[1]: r[-1] for r in csv.reader((out / "canvas.csv").open(encoding="utf-8", newline=""))}
    assert canvas["101"] == grades["alice"]["score"]
    long = {(r["student"], r["exercise"]): r for r in csv.DictReader((out / "grades_long.csv").open(encoding="utf-8"))}
    assert (long[("alice", eid)]["scored_by"], float(long[("alice", eid)]["auto_points"])) == ("manual", auto)


def test_the_kubernetes_recipe_is_an_indexed_job_that_shards_by_its_completion_index():
    job = yaml.safe_load((DEPLOY / "kubernetes" / "grade-job.yaml").read_text())
    spec, pod = job["spec"], job["spec"]["template"]["spec"]
    container = pod["containers"][0]
    env = {e["name"]: e["value"] for e in container["env"]}
    assert job["kind"] == "Job" and spec["completionMode"] == "Indexed" and spec["completions"] == int(env["SHARDS"])
    command = " ".join(container["args"])
    assert '--shard "$JOB_COMPLETION_INDEX/$SHARDS"' in command and "autograder doctor" in command
    assert container["securityContext"]["procMount"] == "Unmasked" and pod["hostUsers"] is False
    merge = yaml.safe_load((DEPLOY / "kubernetes" / "merge-job.yaml").read_text())
    merge_container = merge["spec"]["template"]["spec"]["containers"][0]
    assert merge_container["image"] == container["image"] and "autograder merge /data/out/shard-*" in merge_container["args"][0]
    assert "-c .ci/constraints.txt" in (DEPLOY / "Containerfile").read_text()


def test_a_bad_shard_argument_says_what_is_expected():
    assert shards.parse("3/8") == (3, 8)
    for bad in ("8/8", "x", "1/0"):
        with pytest.raises(SystemExit):
            shards.parse(bad)
