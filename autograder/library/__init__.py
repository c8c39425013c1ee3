"""Layer 2, the surface of scalelib an exercise may use while it is graded: its modules read without importing
them (``module_reader``), reduced to what an exercise declares (``surface``); failures in ``library_errors``.
Knows scalelib's source, no kernel and no student.
"""
