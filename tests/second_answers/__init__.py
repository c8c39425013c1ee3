"""Second honest answers: for every exercise, a correct answer written differently from the solution (properties and
methods of the objects it receives, numpy instead of jax, loops instead of vector code, a helper), the way another
student would write it from the page. Graded with the chapter's other students (tests/test_grading_chapters.py,
tests/test_grading.py), each must score full marks: what works in the visible checks works when graded.

One module per chapter group, each defining ``SECOND: dict[chapter, dict[exercise id, answer source]]`` (the shape of
tests/delegations.py's DELEGATIONS); every chapter must have its answers (a new chapter adds a module here).
"""

from __future__ import annotations

from tests.second_answers import ch01_05, ch06_10, ch11


def _merge() -> dict[str, dict[str, str]]:
    merged: dict[str, dict[str, str]] = {}
    for module in (ch01_05, ch06_10, ch11):
        for chapter, answers in module.SECOND.items():
            assert chapter not in merged, f"{chapter} has second answers in two modules"
            merged[chapter] = dict(answers)
    return merged


SECOND = _merge()
