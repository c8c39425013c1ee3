#!/usr/bin/env bash
# The course's checks on a GPU machine, in one go, each stage under its own time limit (issue 23):
#   1. python -m scalelib.hardware_check   (matmul FLOP/s and bandwidth vs the spec row, flash vs cuDNN, a profile)
#   2. the GPU-relevant tests               (single-device work that lands on the GPU; meshes on CPU devices beside it)
#   3. the flash-attention and serving benchmarks (tests/benchmarks --attention, --serving)
#   4. every chapter's Run All              (pytest --nbval-lax chapters/, chapters in parallel)
#   5. a fresh GPU trace for tests/data/gpu_trace/ (tools/gpu_trace_sample.py)
# Results go to $OUT (default ./gpu-check-out), at most 8 files (what a lent machine hands back): summary.txt (one
# line per stage: exit status and seconds; 124 = the stage ran out of time), env.txt, hardware_check.txt, tests.log,
# bench_attention.txt, bench_serving.txt, chapters.log and gpu_trace.tar.gz (the sample's three files and its log).
# The script never stops early: a failing stage is recorded and the next runs.
#
# Usage (repository root, on the GPU machine):  bash tools/gpu_check.sh
#   PYTHON=python3 (default) must have jax with its CUDA plugin; scalelib is used from this checkout (PYTHONPATH).
#   Stage limits in seconds, defaults sum to 480 s so that a 15-minute lease holds the machine's start, one run
#   and a rerun: T_HW=60 T_TESTS=150 T_BENCH=150 T_CHAPTERS=90 T_TRACE=30. On an H200 (16 cores) the stages took 32 s,
#   93-97 s, 62 s for the attention rows (the serving rows need more than their 75 s; what they print by then
#   is kept) and 39-48 s.
#   Wheels of what the machine lacks (nbval, ipykernel, nbclient and theirs: see tools/gpu_wheels.sh, run where
#   pip reaches PyPI) are installed from .whl/ when that folder holds any; without them stage 4 is skipped and
#   says so.
# It ran on an NVIDIA H200 with jax 0.11.2 and CUDA 13 on 2026-11-27 (the README's section "On a real accelerator"
# has what it found); the CPU path of each stage is what the test suite covers.
set -uo pipefail
cd "$(dirname "$0")/.."

OUT="${OUT:-$PWD/gpu-check-out}"
mkdir -p "$OUT"
PY="${PYTHON:-python3}"
T_HW="${T_HW:-60}" T_TESTS="${T_TESTS:-150}" T_BENCH="${T_BENCH:-150}" T_CHAPTERS="${T_CHAPTERS:-90}"
T_TRACE="${T_TRACE:-30}"

# Several processes share one GPU (pytest workers, notebook kernels): none may take 75% of its memory up front.
export XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1 MPLBACKEND=Agg
unset JAX_PLATFORMS XLA_FLAGS  # JAX picks the GPU; scalelib.devices.setup asks for the CPU devices beside it

if compgen -G ".whl/*.whl" >/dev/null; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
        && export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}" \
        || echo "installing the wheels in .whl/ failed; stages that need them are skipped" >&2
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"

SUMMARY="$OUT/summary.txt"
: >"$SUMMARY"
note() { echo "$*" | tee -a "$SUMMARY"; }

# stage NAME LIMIT_S LOG COMMAND...: run COMMAND under LIMIT_S seconds, all its output to LOG; one summary line.
stage() {
    local name=$1 limit=$2 log=$3 start rc
    shift 3
    start=$(date +%s)
    timeout -k 10 "$limit" "$@" >"$log" 2>&1
    rc=$?
    note "$name: exit $rc after $(($(date +%s) - start)) s (limit $limit s; $(basename "$log"))"
}

{
    date -u +"%Y-%m-%dT%H:%M:%SZ"
    git rev-parse HEAD 2>/dev/null
    nvidia-smi -L 2>&1
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv 2>&1
    "$PY" -c "import sys, jax; print(sys.version.split()[0], 'jax', jax.__version__, jax.devices(), \
jax.devices()[0].device_kind)" 2>&1
} >"$OUT/env.txt"
note "env: $(tail -n 1 "$OUT/env.txt")"

# 1. The hardware check on the GPU (its own process: JAX's default device is the GPU).
stage "hardware check" "$T_HW" "$OUT/hardware_check.txt" "$PY" -m scalelib.hardware_check
grep -E "^(chip|matmul|memory|flash|profile)" "$OUT/hardware_check.txt" | tee -a "$SUMMARY"

# 2. Tests whose work runs on JAX's default device (the GPU here), and the device set-up beside it.
GPU_TESTS=(tests/test_devices.py tests/test_hardware_check.py tests/test_machine.py tests/test_flash_attention.py
           tests/test_serving_engine.py tests/test_inference_decode.py tests/test_model.py tests/test_train.py
           tests/test_profiling_trace_capture.py tests/test_profiling_trace_read.py)
stage "GPU-relevant tests" "$T_TESTS" "$OUT/tests.log" \
    "$PY" -m pytest -q -p no:cacheprovider -p no:nbval -n 4 "${GPU_TESTS[@]}"
tail -n 3 "$OUT/tests.log" | tee -a "$SUMMARY"

# 3. Benchmarks on the GPU: flash vs naive vs jax.nn attention, then the serving engine (half the time each).
if "$PY" -c "import nbformat, nbclient" 2>/dev/null; then  # tests/benchmarks imports them at the top
    stage "attention benchmark" "$((T_BENCH / 2))" "$OUT/bench_attention.txt" "$PY" -m tests.benchmarks --attention
    stage "serving benchmark" "$((T_BENCH / 2))" "$OUT/bench_serving.txt" "$PY" -m tests.benchmarks --serving
else
    note "benchmarks: skipped: nbformat and nbclient are not installed (tests.benchmarks imports them); see tools/gpu_wheels.sh"
fi

# 4. Every chapter's Run All, as a student on this runtime meets it (set-up cell: the GPU plus 8 CPU devices).
if "$PY" -c "import nbval, ipykernel" 2>/dev/null; then
    stage "chapters Run All" "$T_CHAPTERS" "$OUT/chapters.log" \
        "$PY" -m pytest -q -p no:cacheprovider -n 8 --dist loadfile --nbval-lax chapters/
    tail -n 3 "$OUT/chapters.log" | tee -a "$SUMMARY"
else
    note "chapters Run All: skipped: nbval and ipykernel are not installed; carry the wheels of tools/gpu_wheels.sh"
fi

# 5. A trace of a small program on this GPU, packed as one file: unpacked into tests/data/gpu_trace/ it replaces the
#    sample the suite reads (check trace.json's summary first).
SAMPLE="$(mktemp -d)"
stage "GPU trace sample" "$T_TRACE" "$SAMPLE/sample.log" "$PY" tools/gpu_trace_sample.py "$SAMPLE"
tar -czf "$OUT/gpu_trace.tar.gz" -C "$SAMPLE" . && rm -rf "$SAMPLE"
