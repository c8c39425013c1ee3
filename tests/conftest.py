"""Test session set-up: 8 simulated CPU devices before anything starts JAX."""

import os

os.environ.setdefault("MPLBACKEND", "Agg")  # headless plots in tests

from scalelib import devices  # noqa: E402

DEVICE_INFO = devices.setup(8)


def pytest_terminal_summary(terminalreporter):
    """Say how much of the book's numeric results the suite reproduces."""
    try:
        from tests.test_book_answers import coverage
    except Exception:  # the book-answer test was not collected in this run
        return
    parts = [f"{name}: {n} of {total}" for name, (n, total) in coverage().items()]
    terminalreporter.write_line("book answers reproduced by scalelib: " + "; ".join(parts))
