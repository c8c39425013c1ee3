"""Layer 3, the instructor's material: the chapter as the grader sees it (``chapter_model``), the release of
``chapters/`` from ``solutions/`` (``release``, with its set-up cell template in ``templates/``), the throw-away
nbgrader course a release uses (``nbgrader_course``); failures in ``instructor_errors``.
"""
