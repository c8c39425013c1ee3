"""The instructor's side of the course: release chapters, check them, grade submissions.

Run ``python -m autograder --help``. Built on nbgrader: its gradebook, its ClearSolutions /
ClearHiddenTests release steps and its autograder; this package adds the course's layout
(``solutions/`` -> ``chapters/``), deterministic output and a one-command grading run.

Layers, lowest first; each sub-package imports only the layers below it (tests/test_import_graph.py holds it):

1. ``sandbox``: OS isolation of one process tree (namespaces, limits, cgroups, the launcher, the host's probes)
2. ``library``: the surface of scalelib an exercise may use
3. ``instructor``: the chapter model, the release, the nbgrader course
4. ``intake``: untrusted files in (archives, names, rosters, collection, where the answers are); runs nothing
5. ``kernel``: one student's kernel over a capped channel, the fork server, the pool, what crosses as data
6. ``judging``: the trusted context, the judge, one student's steps
7. ``outputs``: writers only (CSVs, feedback pages, the gradebook, LMS result files)
8. ``grading``: one run over a class, shards and their merge
9. ``cli``: every entry point (``python -m autograder VERB``)

Below them all, modules that import nothing of ``autograder``: ``course`` (where the course is, its settings),
``results`` (a student's result), ``safe_text`` (text made safe to print and open), ``pysource`` (parsing in
threads), ``atomic_files`` (files written whole or not at all).
"""

import sys

# nbformat validates with jsonschema, which imports every optional format checker it finds, and the one for "iri"
# (rfc3987-syntax, installed with jupyter-events) builds some 35 Earley parsers at import: about 1 CPU-s in every
# process that reads a notebook, for a format that no notebook schema uses (python-jsonschema/jsonschema#1428).
# Marked absent before jsonschema loads, jsonschema leaves "iri" unchecked, as it did before it knew that package.
if "jsonschema" not in sys.modules:
    sys.modules.setdefault("rfc3987_syntax", None)  # type: ignore[arg-type]
