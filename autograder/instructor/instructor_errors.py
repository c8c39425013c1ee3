"""The instructor's material refused: each failure says what to change in solutions/ or the course's settings.
"""


class ReleaseError(RuntimeError):
    """The sources cannot be released as they are; the message says what to change."""
