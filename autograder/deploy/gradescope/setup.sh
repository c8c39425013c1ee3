#!/usr/bin/env bash
# Gradescope runs this once, as root, when it builds the autograder's image (Ubuntu with python3).
# The bundle's zip holds this file, run_autograder, and course.tar.gz: this course's repository at the commit the
# class uses (`git archive -o autograder/deploy/gradescope/course.tar.gz HEAD`, then zip the three files).
set -euo pipefail
cd "$(dirname "$0")"
apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv python3-pip >/dev/null
mkdir -p /autograder/course
tar -xzf course.tar.gz -C /autograder/course
cd /autograder/course
python3 -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -c .ci/constraints.txt -e ".[instructor]"
.venv/bin/python -m autograder doctor || true  # says what the sandbox can have here
