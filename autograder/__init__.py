"""The instructor's side of the course: release chapters, check them, grade submissions.

Run ``python -m autograder --help``. Built on nbgrader: its gradebook, its ClearSolutions /
ClearHiddenTests release steps and its autograder; this package adds the course's layout
(``solutions/`` -> ``chapters/``), deterministic output and a one-command grading run.
"""

import sys

# nbformat validates with jsonschema, which imports every optional format checker it finds, and the one for "iri"
# (rfc3987-syntax, installed with jupyter-events) builds some 35 Earley parsers at import: about 1 CPU-s in every
# process that reads a notebook, for a format that no notebook schema uses (python-jsonschema/jsonschema#1428).
# Marked absent before jsonschema loads, jsonschema leaves "iri" unchecked, as it did before it knew that package.
if "jsonschema" not in sys.modules:
    sys.modules.setdefault("rfc3987_syntax", None)  # type: ignore[arg-type]
