"""How reading untrusted files fails without running anything: each failure says which file and what to do.
"""


class AnswersTimeout(Exception):
    """Reading the submission went past the notebook's time limit."""
