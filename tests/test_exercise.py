import re
import traceback

import nbformat
import numpy as np
import pytest
from nbclient import NotebookClient

from scalelib import exercise as ex
from tests.conftest import IpcKernelManager


class EqualsEverything(float):
    def __eq__(self, other):
        return True

    __hash__ = float.__hash__


class Liar:
    def __eq__(self, other):
        return True

    def __float__(self):
        return 240.0


def test_plain_number_accepts_numbers():
    assert ex.plain_number(3) == 3.0
    assert ex.plain_number(np.float32(2.5)) == 2.5
    assert ex.plain_number(np.array(4.0)) == 4.0


@pytest.mark.parametrize("bad", [Liar(), EqualsEverything(1.0), True, "240", [240], None, float("nan")])
def test_plain_number_rejects_look_alikes(bad):
    with pytest.raises(ex.ExerciseError):
        ex.plain_number(bad)


def test_check_close():
    ex.check_close(240.2, 240.0, 0.01)
    with pytest.raises(ex.ExerciseError, match="expected 243"):
        ex.check_close(200.0, 243.0, 0.01, "x")


def test_check_array_close():
    ex.check_array_close(np.ones(3), [1, 1, 1], 1e-6, 0)
    with pytest.raises(ex.ExerciseError, match="shape"):
        ex.check_array_close(np.ones(2), [1, 1, 1], 1e-6, 0)
    with pytest.raises(ex.ExerciseError, match="must be an array"):
        ex.check_array_close(Liar(), [1.0], 1e-6, 0)


def test_rng_is_reproducible():
    assert ex.rng(5).random() == ex.rng(5).random()
    v = ex.log_uniform(ex.rng(1), 10, 1000)
    assert 10 <= v <= 1000


def test_probe_is_the_identity_in_a_notebook():
    def f(x):
        return x + 1

    assert ex.probe(f) is f


def _stub(exercise_id):
    def answer(*args):
        raise NotImplementedError(ex.stub_message(exercise_id))
    return answer


def test_visible_checks_report_an_unanswered_exercise(monkeypatch, capsys):
    monkeypatch.delenv(ex.STRICT_ENV, raising=False)
    ran = []
    with ex.visible_checks("ch01-a"):
        _stub("ch01-a")()
        ran.append("after the stub")
    with ex.visible_checks("ch01-b"):  # a check that needs another exercise's answer
        _stub("ch01-a")()
    assert ran == []
    said = capsys.readouterr().out
    assert "ch01-a: not answered yet" in said and "ch01-b: not checked yet" in said and "ch01-a, which" in said


def test_visible_checks_raise_wrong_answers_other_errors_and_anything_when_strict(monkeypatch):
    monkeypatch.delenv(ex.STRICT_ENV, raising=False)
    with pytest.raises(ex.ExerciseError):
        with ex.visible_checks("ch01-a"):
            ex.check_close(1.0, 2.0, 0.01)
    with pytest.raises(NotImplementedError, match="not supported"):  # not a stub: e.g. from a library
        with ex.visible_checks("ch01-a"):
            raise NotImplementedError("this op is not supported")
    monkeypatch.setenv(ex.STRICT_ENV, "1")
    with pytest.raises(NotImplementedError, match="ch01-a: not answered yet"):
        with ex.visible_checks("ch01-a"):
            _stub("ch01-a")()


def test_unpack_and_check_equal():
    assert ex.unpack([1, 2], 2, "pair") == (1, 2)
    for bad in ((1, 2, 3), 5, "ab"):
        with pytest.raises(ex.ExerciseError, match="pair must return 2 values"):
            ex.unpack(bad, 2, "pair")
    ex.check_equal((1, 2), (1, 2), "shape")
    with pytest.raises(ex.ExerciseError, match=r"shape = \(1, 3\), expected \(1, 2\)"):
        ex.check_equal((1, 3), (1, 2), "shape")


def test_visible_checks_say_when_they_pass(capsys):
    with ex.visible_checks("ch01-a"):
        pass
    with ex.visible_checks("ch01-b", "on the 2x4 mesh"):
        pass
    assert capsys.readouterr().out == ("ch01-a: visible checks passed\n"
                                       "ch01-b: visible checks passed (on the 2x4 mesh)\n")
    with pytest.raises(ex.ExerciseError), ex.visible_checks("ch01-c"):
        raise ex.ExerciseError("wrong")
    assert "passed" not in capsys.readouterr().out


# -- messages that explain (issue 20, item 5) -----------------------------------------------------------------------

def test_a_tolerance_prints_as_it_is():
    assert ex.tolerance_text(1e-9) == "relative 1e-9"
    assert ex.tolerance_text(1e-9, 0.5) == "relative 1e-9, absolute 0.5"
    assert ex.tolerance_text(0.02) == "relative 0.02"
    assert ex.tolerance_text(0, 1e-12) == "absolute 1e-12"
    assert ex.tolerance_text(0, 0) == "exactly"
    with pytest.raises(ex.ExerciseError, match=r"\(tolerance: relative 1e-9\)$") as err:
        ex.check_close(2.0, 1.0, 1e-9, "x")
    assert "%" not in str(err.value)


def test_wrong_and_expected_never_read_the_same():
    """136034.2 against 136034.7 used to print as "= 136034, expected 136034"."""
    with pytest.raises(ex.ExerciseError) as err:
        ex.check_close(136034.2, 136034.7, 1e-9, "tokens")
    assert str(err.value) == "tokens = 136034.2, expected 136034.7 (tolerance: relative 1e-9)"
    with pytest.raises(ex.ExerciseError) as err:
        ex.check_close(1.0000000001, 1.0, 1e-12, "t")
    got, want = str(err.value).split(" = ")[1].split(" (")[0].split(", expected ")
    assert got != want and float(got) == 1.0000000001 and float(want) == 1.0
    assert ex.distinct(240.0, 243.0) == ("240", "243")  # six significant digits where they suffice


def test_array_messages_name_the_element_the_values_and_the_tolerance():
    want = np.array([[1.0, 2.0], [3.0, 1000.0]])
    got = want.copy()
    got[1, 1] = 1000.9
    with pytest.raises(ex.ExerciseError) as err:
        ex.check_array_close(got, want, 1e-9, 0.5, "grid")
    assert str(err.value) == ("grid: 1 of 4 entries differ; e.g. element (1, 1) is 1000.9, expected 1000 "
                              "(tolerance: relative 1e-9, absolute 0.5)")


# -- a wrong answer reads as one line in the notebook (issue 49) ----------------------------------------------------

_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _plain(lines) -> list[str]:
    return _ANSI.sub("", "\n".join(lines)).splitlines()


def test_a_failed_visible_check_shows_one_line_in_a_kernel_and_tb_shows_the_traceback(tmp_path, monkeypatch):
    """A Jupyter kernel (ipykernel's shell, as Lab and Colab run one) shows a failed check as its message alone,
    one line that names %tb; %tb in the next cell then shows the traceback down to the check that raised."""
    monkeypatch.delenv(ex.STRICT_ENV, raising=False)
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("from scalelib import exercise as ex"),
        nbformat.v4.new_code_cell("with ex.visible_checks('ch01-a'):\n"
                                  "    ex.check_close(1.0, 2.0, 1e-9, 'lower bound')"),
        nbformat.v4.new_code_cell("%tb"),
    ])
    NotebookClient(nb, timeout=120, kernel_name="python3", allow_errors=True, kernel_manager_class=IpcKernelManager,
                   resources={"metadata": {"path": str(tmp_path)}}).execute()
    message = "lower bound = 1, expected 2 (tolerance: relative 1e-9)"
    (shown,) = [o for o in nb.cells[1].outputs if o.output_type == "error"]
    assert shown.ename == "ExerciseError" and shown.evalue == message  # what a front end or nbgrader reads as text
    (line,) = _plain(shown.traceback)  # one line: no traceback wall, no frame of scalelib/exercise.py
    assert line.startswith(f"ExerciseError: {message}") and "%tb" in line
    again = [o for o in nb.cells[2].outputs if o.output_type == "error"]
    assert len(again) == 1, nb.cells[2].outputs
    full = "\n".join(_plain(again[0].traceback))
    assert "Traceback" in full and "exercise.py" in full and "check_close" in full and "ch01-a" in full, full
    assert full.rstrip().endswith(f"ExerciseError: {message}")


def test_outside_ipython_a_failed_check_is_a_plain_assertion_error():
    """The grader and pytest see the same error as before: an AssertionError whose text is the message."""
    with pytest.raises(AssertionError) as err, ex.visible_checks("ch01-a"):
        ex.check_close(1.0, 2.0, 1e-9, "lower bound")
    assert f"{type(err.value).__name__}: {err.value}" == \
        "ExerciseError: lower bound = 1, expected 2 (tolerance: relative 1e-9)"
    assert any(frame.name == "check_close" for frame in traceback.extract_tb(err.value.__traceback__))
    assert "\n".join(err.value._render_traceback_()).count("check_close") >= 1  # not being handled: the full form


def test_a_visible_block_withholds_what_its_cell_declares_from_the_answer_only(monkeypatch):
    """Issue 49: an answer that reads a member the test withholds fails in the notebook, as when graded; the test's
    own code, the chapter's other cells and the library keep the member, and it is back after the block."""
    from scalelib import hardware as hw

    monkeypatch.delenv(ex.STRICT_ENV, raising=False)
    ns = {"ex": ex, "hw": hw}
    run = lambda source, cell: exec(compile(source, cell, "exec"), ns)  # noqa: E731: a notebook cell of that name
    run("def context_hosts(chip):\n    return chip.pod_hosts\n", "<a demo cell>")
    run("def hosts(chip):\n    return chip.pod_hosts\ndef honest(chip):\n    return len(chip.name)\n"
        "def via_demo(chip):\n    return context_hosts(chip)\n", "<answer cell>")
    test = ("ex.withhold(hw.Chip.pod_hosts)\n"
            "with ex.visible_checks('ch02-x', answers=({fn},)):\n"
            "    want = hw.TPU_V5P.pod_hosts, context_hosts(hw.TPU_V5P)\n"  # the test's own code and a demo's
            "    got = {fn}(hw.TPU_V5P)\n")
    run(test.format(fn="honest"), "<test cell>")
    for fn in ("hosts", "via_demo"):
        with pytest.raises(ex.ExerciseError, match=r"Chip.pod_hosts is what this exercise asks you to compute"):
            run(test.format(fn=fn), "<test cell>")
    assert isinstance(hw.TPU_V5P.pod_hosts, int) and ns["hosts"](hw.TPU_V5P) == hw.TPU_V5P.pod_hosts  # restored
    # a declaration in another cell (a hidden part that already ran, say) does not reach the next cell's block
    run("ex.withhold(hw.Chip.pod_hosts)\n", "<other cell>")
    run("with ex.visible_checks('ch02-y', answers=(hosts,)):\n    got = hosts(hw.TPU_V5P)\n", "<next test cell>")
    with pytest.raises(TypeError, match="names the answer's functions"):
        run("ex.withhold(hw.Chip.pod_hosts)\nwith ex.visible_checks('ch02-z'):\n    pass\n", "<a third cell>")
