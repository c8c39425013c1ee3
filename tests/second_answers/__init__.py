"""Second honest answers: for every exercise, a correct answer written differently from the solution (properties and
methods of the objects it receives, numpy instead of jax, loops instead of vector code, a helper), the way another
student would write it from the page. Graded with the chapter's other students (tests/test_grading_chapters.py,
tests/test_grading.py), each must score full marks: what works in the visible checks works when graded.

One module per chapter group, each defining ``SECOND: dict[chapter, dict[exercise id, answer source]]`` (the shape of
tests/delegations.py's DELEGATIONS). A group's module that is not there yet leaves its chapters without second
answers (their tests skip and say so).
"""

from __future__ import annotations

import importlib

GROUPS = ("ch01_05", "ch06_10")


def _merge() -> tuple[dict[str, dict[str, str]], list[str]]:
    merged: dict[str, dict[str, str]] = {}
    missing = []
    for group in GROUPS:
        try:
            module = importlib.import_module(f"{__name__}.{group}")
        except ModuleNotFoundError as err:
            if err.name != f"{__name__}.{group}":
                raise  # a module that is there but fails to import is a bug, not a missing group
            missing.append(group)
            continue
        for chapter, answers in module.SECOND.items():
            assert chapter not in merged, f"{chapter} has second answers in two modules"
            merged[chapter] = dict(answers)
    return merged, missing


SECOND, MISSING_GROUPS = _merge()
