"""The grader's parse/compile helpers give correct results when many threads call them at once.

They serialise CPython's AST conversion, which in 3.11 can fail with "AST constructor recursion depth
mismatch" under concurrent use (gh-106905; seen once while grading two notebooks in parallel). The
race itself is too rare to provoke on demand here, so this checks results and that the lock holds up.
"""

from concurrent.futures import ThreadPoolExecutor

from autograder import pysource

# Deeply nested source makes each parse long, so threads overlap inside the AST converter.
NESTED = "x = " + "[" * 60 + "1" + "]" * 60 + "\n"


def _work(i):
    tree = pysource.parse(NESTED * 50)
    value = pysource.literal_eval(repr({"i": i, "xs": [[1, 2], [3, 4]]}))
    code = pysource.notebook_code("%matplotlib inline\ny = 2 * 3", f"<cell {i}>")
    ns = {"get_ipython": lambda: type("I", (), {"run_line_magic": lambda *a: None})()}
    exec(code, ns)  # noqa: S102
    return len(tree.body), value["i"], ns["y"]


def test_parallel_parsing_gives_the_same_results_as_serial():
    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(_work, range(64)))
    assert results == [(50, i, 6) for i in range(64)]


def test_decorated_functions_returns_top_level_probes_without_the_decorator():
    src = (
        "%matplotlib inline\n"
        "@ex.probe\n"
        "def run_it(a, b=2):\n"
        "    return {'s': a + b}\n"
        "def plain(x):\n"
        "    return x\n"
        "def outer():\n"
        "    @ex.probe\n"
        "    def inner():\n"
        "        pass\n"
    )
    found = pysource.decorated_functions(src, "probe")
    assert list(found) == ["run_it"]
    ns = {}
    exec(found["run_it"], ns)
    assert ns["run_it"](1) == {"s": 3} and "@" not in found["run_it"]
