"""Which packages a build holds (the rest of the configuration is in pyproject.toml).

A student's wheel (``pip wheel . -w dist``) holds ``scalelib``, the library, and nothing else. The instructor's
editable install from this repository (``pip install -e .``, as ``course.py`` does) also maps ``autograder``, the
grader, which runs from the repository: setuptools builds an editable install with its ``editable_wheel``
command, and only then is ``autograder`` listed.
"""

import sys

from setuptools import find_packages, setup

EDITABLE = "editable_wheel" in sys.argv
setup(packages=find_packages(include=["scalelib", "scalelib.*"] + (["autograder", "autograder.*"] if EDITABLE else [])))
