"""Layer 7, writers only: the class's CSVs and the manifest (``tables``), feedback pages (``feedback``), the nbgrader
gradebook and its safe export (``gradebook``, ``nbgrader_export``), LMS result files (``lms_results``), and the
scores an instructor typed in formgrader carried into every export (``kept_scores``).
"""
