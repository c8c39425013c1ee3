"""scalelib.hardware_check: matching a device kind to its spec row, the printed lines, and the command on CPU."""

import dataclasses
import os
import subprocess
import sys

import pytest

from scalelib import hardware
from scalelib import hardware_check as hc

# What jax.Device.device_kind says on each chip -> the spec row it must find (None: an unknown chip).
KINDS = [
    ("NVIDIA H100 80GB HBM3", "H100"),
    ("NVIDIA H100 PCIe", None),  # another board: other clocks and bandwidth than the SXM row
    ("NVIDIA H100 NVL", None),
    ("NVIDIA H200", "H200"),
    ("NVIDIA H200 NVL", None),
    ("NVIDIA B200", "B200"),
    ("TPU v5 lite", "TPU v5e"),
    ("TPU v5e", "TPU v5e"),
    ("TPU v5", "TPU v5p"),
    ("TPU v5p", "TPU v5p"),
    ("TPU v6 lite", "TPU v6e"),
    ("TPU v4", "TPU v4p"),
    ("TPU v4 lite", None),
    ("TPU v3", "TPU v3"),
    ("TPU v2", None),
    ("Tesla T4", None),
    ("NVIDIA L4", None),
    ("cpu", None),
]


@pytest.mark.parametrize("kind,row", KINDS)
def test_device_kind_finds_its_spec_row(kind, row):
    chip = hc.chip_for_kind(kind)
    assert (chip.name if chip else None) == row


def test_rows_from_a_larger_table_are_found_by_kind():
    # A100 and GB200 rows land in hardware.CHIPS from the GPU chapter; matched by kind once they are there,
    # "unknown chip" before. GB200 is not mistaken for B200.
    table = {**hardware.CHIPS, "A100": dataclasses.replace(hardware.H100, name="A100"),
             "GB200": dataclasses.replace(hardware.B200, name="GB200")}
    assert hc.chip_for_kind("NVIDIA A100-SXM4-80GB", table).name == "A100"
    assert hc.chip_for_kind("NVIDIA A100-PCIE-40GB", table) is None
    assert hc.chip_for_kind("NVIDIA GB200", table).name == "GB200"
    assert hc.chip_for_kind("NVIDIA GB200", {"B200": hardware.B200}) is None
    assert hc.chip_for_kind("  nvidia h100 80gb hbm3 ", table).name == "H100"


def test_numbers_are_printed_with_prefixes_and_against_their_reference():
    assert hc.si(9.89e14, "FLOP/s") == "989 TFLOP/s"
    assert hc.si(3.35e12, "B/s") == "3.35 TB/s"
    assert hc.si(2.25e15, "FLOP/s") == "2.25 PFLOP/s"
    assert hc.si(512.0, "B") == "512 B"
    assert hc.versus(7.12e14, 9.89e14, "FLOP/s") == "712 TFLOP/s vs spec 989 TFLOP/s (72%)"
    assert hc.versus(4.1e10, None, "FLOP/s") == "41 GFLOP/s"
    assert hc.seconds(0.000412) == "412 us" and hc.seconds(0.0125) == "12.5 ms" and hc.seconds(2.5) == "2.5 s"
    line = hc.format_line(hc.CheckLine("matmul bf16", "measured", "a\nb"))
    assert line == "matmul bf16       measured  a\n" + " " * 28 + "b"
    assert hc.format_line(hc.CheckLine("memory bandwidth", "skipped", "why")).split() == ["memory", "bandwidth",
                                                                                           "skipped", "why"]
    with pytest.raises(ValueError, match="status must be one of"):
        hc.CheckLine("x", "good", "")


def test_spec_reference_and_sizes():
    ref = hc.spec_reference(hardware.H100)
    assert ref.flops_per_s == {"bf16": 9.89e14, "int8": 1.979e15} and ref.bytes_per_s == 3.35e12
    assert "f32" not in ref.flops_per_s  # the table has no f32 figure: shown without a spec
    assert hc.sizes_for("gpu", False).matmul_d > hc.sizes_for("cpu", False).matmul_d > hc.sizes_for("gpu", True).matmul_d
    assert hc.attention_tolerance("bf16") > hc.attention_tolerance("f32")
    # an accelerator's samples queue runs back to back (machine.best_time_s); a CPU's wait for each
    assert hc.sizes_for("gpu", False).calls > 1 == hc.sizes_for("cpu", False).calls == hc.sizes_for("cpu", True).calls
    assert hc.timing(hc.sizes_for("gpu", False)) == "best of 10 x 10 runs back to back"


def test_a_failing_check_is_reported_and_sets_the_exit_status(monkeypatch):
    def broken() -> hc.CheckLine:
        raise RuntimeError("no cuDNN\nmore")

    lines = [hc.CheckLine("chip", "ok", "x"), hc._guard("flash attention", broken)]
    assert lines[1] == hc.CheckLine("flash attention", "FAIL", "RuntimeError: no cuDNN")
    monkeypatch.setattr(hc, "run_checks", lambda quick: ("header", lines))
    out = []
    assert hc.main([], out=type("W", (), {"write": lambda self, s: out.append(s), "flush": lambda self: None})()) == 1
    assert "1 of 2 checks without failure; failed: flash attention" in "".join(out)


def test_quick_command_on_cpu_runs_every_check():
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    env.pop("XLA_FLAGS", None)
    out = subprocess.run([sys.executable, "-m", "scalelib.hardware_check", "--quick"], capture_output=True, text=True,
                         timeout=300, env=env)
    print(out.stdout)
    assert out.returncode == 0, out.stdout + out.stderr[-2000:]
    lines = out.stdout.splitlines()
    assert lines[0].startswith("hardware check: 1 cpu device(s), kind 'cpu'")
    status = {line[:18].strip(): line[18:28].strip() for line in lines[1:-1]}
    assert status == {"chip": "ok", "matmul bf16": "measured", "matmul f32": "measured", "matmul int8": "measured",
                      "memory bandwidth": "measured", "flash attention": "ok", "profile": "ok"}
    assert "vs f32 peak of the CPU's measured roofline" in out.stdout
    assert "(f32, causal" in out.stdout and "on cpu lanes" in out.stdout
    assert lines[-1] == "7 of 7 checks without failure"
