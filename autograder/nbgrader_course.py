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
    """Copy the chapter's source notebook into ``root`` and run nbgrader's generate_assignment.

    Returns the API (its gradebook now knows the chapter's grade cells) and the released notebook path.
    """
    source = root / "source" / chapter
    source.mkdir(parents=True, exist_ok=True)
    shutil.copy(solutions / f"{chapter}.ipynb", source / f"{chapter}.ipynb")
    api = make_api(root, cell_timeout_s)
    result = api.generate_assignment(chapter, force=True, create=True)
    if not result["success"]:
        log, error = result.get("log", ""), result.get("error", "")
        raise RuntimeError(f"nbgrader could not generate {chapter}:\n{log}\n{error}")
    return api, root / "release" / chapter / f"{chapter}.ipynb"
