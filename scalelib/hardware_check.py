"""One command that checks the chip you have: ``python -m scalelib.hardware_check [--quick]``.

Book section 1 (rooflines: a chip's peak FLOPs/s and its memory bandwidth), section 2 and the GPU appendix (the
spec tables in ``scalelib.hardware``), section 4.7.1 (flash attention) and section 9 (reading a profile). On JAX's
default device it measures

* matmul throughput by precision (bf16, f32, int8 where the chip runs it), against the spec row's peak;
* memory bandwidth (a large elementwise add: two arrays read, one written), against the spec row's HBM figure;
* ``scalelib.kernels.flash_attention`` against JAX's fused attention (``jax.nn.dot_product_attention``; on a GPU
  its cuDNN implementation): equal within a tolerance set by the precision, and both timed;
* one profile (``scalelib.profiling.trace``): captured, read, and on an accelerator found on the device's lanes;

and prints one line per check: ``ok``, ``measured`` (a number against its reference), ``skipped`` (with why) or
``FAIL`` (the command then exits with status 1). The spec row is found from the device kind (``chip_for_kind``:
"NVIDIA H100 80GB HBM3" is the H100 row, "TPU v5 lite" the v5e row); a chip without a row is an "unknown chip"
and its numbers are shown alone. A CPU has no spec row: its reference is its own roofline, measured with
``scalelib.machine`` (an f32 matmul sweep and a streaming pass), so the same checks run on a laptop.
``--quick`` uses small sizes (seconds, for the test suite); its numbers mean little.
"""

from __future__ import annotations

import argparse
import math
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from scalelib import hardware

STATUSES = ("ok", "measured", "skipped", "FAIL")

# Device kinds (what jax.Device.device_kind says) -> the spec row's name. Checked in order, case-insensitive.
# PCIe and NVL boards of the H100/H200/A100 run at other clocks and bandwidths than the SXM rows of the table.
KIND_TO_ROW: tuple[tuple[str, str], ...] = (
    (r"^TPU v5 ?lite$|^TPU v5e$", "TPU v5e"),
    (r"^TPU v5p?$", "TPU v5p"),
    (r"^TPU v6 ?lite$|^TPU v6e$", "TPU v6e"),
    (r"^TPU v4$|^TPU v4p$", "TPU v4p"),
    (r"^TPU v3$", "TPU v3"),
    (r"^TPU ?7x$", "TPU7x"),
    (r"\bGB200\b", "GB200"),
    (r"\bB200\b", "B200"),
    (r"\bH200\b(?!.*\b(NVL|PCIe)\b)", "H200"),
    (r"\bH100\b(?!.*\b(NVL|PCIe)\b)", "H100"),
    (r"\bA100\b(?!.*PCIe)", "A100"),
)


@dataclass(frozen=True)
class CheckLine:
    """One printed line: which check, how it came out, and the numbers or the reason."""

    name: str
    status: str  # one of STATUSES
    detail: str

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"status must be one of {STATUSES}, got {self.status!r}")


@dataclass(frozen=True)
class Sizes:
    """Problem sizes of one run (``sizes_for``)."""

    matmul_d: int  # square matmuls [d, d] @ [d, d]
    add_bytes: int  # bytes of each of the three arrays of the bandwidth add
    attention: tuple[int, int, int, int]  # B, T (= S), N (= K), H
    block: int  # flash attention's block_q = block_k
    sweep_batches: tuple[int, ...]  # CPU reference: scalelib.machine's matmul sweep ...
    sweep_d: int  # ... of x[B, d] @ W[d, d]
    repeats: int  # timed samples per measurement (best kept), after one warm-up
    calls: int = 1  # runs per sample, back to back (machine.best_time_s): 1 on a CPU


@dataclass(frozen=True)
class Reference:
    """What measurements are held against: a spec row, the CPU's measured roofline, or nothing."""

    label: str  # "spec" or "the CPU's measured roofline"
    flops_per_s: Mapping[str, float]  # by precision; a missing precision has no reference figure
    bytes_per_s: float | None


# ------------------------------------------------------------------ pure functions


def chip_for_kind(device_kind: str, chips: Mapping[str, hardware.Chip] | None = None) -> hardware.Chip | None:
    """The spec row of a device kind ("NVIDIA H100 80GB HBM3" -> the H100), or None for an unknown chip.

    ``chips`` defaults to ``hardware.CHIPS``; a kind whose row the table does not hold (yet) is unknown too.
    """
    table = hardware.CHIPS if chips is None else chips
    for pattern, row in KIND_TO_ROW:
        if re.search(pattern, device_kind.strip(), re.IGNORECASE):
            return next((chip for chip in table.values() if chip.name == row), None)
    return None


_PREFIXES = ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"))


def si(value: float, unit: str) -> str:
    """``value`` with a decimal prefix and three significant figures: si(9.89e14, "FLOP/s") == "989 TFLOP/s"."""
    if not math.isfinite(value):
        return f"{value} {unit}"
    scale, prefix = next(((s, p) for s, p in _PREFIXES if abs(value) >= s), (1.0, ""))
    return f"{value / scale:.3g} {prefix}{unit}"


def versus(measured: float, reference: float | None, unit: str, label: str = "spec") -> str:
    """"712 TFLOP/s vs spec 989 TFLOP/s (72%)", or the measurement alone when there is no reference."""
    if reference is None or reference <= 0:
        return si(measured, unit)
    return f"{si(measured, unit)} vs {label} {si(reference, unit)} ({measured / reference:.0%})"


def seconds(value_s: float) -> str:
    """A duration in the unit that suits it: "0.412 ms", "1.25 s"."""
    if value_s >= 1:
        return f"{value_s:.3g} s"
    if value_s >= 1e-3:
        return f"{value_s * 1e3:.3g} ms"
    return f"{value_s * 1e6:.3g} us"


def timing(sizes: Sizes) -> str:
    """How a measurement was timed: "best of 3", or "best of 10 x 10 runs back to back"."""
    return f"best of {sizes.repeats}" + (f" x {sizes.calls} runs back to back" if sizes.calls > 1 else "")


def format_line(line: CheckLine, width: int = 18) -> str:
    """``name  status  detail`` in columns; a detail of several lines is indented under the first."""
    pad = " " * (width + 10)
    return f"{line.name:<{width}s}{line.status:<10s}{line.detail}".replace("\n", "\n" + pad)


def spec_reference(chip: hardware.Chip) -> Reference:
    """A spec row as the reference (the table has bf16 and int8 figures; f32 has none)."""
    return Reference("spec", {"bf16": chip.bf16_flops_per_s, "int8": chip.int8_ops_per_s}, chip.hbm_bytes_per_s)


def sizes_for(platform: str, quick: bool) -> Sizes:
    """Sizes for a platform: large enough on an accelerator to reach its peaks, seconds on a CPU or ``--quick``."""
    if quick:
        return Sizes(128, 4 * 2**20, (1, 128, 2, 32), 64, (1, 16, 128), 256, 2)
    if platform == "cpu":
        return Sizes(1024, 64 * 2**20, (1, 512, 4, 64), 128, (1, 8, 64, 512), 1024, 3)
    return Sizes(8192, 2**30, (4, 2048, 16, 128), 256, (), 0, 10, calls=10)


def attention_tolerance(dtype_name: str) -> float:
    """Largest |flash - fused| allowed, elementwise, relative to max(1, |fused|).

    bf16: an output rounded to bf16 is off by up to 2^-8 of its size, and a fused kernel rounds the
    probabilities to bf16 before multiplying by V, so a few roundings of 2^-8 (~4e-3) each: 2e-2. f32: sums of
    S terms in another order differ by about S * 2^-24 (3e-5 for S = 512): 1e-4.
    """
    return {"bf16": 2e-2, "f32": 1e-4}[dtype_name]


# ------------------------------------------------------------------ measurements (run on JAX's default device)


def _guard(name: str, fn: Callable[[], CheckLine]) -> CheckLine:
    try:
        return fn()
    except Exception as err:  # one failing check must not hide the others: report it and go on
        first = (str(err).strip().splitlines() or [""])[0][:300]
        return CheckLine(name, "FAIL", f"{type(err).__name__}: {first}")


def matmul_flops_per_s(dtype_name: str, d: int, repeats: int, calls: int = 1) -> float:
    """FLOPs/s (int8: OPs/s) of [d, d] @ [d, d] in ``dtype_name`` (int8 accumulates in int32)."""
    import jax
    import jax.numpy as jnp

    from scalelib import machine

    if dtype_name != "int8":
        dtype = {"bf16": jnp.bfloat16, "f32": jnp.float32}[dtype_name]
        return machine.measure_matmul(d, d, dtype, repeats=repeats, calls=calls).flops_per_s
    kx, kw = jax.random.split(jax.random.key(1))
    x = jax.random.randint(kx, (d, d), -8, 8, jnp.int8)  # [d, d]
    w = jax.random.randint(kw, (d, d), -8, 8, jnp.int8)  # [d, d]
    matmul = jax.jit(partial(jax.lax.dot, preferred_element_type=jnp.int32))
    return 2.0 * d**3 / machine.best_time_s(lambda: matmul(x, w), repeats, calls)


def add_bytes_per_s(num_bytes: int, repeats: int, calls: int = 1) -> float:
    """Bytes/s of z = x + y over float32 arrays of ``num_bytes`` each (two read, one written)."""
    import jax
    import jax.numpy as jnp

    from scalelib import machine

    n = num_bytes // 4
    x = jnp.arange(n, dtype=jnp.float32)  # [n]
    y = jnp.ones(n, jnp.float32)  # [n]
    add = jax.jit(jnp.add)
    return 3.0 * 4 * n / machine.best_time_s(lambda: add(x, y), repeats, calls)


def cpu_reference(sizes: Sizes) -> Reference:
    """The CPU's roofline measured by ``scalelib.machine``: an f32 matmul sweep and its streaming pass."""
    from scalelib import machine

    points = machine.sweep_matmuls(sizes.sweep_batches, sizes.sweep_d, repeats=sizes.repeats)
    points.append(machine.measure_bandwidth(max(sizes.add_bytes, 4 * 2**20), repeats=sizes.repeats))
    fit = machine.fit_roofline(points)
    peak = fit.flops_per_s
    return Reference("the CPU's measured roofline", {"bf16": peak, "f32": peak, "int8": peak}, fit.bytes_per_s)


def matmul_line(dtype_name: str, sizes: Sizes, ref: Reference) -> CheckLine:
    name = f"matmul {dtype_name}"
    try:
        rate = matmul_flops_per_s(dtype_name, sizes.matmul_d, sizes.repeats, sizes.calls)
    except Exception as err:
        if dtype_name != "int8":
            raise
        first = (str(err).strip().splitlines() or [""])[0][:200]
        return CheckLine(name, "skipped", f"int8 matmul does not run here ({type(err).__name__}: {first})")
    unit = "OP/s" if dtype_name == "int8" else "FLOP/s"
    reference = ref.flops_per_s.get(dtype_name)
    note = "" if reference is not None or ref.label != "spec" else " (the spec table has no f32 figure)"
    label = "f32 peak of " + ref.label if ref.label != "spec" else ref.label
    precision = ", JAX's default precision" if dtype_name == "f32" else ""
    return CheckLine(name, "measured", f"{versus(rate, reference, unit, label)}{note}"
                                       f" [{sizes.matmul_d}^3{precision}, {timing(sizes)}]")


def bandwidth_line(sizes: Sizes, ref: Reference) -> CheckLine:
    rate = add_bytes_per_s(sizes.add_bytes, sizes.repeats, sizes.calls)
    what = "HBM" if ref.label == "spec" else "bandwidth of"
    label = f"{ref.label} {what}" if ref.label == "spec" else f"{what} {ref.label}"
    return CheckLine("memory bandwidth", "measured", f"{versus(rate, ref.bytes_per_s, 'B/s', label)} "
                                                     f"[x + y, 3 x {si(sizes.add_bytes, 'B')}, {timing(sizes)}]")


def attention_line(platform: str, sizes: Sizes) -> CheckLine:
    """scalelib's flash attention against JAX's fused attention (cuDNN on a GPU): same output, and timings."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from scalelib import machine
    from scalelib.kernels.flash_attention import flash_attention

    name = "flash attention"
    dtype_name = "f32" if platform == "cpu" else "bf16"
    dtype = {"f32": jnp.float32, "bf16": jnp.bfloat16}[dtype_name]
    b, t, n, h = sizes.attention
    q, k, v = (jax.random.normal(key, (b, t, n, h), dtype) for key in jax.random.split(jax.random.key(2), 3))
    impl = "cudnn" if platform == "gpu" else None
    fused_name = f"jax.nn.dot_product_attention({impl or 'xla'})"
    flash = jax.jit(partial(flash_attention, causal=True, block_q=sizes.block, block_k=sizes.block))
    fused = jax.jit(partial(jax.nn.dot_product_attention, is_causal=True, implementation=impl))
    try:
        want = np.asarray(fused(q, k, v), np.float32)
    except Exception as err:
        first = (str(err).strip().splitlines() or [""])[0][:200]
        return CheckLine(name, "skipped", f"{fused_name} does not run here ({type(err).__name__}: {first})")
    got = np.asarray(flash(q, k, v), np.float32)
    err_rel = float(np.max(np.abs(got - want) / np.maximum(1.0, np.abs(want))))
    tol = attention_tolerance(dtype_name)
    t_flash = machine.best_time_s(lambda: flash(q, k, v), sizes.repeats, sizes.calls)
    t_fused = machine.best_time_s(lambda: fused(q, k, v), sizes.repeats, sizes.calls)
    status = "ok" if err_rel <= tol else "FAIL"
    return CheckLine(name, status, f"max |flash - fused| / max(1, |fused|) = {err_rel:.1e} "
                                   f"{'<=' if status == 'ok' else '>'} {tol:.0e} ({dtype_name}, causal, "
                                   f"B={b} T={t} N={n} H={h}); flash {seconds(t_flash)}, {fused_name} "
                                   f"{seconds(t_fused)} (flash takes {t_flash / t_fused:.2g}x)")


def profile_line(platform: str, sizes: Sizes) -> CheckLine:
    """Capture a profile of a small program and read it: its ops, found on the device's own lanes."""
    import jax
    import jax.numpy as jnp

    from scalelib.profiling import trace

    d = min(sizes.matmul_d, 2048)
    x = jax.random.normal(jax.random.key(3), (d, d), jnp.float32)  # [d, d]
    step = jax.jit(lambda a: jnp.tanh(a @ a) @ a)
    read = trace.read(trace.capture(step, x, steps=2))
    if not read.ops:
        return CheckLine("profile", "FAIL", "the trace holds no op of the program")
    lanes = sorted({op.thread for op in read.ops})
    top = trace.op_stats(read)[0]
    where = f"{read.platform} lanes {', '.join(lanes[:3])}{' ...' if len(lanes) > 3 else ''}"
    detail = (f"{len(read.step(0))} ops per step on {where}; heaviest {top.name} ({top.kind}, "
              f"{seconds(top.mean_s)} a run)")
    if read.platform != platform:
        return CheckLine("profile", "FAIL", f"ops read from {read.platform} lanes ({', '.join(lanes[:3])}), not the "
                                            f"{platform.upper()}'s device lanes: {detail}")
    return CheckLine("profile", "ok", detail)


def run_checks(quick: bool = False) -> tuple[str, list[CheckLine]]:
    """Every check on JAX's default device: a header and one line per check."""
    import jax

    device = jax.devices()[0]
    platform, kind = device.platform, str(device.device_kind)
    sizes = sizes_for(platform, quick)
    header = (f"hardware check: {len(jax.devices())} {platform} device(s), kind {kind!r}, jax {jax.__version__}"
              f"{' (--quick: small sizes, the numbers mean little)' if quick else ''}")
    lines: list[CheckLine] = []
    chip = chip_for_kind(kind)
    if platform == "cpu":
        ref = cpu_reference(sizes)
        lines.append(CheckLine("chip", "ok", f"a CPU has no spec row; reference: its roofline measured by "
                                             f"scalelib.machine, {si(ref.flops_per_s['f32'], 'FLOP/s')} (f32 matmul) "
                                             f"and {si(ref.bytes_per_s or 0.0, 'B/s')} (streaming)"))
    elif chip is None:
        ref = Reference("spec", {}, None)
        lines.append(CheckLine("chip", "skipped", f"unknown chip: no spec row matches {kind!r}; the numbers below "
                                                  "are shown without a spec"))
    else:
        ref = spec_reference(chip)
        figures = (f"bf16 {si(chip.bf16_flops_per_s, 'FLOP/s')}, int8 {si(chip.int8_ops_per_s, 'OP/s')}, "
                   f"HBM {si(chip.hbm_bytes_per_s, 'B/s')}")
        lines.append(CheckLine("chip", "ok", f"{kind} -> spec row {chip.name} ({chip.source}): {figures}"))
    for dtype_name in ("bf16", "f32", "int8"):
        lines.append(_guard(f"matmul {dtype_name}", partial(matmul_line, dtype_name, sizes, ref)))
    lines.append(_guard("memory bandwidth", partial(bandwidth_line, sizes, ref)))
    lines.append(_guard("flash attention", partial(attention_line, platform, sizes)))
    lines.append(_guard("profile", partial(profile_line, platform, sizes)))
    return header, lines


def main(argv: Sequence[str] | None = None, out: Any = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m scalelib.hardware_check", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes: seconds, for tests (numbers mean little)")
    args = parser.parse_args(argv)
    stream = sys.stdout if out is None else out
    header, lines = run_checks(quick=args.quick)
    print(header, file=stream, flush=True)
    for line in lines:
        print(format_line(line), file=stream, flush=True)
    failed = [line.name for line in lines if line.status == "FAIL"]
    print(f"{len(lines) - len(failed)} of {len(lines)} checks without failure"
          + (f"; failed: {', '.join(failed)}" if failed else ""), file=stream, flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
