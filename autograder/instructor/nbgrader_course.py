"""A throw-away nbgrader course directory built from solutions/ for one chapter."""

from __future__ import annotations

import logging
import os
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from traitlets.config import Config

from autograder.course import CODE_STUB, SOLUTIONS

if TYPE_CHECKING:
    from nbgrader.apps import NbGraderAPI


def _venv_on_path() -> None:
    """nbgrader runs helper programs (alembic) by name: make this interpreter's bin/ findable."""
    bindir = str(Path(sys.executable).parent)
    if bindir not in os.environ.get("PATH", "").split(os.pathsep):
        os.environ["PATH"] = bindir + os.pathsep + os.environ.get("PATH", "")


def alembic_head_in_process() -> None:
    """nbgrader asks a new database's schema version from an ``alembic heads`` subprocess (~2.5 s of CPU
    for one string, and found only if the virtual environment's bin/ is on PATH); read the same revision from
    nbgrader's migration scripts in this process instead. Every gradebook nbgrader creates (one per rendered
    chapter at release, one per grading run) asks."""
    import nbgrader.api
    from alembic.config import Config
    from alembic.script import ScriptDirectory
    from nbgrader import dbutil

    if getattr(nbgrader.api.get_alembic_version, "_in_process", False):
        return
    cfg = Config()
    cfg.set_main_option("script_location", dbutil.ALEMBIC_DIR)
    head = ScriptDirectory.from_config(cfg).get_current_head()

    def get_alembic_version() -> str | None:
        return head

    setattr(get_alembic_version, "_in_process", True)  # noqa: B010 - a marker on a function object
    setattr(get_alembic_version, "original", nbgrader.api.get_alembic_version)  # noqa: B010 - for the test
    nbgrader.api.get_alembic_version = get_alembic_version


def make_api(root: Path, cell_timeout_s: int = 600) -> NbGraderAPI:
    from nbgrader.apps import NbGraderAPI

    _venv_on_path()
    alembic_head_in_process()
    cfg = Config()
    cfg.CourseDirectory.root = str(root)
    cfg.Exchange.root = str(root / "exchange")  # unused, but nbgrader checks it is writable
    cfg.CourseDirectory.db_url = f"sqlite:///{root / 'gradebook.db'}"
    cfg.ClearSolutions.code_stub = {"python": CODE_STUB}
    cfg.Execute.timeout = cell_timeout_s
    cfg.Execute.interrupt_on_timeout = True
    cfg.NbGraderAPI.log_level = logging.WARNING
    return NbGraderAPI(config=cfg)


def generate(root: Path, chapter: str, solutions: Path = SOLUTIONS,
             cell_timeout_s: int = 600) -> tuple[NbGraderAPI, Path]:
    """Copy the chapter's source notebook into ``root`` and run nbgrader's generate_assignment (without the change
    of working directory nbgrader's own call makes: :func:`_generate_assignment`).

    Returns the API (its gradebook now knows the chapter's grade cells) and the released notebook path.
    """
    root = Path(root).resolve()  # every path nbgrader builds from it is absolute: none depends on the cwd
    source = root / "source" / chapter
    source.mkdir(parents=True, exist_ok=True)
    shutil.copy(solutions / f"{chapter}.ipynb", source / f"{chapter}.ipynb")
    api = make_api(root, cell_timeout_s)
    result = _generate_assignment(api, chapter)
    if not result["success"]:
        log, error = result.get("log", ""), result.get("error", "")
        raise RuntimeError(f"nbgrader could not generate {chapter}:\n{log}\n{error}")
    return api, root / "release" / chapter / f"{chapter}.ipynb"


def _generate_assignment(api: NbGraderAPI, chapter: str) -> dict:
    """``api.generate_assignment(chapter, force=True, create=True)``, except that the process's working directory
    stays where it is.

    nbgrader's converters (``BaseConverter.start``) ``os.chdir`` into the course root for the whole conversion and
    back after it. The working directory belongs to the whole process: ``grade`` builds its gradebook in a thread
    while worker threads write grades and feedback, so for those seconds every relative path of every other thread
    pointed into the course folder (a relative ``--out OUT`` wrote some files to ``OUT/nbgrader/OUT/``). The root
    here is absolute and so is every path nbgrader derives from it (``CourseDirectory.format_path`` joins it), so
    the conversion needs no change of directory; this runs the same steps as ``GenerateAssignment.start`` and
    ``BaseConverter.start`` of nbgrader 0.9 (pinned <0.10 in pyproject.toml) without it.
    """
    from nbconvert.writers import FilesWriter
    from nbgrader.converters import GenerateAssignment
    from nbgrader.utils import capture_log, temp_attrs

    class GenerateInPlace(GenerateAssignment):
        def start(self) -> None:
            before = self.coursedir.student_id
            self.coursedir.student_id = "."  # what GenerateAssignment.start sets
            try:  # BaseConverter.start, less its os.chdir(self.coursedir.root)
                self.init_notebooks()
                self.writer = FilesWriter(parent=self, config=self.config)
                self.exporter = self.exporter_class(parent=self, config=self.config)
                for pp in self.preprocessors:
                    self.exporter.register_preprocessor(pp)
                self.convert_notebooks()
            finally:
                self.coursedir.student_id = before

    with temp_attrs(api.coursedir, assignment_id=chapter):
        app = GenerateInPlace(coursedir=api.coursedir, parent=api)
        app.force = True
        app.create_assignment = True
        return capture_log(app)
