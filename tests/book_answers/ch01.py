"""Chapter 1 (rooflines): every numeric result, reproduced with scalelib.roofline and hardware."""

from scalelib import hardware as hw
from scalelib import roofline as rl

V5E_BOOK_HBM = hw.variant(hw.TPU_V5E, "hbm_bytes_per_s")  # section 1 uses 8.2e11 B/s


REPRODUCERS = {
    "ch1-h100-time-for-1e12-flops": lambda i: rl.compute_time_s(i["flops"], hw.H100.bf16_flops_per_s),
    "ch1-v6e-time-for-1e12-flops": lambda i: rl.compute_time_s(
        i["flops"], hw.variant(hw.TPU_V6E, "bf16_flops_per_s").bf16_flops_per_s),
    "ch1-v5e-critical-intensity": lambda i: rl.chip_critical_intensity(V5E_BOOK_HBM),
    "ch1-dot-product-intensity": lambda i: rl.einsum_cost("n,n->", {"n": int(i["N"])}, i["dtype_bytes"]).intensity,
    "ch1-v5p-vpu-critical-intensity": lambda i: rl.critical_intensity(
        hw.TPU_V5P.vpu_flops_per_s, hw.variant(hw.TPU_V5P, "hbm_bytes_per_s").hbm_bytes_per_s),
    "ch1-matmul-critical-batch-v5e": lambda i: rl.chip_matmul_critical_batch(V5E_BOOK_HBM, "bf16", weight_bytes=2),
    "ch1-two-chip-network-intensity": lambda i: rl.critical_intensity(
        hw.TPU_V5E.bf16_flops_per_s, hw.TPU_V5E.ici_one_way_bytes_per_s),
    "ch1-two-chip-critical-D": lambda i: rl.two_chip_critical_d(
        hw.TPU_V5E.bf16_flops_per_s, hw.TPU_V5E.ici_one_way_bytes_per_s, dtype_bytes=2),
    "ch1-ex1.1-int8-hbm-intensity": lambda i: rl.chip_critical_intensity(hw.TPU_V5E, "int8"),
    "ch1-ex1.1-int8-critical-batch": lambda i: rl.chip_matmul_critical_batch(hw.TPU_V5E, "int8", weight_bytes=1),
    "ch1-ex1.2-int8-weights-bf16-flops-critical-batch": lambda i: rl.chip_matmul_critical_batch(
        V5E_BOOK_HBM, "bf16", weight_bytes=1),
    "ch1-ex1.4-per-example-weights-intensity": lambda i: rl.einsum_cost(
        "bd,bdf->bf", {"b": i["B"], "d": i["D"], "f": i["F"]}, i["dtype_bytes"]).intensity,
    "ch1-ex1.5-h100-critical-batch": lambda i: rl.chip_matmul_critical_batch(
        hw.variant(hw.H100, "bf16_flops_per_s"), "bf16", weight_bytes=2),
}
