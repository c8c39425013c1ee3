import pytest

from scalelib import machine


def test_measurements_are_positive_and_fit_is_envelope():
    pts = machine.sweep_matmuls(batches=(1, 64), d=256, repeats=1) + [machine.measure_bandwidth(4 * 2**20, repeats=1)]
    for p in pts:
        assert p.seconds > 0 and p.flops > 0 and p.bytes > 0
    fit = machine.fit_roofline(pts)
    assert all(p.flops_per_s <= fit.flops_per_s and p.bytes_per_s <= fit.bytes_per_s for p in pts)
    assert fit.ridge_intensity == pytest.approx(fit.flops_per_s / fit.bytes_per_s)


def test_fit_recovers_synthetic_roofline():
    peak, bw = 1e12, 1e10
    pts = [machine.Measurement("m", i * 1e6, 1e6, i * 1e6 / min(peak, i * bw)) for i in (0.1, 1, 10, 1000)]
    fit = machine.fit_roofline(pts)
    assert fit.flops_per_s == pytest.approx(peak) and fit.bytes_per_s == pytest.approx(bw)


def test_fit_needs_two_points():
    with pytest.raises(ValueError, match="at least 2"):
        machine.fit_roofline([machine.Measurement("m", 1, 1, 1)])


def test_a_sample_times_its_runs_back_to_back_and_waits_for_the_last():
    log = []

    class Result:
        def block_until_ready(self):
            log.append("wait")
            return self

    def run():
        log.append("run")
        return Result()

    assert machine.best_time_s(run, repeats=2, calls=3) > 0
    assert log == ["run", "wait"] + ["run", "run", "run", "wait"] * 2  # warm-up, then two samples of 3 runs
    with pytest.raises(ValueError, match="calls .* must be a positive int"):
        machine.best_time_s(run, calls=0)
