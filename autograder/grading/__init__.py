"""Layer 8, one run over a class: ``class_run`` (the whole run), ``console`` (what it says while it runs),
``shards`` and ``shard_merge`` (a class graded in shards and joined), ``re_export`` (the class's files again from
the gradebook), ``lms_submission`` (Gradescope's and PrairieLearn's one-submission run); failures in
``grading_errors``.
"""
