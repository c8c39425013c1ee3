"""tests/conftest.py: how the suite is split between its two workers."""

from pathlib import Path

from tests.conftest import JOIN, LONG_GROUPS_S, SPLIT, work_group

TESTS = Path(__file__).parent


def test_groups_keep_what_shares_a_fixture_together():
    assert work_group("tests/test_grading.py::test_a[x]") == "tests/test_grading.py"  # a file, as loadfile
    assert work_group("tests/test_grading_chapters.py::test_b[05_training]") == \
        work_group("tests/test_grading_chapters.py::test_c[05_training]") == "tests/test_grading_chapters.py[05_training]"
    assert work_group("tests/test_parallel_selfcheck.py::test_scheme_matches_single_device[data]") == \
        "tests/test_parallel_selfcheck.py"  # every scheme shares the one two-process launch
    assert work_group("tests/test_parallel_selfcheck.py::test_other_splits_of_8_devices[8-1-schemes1]") == \
        "tests/test_parallel_selfcheck.py[8-1-schemes1]"
    assert work_group("tests/test_serving_engine.py::t") == work_group("tests/test_serving_paged.py::t[a]")
    assert work_group("solutions/01_rooflines.ipynb::Cell 3") == "solutions/01_rooflines.ipynb"


def test_every_named_file_exists():
    """A renamed test file would otherwise lose its group or its place in the order without a word."""
    for name in SPLIT:
        assert (TESTS / name).is_file(), name
    for prefix in JOIN:
        assert list(TESTS.glob(f"{prefix}*.py")), prefix
    for group in LONG_GROUPS_S:
        name = group.split("[")[0]
        assert list(TESTS.glob(name)), group
