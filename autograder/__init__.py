"""The instructor's side of the course: release chapters, check them, grade submissions.

Run ``python -m autograder --help``. Built on nbgrader: its gradebook, its ClearSolutions /
ClearHiddenTests release steps and its autograder; this package adds the course's layout
(``solutions/`` -> ``chapters/``), deterministic output and a one-command grading run.
"""
