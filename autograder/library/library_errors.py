"""What of the library an exercise may use, refused: each failure names the module or member and what to declare.
"""


class SurfaceError(ValueError):
    """An ``ex.allow`` that names something the grader cannot find in scalelib."""
