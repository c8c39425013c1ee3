"""Layer 6, judging outside the student's kernel: the instructor's notebook run once in the grader (``trusted``), the
judge that runs the instructor's tests against the student's functions (``judge``), and one student's grading, step
by step (``student_steps``); failures in ``judging_errors``.
"""
