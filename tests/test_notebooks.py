"""Committed notebooks carry no outputs, and every solution notebook is valid nbformat.

The notebooks themselves are executed top to bottom by nbval (``--nbval-lax solutions/`` in the
suite's command, see README).
"""

import nbformat

from autograder import course


def test_solution_notebooks_are_clean_and_tagged():
    names = course.chapter_names()
    assert names, "no chapters in solutions/"
    for name in names:
        nb = nbformat.read(course.SOLUTIONS / f"{name}.ipynb", as_version=4)
        nbformat.validate(nb)
        assert all(not c.get("outputs") and c.get("execution_count") is None for c in nb.cells if c.cell_type == "code")
        ids = [c.metadata["nbgrader"]["grade_id"] for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade")]
        assert len(ids) == len(set(ids)) and all(i.startswith(name[:2].join(("ch", ""))) for i in ids)
        setup = [c for c in nb.cells if "setup" in c.metadata.get("tags", [])]
        assert len(setup) == 1 and "devices.setup(8)" in setup[0].source
