"""Grade a folder (or zip) of student notebooks for one chapter with nbgrader's autograder.

Writes ``grades.csv`` (one row per student, one column per exercise) and ``feedback/<student>.html``,
and prints one status line per student. Scores come from nbgrader's gradebook, so a deleted or edited
test cell cannot earn points: nbgrader restores the instructor's test cells before running.
"""

from __future__ import annotations

import csv
import json
import re
import shutil
import tempfile
import time
import warnings
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from autograder import course, nbgrader_course


@dataclass(frozen=True)
class StudentResult:
    student: str
    status: str  # 'graded', 'invalid notebook', 'failed to run'
    score: float
    max_score: float
    exercises: dict[str, float] = field(default_factory=dict)
    seconds: float = 0.0
    detail: str = ""

    def line(self) -> str:
        extra = f" ({self.detail})" if self.detail else ""
        return f"{self.student:24s} {self.score:6.1f} / {self.max_score:.1f}  {self.status}{extra}  [{self.seconds:.1f} s]"


def _student_id(path: Path, chapter: str) -> str:
    name = path.parent.name if path.stem == chapter else path.stem
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("_") or "unknown"


def find_submissions(source: Path, chapter: str, workdir: Path) -> dict[str, Path]:
    """Map student id -> notebook, from a folder or a .zip of notebooks."""
    if source.is_file() and source.suffix == ".zip":
        unpacked = workdir / "unzipped"
        with zipfile.ZipFile(source) as zf:
            zf.extractall(unpacked)
        source = unpacked
    if not source.is_dir():
        raise SystemExit(f"{source} is neither a folder nor a .zip of notebooks")
    found: dict[str, Path] = {}
    for nb in sorted(source.rglob("*.ipynb")):
        if ".ipynb_checkpoints" in nb.parts:
            continue
        sid = _student_id(nb.relative_to(source), chapter)
        if sid in found:
            raise SystemExit(f"two notebooks map to student {sid!r}: {found[sid]} and {nb}; rename one")
        found[sid] = nb
    if not found:
        raise SystemExit(f"no .ipynb files under {source}")
    return found


def _readable(nb_path: Path) -> str:
    try:
        json.loads(nb_path.read_text(encoding="utf-8"))
        return ""
    except (UnicodeDecodeError, ValueError) as err:
        return f"not a notebook: {str(err)[:80]}"


def grade(source: Path, chapter: str, out_dir: Path, root: Path = course.ROOT) -> list[StudentResult]:
    from nbgrader.api import Gradebook

    # nbgrader's gradebook trips SQLAlchemy's autoflush warnings on every submission; they are noise.
    warnings.filterwarnings("ignore", module="nbgrader.api")
    settings = course.settings(root)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "feedback").mkdir(exist_ok=True)
    results: list[StudentResult] = []
    with tempfile.TemporaryDirectory(prefix="grade-") as tmp:
        work = Path(tmp)
        api, _ = nbgrader_course.generate(work / "course", chapter, root / "solutions", settings.cell_timeout_s)
        db_url = f"sqlite:///{work / 'course' / 'gradebook.db'}"
        with Gradebook(db_url) as gb:
            max_scores = {g.name: g.max_score for g in gb.find_notebook(chapter, chapter).grade_cells}
        max_total = sum(max_scores.values())
        for sid, nb in find_submissions(source, chapter, work).items():
            start = time.perf_counter()
            problem = _readable(nb)
            if problem:
                result = StudentResult(sid, "invalid notebook", 0.0, max_total, {}, 0.0, problem)
            else:
                target = work / "course" / "submitted" / sid / chapter
                target.mkdir(parents=True, exist_ok=True)
                shutil.copy(nb, target / f"{chapter}.ipynb")
                run = api.autograde(chapter, sid, force=True, create=True)
                if not run["success"]:
                    detail = (run.get("error") or run.get("log") or "").strip().splitlines()[-1:] or [""]
                    result = StudentResult(sid, "failed to run", 0.0, max_total, {}, time.perf_counter() - start, detail[0][:120])
                else:
                    with Gradebook(db_url) as gb:
                        sub = gb.find_submission_notebook(chapter, chapter, sid)
                        scores = {g.name: float(g.score or 0.0) for g in sub.grades if g.name in max_scores}
                    api.generate_feedback(chapter, sid, force=True)
                    html = work / "course" / "feedback" / sid / chapter / f"{chapter}.html"
                    if html.exists():
                        shutil.copy(html, out_dir / "feedback" / f"{sid}.html")
                    result = StudentResult(sid, "graded", sum(scores.values()), max_total, scores, time.perf_counter() - start)
            print(result.line(), flush=True)
            results.append(result)
    write_csv(out_dir / "grades.csv", chapter, results, list(max_scores))
    return results


def write_csv(path: Path, chapter: str, results: list[StudentResult], exercise_ids: list[str]) -> None:
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["student", "chapter", "score", "max_score", "status", *exercise_ids])
        for r in results:
            writer.writerow([r.student, chapter, f"{r.score:g}", f"{r.max_score:g}", r.status,
                             *(f"{r.exercises.get(e, 0.0):g}" for e in exercise_ids)])
