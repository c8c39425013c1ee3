"""scalelib.profiling.trace.capture: steady-state runs only, with the compiled HLO whose names the trace uses."""

import jax
import jax.numpy as jnp
import pytest

from scalelib.profiling import trace
from tests import trace_cases
from tests.trace_cases import STEPS


def test_capture_holds_the_traced_runs_and_the_program():
    cap = trace_cases.case("ffw").capture
    assert cap.steps == STEPS and cap.platform == jax.devices()[0].platform and cap.directory is None
    assert cap.module.startswith("jit_") and f"HloModule {cap.module}" in cap.hlo_text
    assert cap.capture_s > 0 and len(cap.xspace) > 0
    assert trace.read(cap).steps == STEPS  # compile and warm-up stayed outside the trace


def test_capture_into_a_directory_keeps_the_files(tmp_path):
    f = jax.jit(lambda a: a @ a.T)
    cap = trace.capture(f, jnp.ones((8, 8)), steps=2, directory=tmp_path)
    files = list(tmp_path.rglob("*.xplane.pb"))
    assert cap.directory == str(tmp_path) and len(files) == 1 and files[0].read_bytes() == cap.xspace
    from_dir = trace.read(tmp_path, hlo_text=cap.hlo_text)
    assert from_dir.steps == 2 and from_dir.devices == (0,) and from_dir.ops == trace.read(cap).ops
    again = trace.capture(f, jnp.ones((8, 8)), steps=1, directory=tmp_path)  # often within the same second
    assert trace.read(again).steps == 1 and trace.read(tmp_path, hlo_text=cap.hlo_text).steps == 1


def test_bad_arguments_say_what_to_do():
    with pytest.raises(TypeError, match="wrap it with jax.jit"):
        trace.capture(lambda a: a, jnp.ones(3))
    f = jax.jit(lambda a: a + 1)
    for kw, name in (({"steps": 0}, "steps"), ({"warmup": 0}, "warmup"), ({"steps": 1.5}, "steps")):
        with pytest.raises(ValueError, match=f"{name}.* must be a positive int"):
            trace.capture(f, jnp.ones(3), **kw)
