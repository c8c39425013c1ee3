#!/usr/bin/env bash
# Wheels that tools/gpu_check.sh needs and the GPU machine's image lacks, fetched into .whl/ where pip reaches PyPI.
# The image (Python 3.12; jax with its CUDA plugin, pytest, pytest-xdist, matplotlib, numpy, pyyaml, psutil,
# packaging, pygments, attrs ...) has no Jupyter: nbval and the kernel it starts come from these. --no-deps: the
# list is what nbval, ipykernel, nbclient and nbformat need (their requirements, followed in .venv, as pinned by
# .ci/constraints.txt) less what the image's package list holds, so no second version lands beside the image's.
# .whl/ must be ignored by git (echo /.whl/ >> .git/info/exclude) and carried to the machine with the checkout.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
mkdir -p .whl
"$PY" -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -c .ci/constraints.txt -d .whl \
    nbval nbformat nbclient ipykernel ipython ipython-pygments-lexers jupyter-client jupyter-core traitlets tornado \
    pyzmq comm debugpy matplotlib-inline nest-asyncio2 jedi parso prompt-toolkit wcwidth pexpect ptyprocess \
    stack-data executing asttokens pure-eval fastjsonschema jsonschema jsonschema-specifications referencing \
    rpds-py platformdirs tzdata
du -sh .whl
