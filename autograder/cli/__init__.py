"""Layer 9, every entry point: ``python -m autograder VERB`` (``main``), one verb per action.
"""
