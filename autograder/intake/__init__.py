"""Layer 4, untrusted files in; nothing here runs code. An export unpacked under limits (``archives``), each path
read for its student and chapter (``file_names``, ``chapter_match``), the class list (``rosters``, Canvas's columns in
``canvas_columns``), every file mapped to a student (``collection``), and where a student's answers are in their
notebook (``answer_cells``); failures in ``intake_errors``.
"""
