"""How scalelib reproduces each numeric result of the book.

One module per chapter (``ch01.py``, ``ch02.py``, ...), each exporting ``REPRODUCERS``: a dict from
a book-answer id (tests/data/book_answers.yaml) to a function of that entry's ``inputs`` that
returns the value computed by scalelib. A reproducer calls the library; it never evaluates the
reference's formula, and where the book names a chip it takes the chip's numbers from
``scalelib.hardware`` (the book's other value via ``hardware.variant`` where the book used one).
"""

import importlib
import pkgutil
from pathlib import Path
from typing import Callable

Reproducer = Callable[[dict], float]


def all_reproducers() -> dict[str, Reproducer]:
    found: dict[str, Reproducer] = {}
    for mod in pkgutil.iter_modules([str(Path(__file__).parent)]):
        if mod.name.startswith("ch"):
            module = importlib.import_module(f"{__name__}.{mod.name}")
            clash = set(found) & set(module.REPRODUCERS)
            if clash:
                raise ValueError(f"{mod.name} reproduces ids already covered elsewhere: {sorted(clash)}")
            found.update(module.REPRODUCERS)
    return found
