"""``python -m autograder.sandbox CONFIG_JSON -- CMD...``: see :mod:`autograder.sandbox.launcher`."""

import sys

from autograder.sandbox.launcher import main

sys.exit(main(sys.argv[1:]))
