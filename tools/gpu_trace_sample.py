"""Capture one small profile on this machine's accelerator and keep it as test data (run on a GPU machine).

    PYTHONPATH=. python3 tools/gpu_trace_sample.py OUTDIR

writes OUTDIR/trace.xplane.pb (the profiler's XSpace), OUTDIR/trace.hlo.txt (the compiled program, whose op names
the trace uses) and OUTDIR/trace.json (device kind, JAX version, the program's shapes, and what
``scalelib.profiling.trace.read`` made of it, or its error). tests/data/gpu_trace/ holds such a sample from a real
GPU, so the suite reads a real GPU trace on a CPU machine (tests/test_profiling_trace_read.py). The program is a
two-layer MLP's loss in two named scopes, small enough that the file stays small.
"""

from __future__ import annotations

import json
import sys
import traceback
from pathlib import Path

import jax
import jax.numpy as jnp

from scalelib.profiling import trace

BATCH, D_MODEL, D_FF = 256, 512, 1024
STEPS = 3


def loss(x: jax.Array, w_in: jax.Array, w_out: jax.Array) -> jax.Array:
    """Sum of squares of a two-layer MLP's output; ``up`` and ``down`` name the two matmuls' scopes."""
    with jax.named_scope("up"):
        h = jnp.tanh(x @ w_in)  # [batch, d_ff]
    with jax.named_scope("down"):
        y = h @ w_out  # [batch, d_model]
    return jnp.sum(y * y)


def main(out: Path) -> int:
    out.mkdir(parents=True, exist_ok=True)
    kx, k1, k2 = jax.random.split(jax.random.key(0), 3)
    x = jax.random.normal(kx, (BATCH, D_MODEL), jnp.float32)  # [batch, d_model]
    w_in = jax.random.normal(k1, (D_MODEL, D_FF), jnp.float32) / D_MODEL**0.5  # [d_model, d_ff]
    w_out = jax.random.normal(k2, (D_FF, D_MODEL), jnp.float32) / D_FF**0.5  # [d_ff, d_model]
    step = jax.jit(jax.value_and_grad(loss, argnums=(1, 2)))
    cap = trace.capture(step, x, w_in, w_out, steps=STEPS)
    (out / "trace.xplane.pb").write_bytes(cap.xspace)
    (out / "trace.hlo.txt").write_text(cap.hlo_text)
    meta: dict = {"device_kind": jax.devices()[0].device_kind, "platform": cap.platform, "jax": jax.__version__,
                  "module": cap.module, "steps": STEPS, "shapes": {"batch": BATCH, "d_model": D_MODEL, "d_ff": D_FF},
                  "xspace_bytes": len(cap.xspace)}
    try:
        read = trace.read(cap)
        meta["read"] = {"platform": read.platform, "devices": list(read.devices), "steps": read.steps,
                        "ops": len(read.ops), "matched": read.matched,
                        "names": sorted({op.name for op in read.ops}),
                        "scopes": sorted({op.scope for op in read.ops}),
                        "threads": sorted({op.thread for op in read.ops})}
    except Exception:  # what read() says on a real GPU trace is what this sample is for
        meta["read_error"] = traceback.format_exc()
    (out / "trace.json").write_text(json.dumps(meta, indent=1) + "\n")
    print(json.dumps(meta, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1] if len(sys.argv) > 1 else "gpu-trace-sample")))
