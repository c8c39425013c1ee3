"""Every numeric result of the book that scalelib covers, reproduced by calling scalelib.

tests/data/book_answers.yaml holds the book's answers (acceptance data); tests/book_answers/chNN*.py
say which scalelib call reproduces each. An entry flagged as a book slip is held to its
recomputed value, not to the number the book printed.
"""

from pathlib import Path

import pytest
import yaml

from tests.book_answers import all_reproducers

DATA = Path(__file__).parent / "data" / "book_answers.yaml"
ENTRIES = {e["id"]: e for e in yaml.safe_load(DATA.read_text())}
REPRODUCERS = all_reproducers()
# The recomputed values of flagged entries are given to four significant digits.
RECOMPUTED_RTOL = 2e-3


def expected_value(entry: dict) -> tuple[float, float]:
    """(value scalelib must give, relative tolerance) for one entry."""
    if entry.get("flagged"):
        return entry["recomputed"], RECOMPUTED_RTOL
    return float(entry["answer"]), max(float(entry["tolerance"] or 0.0), 1e-9)


def coverage() -> dict[str, tuple[int, int]]:
    """Covered / total entries for each reference file (chapters 1-5, 6-10, and the GPU part, the book's 12)."""
    out = {}
    for name, chapters in (("ch01-05", range(1, 6)), ("ch06-10", range(6, 11)), ("gpus", range(12, 13))):
        ids = [i for i, e in ENTRIES.items() if e["chapter"] in chapters]
        out[name] = (sum(i in REPRODUCERS for i in ids), len(ids))
    return out


def test_every_reproducer_names_a_known_entry():
    unknown = sorted(set(REPRODUCERS) - set(ENTRIES))
    assert not unknown, f"reproducers for ids not in {DATA.name}: {unknown}"


@pytest.mark.parametrize("entry_id", sorted(REPRODUCERS))
def test_book_answer(entry_id):
    entry = ENTRIES[entry_id]
    want, rtol = expected_value(entry)
    got = REPRODUCERS[entry_id](entry["inputs"])
    assert isinstance(got, (int, float)) and not isinstance(got, bool), f"{entry_id}: got {got!r}"
    assert got == pytest.approx(want, rel=rtol), (
        f"{entry_id}: scalelib gives {got:.6g}, the book {'(recomputed) ' if entry.get('flagged') else ''}"
        f"{want:.6g} (rel tol {rtol})"
    )


def test_chapter_1_fully_covered():
    missing = sorted(i for i, e in ENTRIES.items() if e["chapter"] == 1 and i not in REPRODUCERS)
    assert not missing, f"chapter 1 entries without a scalelib reproduction: {missing}"


def test_gpu_part_fully_covered():
    """Every entry of the book's GPU part with a formula is reproduced (course chapter 11)."""
    missing = sorted(i for i, e in ENTRIES.items() if e["chapter"] == 12 and i not in REPRODUCERS)
    assert not missing, f"GPU-part entries without a scalelib reproduction: {missing}"
