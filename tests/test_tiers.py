"""The tiers (CONTRIBUTING.md, Tests): the inner loop, `pytest -m "not slow and not multiprocess"`,
starts no Python or shell process. Two guards hold it: tests/conftest.py fails an unmarked test
at the moment it would start one (its fixtures included), and, for the tests a run skips, the
files are read here: a test that reaches a process helper, itself, through a helper of its file
or through a fixture of its file, is marked."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import conftest
import pytest

TESTS = Path(__file__).resolve().parent
# What starts a JAX, CLI or Python process: the CLI runner, the environment every JAX subprocess
# gets, the multi-process job and launcher starters of test_multiprocess and test_launch_local,
# and this interpreter's path (`sys.executable`: a Python child).
STARTERS = {"run_main", "subprocess_env", "start_job", "start_launcher", "executable"}
TIERS = set(conftest.TIERS)


def _item(*marks: str, fixtures: tuple[str, ...] = ()):
    """What the guard and the collection rule read of a pytest item."""
    return SimpleNamespace(
        nodeid="tests/test_x.py::test_x",
        fixturenames=list(fixtures),
        get_closest_marker=lambda name: name if name in marks else None,
        markers=[],
        add_marker=None,
    )


@pytest.mark.parametrize(
    "command, program",
    [
        ([sys.executable, "-m", "hpcai_jax.main"], Path(sys.executable).name),
        (["python3", "-c", "pass"], "python3"),
        (["bash", "launch/slurm/gpu.sbatch"], "bash"),
        ("launch/tpu_pod.sh run", "tpu_pod.sh"),
        (["benchmarks/accelerator/wheelhouse.py"], "wheelhouse.py"),
        (["git", "log"], None),
        (["nvidia-smi", "-L"], None),
    ],
)
def test_a_python_or_shell_process_is_one_the_inner_loop_may_not_start(command, program):
    assert conftest.starts_a_process(command) == program


@pytest.mark.parametrize(
    "line, started",
    [("#!/usr/bin/env python3", True), ("#!/bin/sh", True), ("#!/usr/bin/awk -f", False)],
)
def test_a_script_run_by_its_interpreter_line_is_one_too(tmp_path, line, started):
    tool = tmp_path / "cuda-stream"
    tool.write_text(f"{line}\nprint('hello')\n")
    assert (conftest.starts_a_process([str(tool), "--float"]) == "cuda-stream") is started


def test_an_unmarked_test_fails_before_its_process_starts(tmp_path):
    before = subprocess.Popen._execute_child
    undo = conftest.process_guard(_item())
    try:
        with pytest.raises(pytest.fail.Exception, match=r"starts a process \(bash\) but is not"):
            subprocess.run(["bash", "-c", f"touch {tmp_path}/ran"])
        assert subprocess.run(["git", "--version"], capture_output=True).returncode == 0
    finally:
        undo()
    assert subprocess.Popen._execute_child is before
    assert not (tmp_path / "ran").exists()  # refused, not started then reported


@pytest.mark.parametrize("mark", sorted(TIERS))
def test_a_marked_test_may_start_processes(mark):
    before = subprocess.Popen._execute_child
    conftest.process_guard(_item(mark))()
    undo = conftest.process_guard(_item(mark))
    assert subprocess.Popen._execute_child is before
    undo()


def test_a_test_that_reads_the_shared_cli_run_is_slow():
    added = []
    reader, other = _item(fixtures=("tmp_path", "tiny_run")), _item(fixtures=("tmp_path",))
    for item in (reader, other):
        item.add_marker = lambda mark, item=item: added.append((item, mark.name))
        item.path = Path("test_x.py")
    conftest.pytest_collection_modifyitems([reader, other])
    assert added == [(reader, "slow")]


def _marks(node: ast.AST) -> set[str]:
    """The tiers named by `pytest.mark.X` decorators or a `pytestmark = ...` value."""
    found = set()
    for sub in ast.walk(node):
        if isinstance(sub, ast.Attribute) and sub.attr in TIERS:
            inner = sub.value
            if isinstance(inner, ast.Attribute) and inner.attr == "mark":
                found.add(sub.attr)
    return found


def _unmarked_starters(source: str) -> list[str]:
    """The tests of a file that reach a STARTER (through the file's own functions and fixtures)
    without a tier mark, on the file or on themselves."""
    tree = ast.parse(source)
    module_marks = set()
    functions: dict[str, ast.FunctionDef] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "pytestmark" for t in node.targets
        ):
            module_marks |= _marks(node.value)
        elif isinstance(node, ast.FunctionDef):
            functions[node.name] = node

    def reaches(name: str, seen: set[str]) -> bool:
        if name in STARTERS:
            return True
        if name in seen or name not in functions:
            return False
        seen.add(name)
        fn = functions[name]
        names = {a.arg for a in fn.args.args}  # fixtures it asks for
        for sub in (x for statement in fn.body for x in ast.walk(statement)):
            if isinstance(sub, ast.Name):
                names.add(sub.id)
            elif isinstance(sub, ast.Attribute):
                names.add(sub.attr)
        return any(reaches(n, seen) for n in names)

    return [
        name
        for name, fn in functions.items()
        if name.startswith("test_")
        and not (module_marks or any(_marks(d) for d in fn.decorator_list))
        and reaches(name, set())
    ]


def test_the_file_check_finds_an_unmarked_starter():
    source = (
        "import pytest\nfrom helpers import run_main\n\n"
        "@pytest.fixture(scope='module')\ndef cli():\n    return run_main('--help')\n\n"
        "def _helper():\n    return cli()\n\n"
        "def test_direct():\n    run_main('--help')\n\n"
        "def test_through_a_fixture(cli):\n    pass\n\n"
        "def test_through_a_helper():\n    _helper()\n\n"
        "@pytest.mark.slow\ndef test_marked():\n    run_main('--help')\n\n"
        "def test_pure():\n    assert 1 + 1 == 2\n\n"
        "@pytest.mark.parametrize('x', [sys.executable])\ndef test_names_it(x):\n    pass\n\n"
        "def test_python_child():\n    subprocess.run([sys.executable, '-c', 'pass'])\n"
    )
    assert _unmarked_starters(source) == [
        "test_direct",
        "test_through_a_fixture",
        "test_through_a_helper",
        "test_python_child",
    ]
    marked_file = "import pytest\npytestmark = pytest.mark.multiprocess\n" + source
    assert _unmarked_starters(marked_file) == []


def test_every_test_that_reaches_a_process_helper_is_marked():
    unmarked = {
        path.name: names
        for path in sorted(TESTS.glob("test_*.py"))
        if (names := _unmarked_starters(path.read_text()))
    }
    assert unmarked == {}, f"mark these slow or multiprocess (CONTRIBUTING.md): {unmarked}"
