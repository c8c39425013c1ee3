"""Objects a test hands a student's function keep their properties and methods in the kernel (issue 20, item 3),
without handing the kernel what the exercise withholds or more of scalelib than the object's own class."""

import base64
import subprocess
import sys
import textwrap

import pytest

from autograder import course
from autograder.instructor import chapter_model
from autograder.judging.judge import Judge
from autograder.kernel import transfer
from autograder.kernel.transfer import library_refs
from autograder.library import surface
from scalelib import exercise as ex
from scalelib import hardware as hw
from scalelib import machine
from scalelib.profiling.trace.read import OpRun

OPS = (OpRun("fusion.1", 0, 0, 1.0, 2.0, "compute"), OpRun("all-gather", 1, 0, 2.5, 0.5, "collective", wait_s=0.1))
POD = frozenset({("scalelib.hardware", "Chip.pod_hosts"), ("scalelib.hardware", "Chip.pod_flops_per_s")})

# Runs in a fresh interpreter where scalelib cannot be imported at all (as in a kernel whose surface holds none of
# it), with the grader's helper installed the way a kernel gets it (its source, run as autograder.kernel.inside).
KERNEL = """
import base64, pickle, sys, types
sys.modules["scalelib"] = None  # any import of scalelib fails
ns = {"__name__": "autograder.kernel.inside"}
exec(compile(open(sys.argv[1]).read(), "inside", "exec"), ns)
here = types.ModuleType("autograder.kernel.inside"); here.__dict__.update(ns)
for name in ("autograder", "autograder.kernel"):
    sys.modules[name] = types.ModuleType(name)
sys.modules["autograder.kernel.inside"] = here
(ops, chip), _ = pickle.loads(base64.b64decode(sys.argv[2]))
print([op.end_s for op in ops], type(ops[0]).__name__, type(ops[0]) is type(ops[1]))
print(chip.pod_chips, chip.flops_per_s("int8"), chip.chips_per_host, chip.name)
for use in (lambda: chip.pod_hosts, lambda: chip.pod_flops_per_s("bf16")):
    try:
        use()
    except ns["NotAvailable"] as err:
        print("withheld:", err)
"""


def _in_kernel(data: bytes) -> str:
    from autograder.kernel import inside

    run = subprocess.run([sys.executable, "-c", KERNEL, inside.__file__, base64.b64encode(data).decode()],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    return run.stdout


def test_a_travelling_object_keeps_its_properties_and_methods():
    """The chapter 9 case: ``OpRun.end_s`` (a property, listed by help(OpRun)) works in a kernel that holds none of
    scalelib; so do a Chip's properties and methods, except the members the exercise withholds."""
    shipper = transfer.Shipper(transfer.never, POD)
    data = transfer.dumps(((OPS, hw.TPU_V5E), {}), transfer.never, shipper)
    assert not library_refs(data)  # nothing in the pickle refers to scalelib: the kernel needs none of it
    out = _in_kernel(data).splitlines()
    assert out[0] == "[3.0, 3.0] OpRun True"
    v5e = hw.TPU_V5E
    assert out[1] == f"{v5e.pod_chips} {v5e.flops_per_s('int8')} {v5e.chips_per_host} {v5e.name}"
    assert len(out) == 4 and all(line.startswith("withheld: Chip.pod_") for line in out[2:]), out
    assert "what the exercise asks you to compute" in out[2]


def test_withheld_members_are_not_in_the_code_sent():
    code = transfer.Shipper(transfer.never, POD).code(hw.Chip)
    assert "def pod_hosts" in code.source and "return self.pod_chips // self.chips_per_host" not in code.source
    assert "return self.pod_chips * self.flops_per_s(dtype)" not in code.source
    assert "return math.prod(self.pod_shape)" in code.source  # pod_chips is not withheld here
    assert "TPU_V5E" not in code.source  # the class, not the module's data


def test_demo_values_travel_with_their_class_where_it_can():
    """What a demo cell binds reaches the kernel the same way; an object whose class cannot travel becomes a record
    of its fields there (no test hands it over, so nothing is unjudgeable)."""
    from autograder.judging.trusted import _binding, _entry

    shipper = transfer.Shipper(transfer.never, POD, lenient=True)
    kind, name, data = _entry(_binding("v5e", hw.TPU_V5E), surface.closure(()), shipper)
    assert (kind, name) == ("value", "v5e") and b"make_object" in data and not library_refs(data)
    assert ("scalelib.hardware", "Chip") in shipper.sent
    m = machine.Measurement("m", 1e9, 1e6, 1e-3)
    data = transfer.dumps((m, OPS[0]), transfer.never, transfer.Shipper(transfer.never, lenient=True))
    assert b"make_record" in data and b"make_object" in data and not library_refs(data)
    assert b"make_object" not in transfer.dumps(OPS[0], transfer.never)  # no shipper: fields only


def test_plot_objects_never_reach_a_kernel_even_inside_a_container():
    """A figure is never sent to a kernel, nor is a value that holds one: the array of axes ``plt.subplots`` returns
    carried the whole figure into every kernel of chapters 2, 3, 4, 5, 9 and 10 (up to 0.5 MB, and a matplotlib
    import and a figure rebuilt in each)."""
    import matplotlib.pyplot as plt
    import numpy as np

    from autograder.judging.trusted import _binding

    fig, axes = plt.subplots(1, 2)  # axes: a numpy array of Axes
    try:
        lines = axes[0].plot([0, 1], [1, 0])  # a list of Line2D
        for name, value in (("fig", fig), ("ax", axes[1]), ("axes", axes), ("lines", lines),
                            ("held", {"scale": 2.0, "where": (1, axes[1])})):
            b = _binding(name, value)
            assert (b.kind, b.data) == ("unsendable", b""), (name, b.kind)
            assert "figure or plot object (never sent to a kernel)" in b.why, (name, b.why)
    finally:
        plt.close(fig)
    assert _binding("values", {"xs": np.arange(3.0), "chip": hw.TPU_V5E}).kind == "value"


def test_a_class_whose_methods_need_more_of_scalelib_does_not_travel():
    """machine.Measurement's methods call roofline.arithmetic_intensity (an answer of chapter 1): it cannot travel
    to a kernel that does not hold it; the message says what to declare."""
    m = machine.Measurement("m", 1e9, 1e6, 1e-3)
    with pytest.raises(transfer.Unshippable, match=r"scalelib.roofline.arithmetic_intensity.*ex.allow"):
        transfer.dumps(m, transfer.never, transfer.Shipper(transfer.never))
    allowed = surface.closure({surface.Item("scalelib.roofline", "arithmetic_intensity")}).allows
    assert transfer.dumps(m, allowed, transfer.Shipper(allowed))


def test_withholds_are_read_from_the_test_cell():
    """Through the cell's own names (``Chip = hw.Chip``), aliases, and tuples the cell binds (``ex.withhold(*members)``)."""
    ch02 = chapter_model.load_chapter(course.SOLUTIONS / "02_tpus.ipynb")
    assert {("scalelib.hardware", f"Chip.{m}") for m in ("pod_hosts", "pod_cores", "pod_flops_per_s",
                                                           "pod_hbm_bytes", "pod_chips", "chips_per_host")} \
        <= ch02.exercises["ch02-ex2-2-pod"].withholds
    cell = textwrap.dedent("""
        from scalelib.topology import Slice as Sl
        members = (Sl.hops, Sl.axis_hops)
        ex.withhold(*members)
        ex.withhold(hw.Chip.pod_cores, not_a_library_name)
        Chip = hw.Chip
        ex.withhold(Chip.pod_hosts)
        """)
    aliases = {"rl": surface.Item("scalelib.roofline"), "hw": surface.Item("scalelib.hardware")}
    assert surface.withheld(cell, aliases) == {("scalelib.topology", "Slice.hops"),
                                               ("scalelib.topology", "Slice.axis_hops"),
                                               ("scalelib.hardware", "Chip.pod_cores"),
                                               ("scalelib.hardware", "Chip.pod_hosts")}


def test_a_withhold_the_grader_could_not_read_makes_the_test_unjudgeable():
    """A member withheld only at run time (a list built where the grader cannot read it) that reached the kernel
    with an object's class is reported, never silently allowed."""
    judge = Judge(None, None, surface.closure(()), 1.0, 0.0)  # type: ignore[arg-type]
    judge.shipper.code(hw.Chip)
    judge.withhold(hw.Chip.pod_hosts, hw.Chip.flops_per_s)
    assert judge.leaks() == ["scalelib.hardware.Chip.flops_per_s", "scalelib.hardware.Chip.pod_hosts"]
    judge = Judge(None, None, surface.closure(()), 1.0, 0.0, POD)  # type: ignore[arg-type]
    judge.shipper.code(hw.Chip)
    judge.withhold(hw.Chip.pod_hosts)
    assert judge.leaks() == []


def test_withhold_in_a_notebook_takes_only_members_of_library_classes():
    ex.withhold(hw.Chip.pod_hosts, hw.Chip.flops_per_s)
    for bad in (hw.get_chip, len, "Chip.pod_hosts"):
        with pytest.raises(TypeError, match="methods and properties of scalelib classes"):
            ex.withhold(bad)


def test_the_argument_checks_are_in_every_surface_so_checked_classes_travel():
    """A TransformerConfig checks its counts with validate.positive_int when it is built: it travels to a kernel
    whose exercise declares nothing, since every surface holds scalelib.validate (which computes no answer)."""
    from scalelib import transformer as tf

    cfg = tf.preset("llama3-8b")
    with pytest.raises(transfer.Unshippable, match=r"scalelib.validate.positive_int.*ex.allow"):
        transfer.dumps(cfg, transfer.never, transfer.Shipper(transfer.never))
    nothing = surface.closure(())
    assert nothing.whole == {"scalelib.validate"} and nothing.partial == ()
    data = transfer.dumps(cfg, nothing.allows, transfer.Shipper(nothing.allows))
    assert b"make_object" in data and not library_refs(data)
