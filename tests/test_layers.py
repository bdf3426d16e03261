"""The architecture holds: no import circles between modules nor loops between folders, and no
layer imports one above it (data/, workloads/, models/, ops/, stream/ and records/ never import
the engine; FLOP accounting, flops/, sits on it and below the run; every pair of the folders
CONTRIBUTING.md names imports one way only; every module keeps to docs/design.md's floors;
records/ imports nothing above it, and the report reads records without JAX)."""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

from helpers import ROOT

PACKAGE = ROOT / "hpcai_jax"


def _module(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports() -> dict[str, set[str]]:
    """Module → the hpcai_jax modules it imports (at any depth of its code)."""
    modules = {_module(p) for p in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        deps = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.ImportFrom)
                and node.module
                and node.module.startswith("hpcai_jax")
            ):
                for alias in node.names:
                    name = f"{node.module}.{alias.name}"
                    deps.add(name if name in modules else node.module)
            elif isinstance(node, ast.Import):
                deps |= {a.name for a in node.names if a.name.startswith("hpcai_jax")}
        graph[_module(path)] = deps - {_module(path)}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The circles a depth-first walk of `graph` meets, each as the path round it."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    cycles = []

    def visit(module: str, path: list[str]) -> None:
        state[module] = 1
        for dep in sorted(graph.get(module, ())):
            if state.get(dep) == 1:
                cycles.append(path[path.index(dep) :] + [dep])
            elif dep not in state:
                visit(dep, [*path, dep])
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    return cycles


def test_there_are_no_import_circles():
    assert _cycles(_imports()) == []


# The trainer orchestrates the run through few doors, each job behind the module that owns it
# (the outputs and the MLLOG behind run/outputs.py, the record's figures behind run/record.py,
# the hooks' context, the SIGTERM guard and the final save behind run/hooks.py, the input
# pipeline behind RunSetup): issue 67's goal, met, and today's figure as its ceiling.
TRAINER_IMPORTS_GOAL, TRAINER_IMPORTS_TODAY = 15, 15


def _trainer_imports() -> set[str]:
    """The package modules run/trainer.py imports (its `_imports` edges)."""
    return _imports()["hpcai_jax.run.trainer"]


def test_the_trainer_imports_no_more_modules_than_today():
    assert len(_trainer_imports()) <= TRAINER_IMPORTS_TODAY, sorted(_trainer_imports())


def test_the_trainer_imports_meet_the_goal():
    assert len(_trainer_imports()) <= TRAINER_IMPORTS_GOAL, sorted(_trainer_imports())


def _folders(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """The import graph between folders (`stream`) and root modules (`settings`)."""
    folders: dict[str, set[str]] = {}
    for module, deps in graph.items():
        folder = _package(module)
        folders.setdefault(folder, set()).update(_package(d) for d in deps)
        folders[folder].discard(folder)
    return folders


def test_there_are_no_loops_between_folders():
    """A folder or root module that imports another is never imported back by it, at any
    remove: the settings compose the node check's (check_config.py) without importing
    nodecheck/, which reads them, and STREAM names what it reads of them as a protocol."""
    graph = _imports()
    assert _cycles(_folders(graph)) == []
    # It can fail: the settings composing the node check's from nodecheck/ again.
    graph["hpcai_jax.settings"] = graph["hpcai_jax.settings"] | {"hpcai_jax.nodecheck.runner"}
    assert [set(c) for c in _cycles(_folders(graph))] == [{"nodecheck", "settings"}]


def test_lower_layers_never_import_the_engine():
    graph = _imports()
    assert len(graph) > 40
    for module, deps in graph.items():
        lower = (["data"], ["workloads"], ["stream"], ["models"], ["records"], ["ops"])
        if module.split(".")[1:2] in lower:
            assert not any(d.startswith("hpcai_jax.engine") for d in deps), (module, deps)


# The engine in four layers (docs/design.md): the JAX numerics of the step (engine/), its FLOP
# accounting (flops/), what else is measured about it (telemetry/), and the run around it (run/).
# Each may import the layers before it in this list, never one after it, and none of them the
# modes and tools above. flops/mode.py is `--mode=flops` itself: a mode, like stream/.
ENGINE_LAYERS = ("engine", "flops", "telemetry", "run")
ABOVE_THE_ENGINE = ("nodecheck", "acceptance", "submission", "ranking", "report", "sweep", "main")
MODES_INSIDE_A_LAYER = ("hpcai_jax.flops.mode",)


def _package(module: str) -> str:
    return module.split(".")[1] if module.count(".") else ""


def test_the_engine_layers_import_only_downward():
    graph = _imports()
    assert all(any(m.startswith(f"hpcai_jax.{p}") for m in graph) for p in ENGINE_LAYERS)
    for module, deps in graph.items():
        layer = _package(module)
        if layer not in ENGINE_LAYERS or module in MODES_INSIDE_A_LAYER:
            continue
        later = ENGINE_LAYERS[ENGINE_LAYERS.index(layer) + 1 :]
        for dep in deps:
            assert _package(dep) not in later + ABOVE_THE_ENGINE, (module, dep)
            assert dep not in MODES_INSIDE_A_LAYER, (module, dep)
            # The engine reads the training settings (config.py), never the modes' composed.
            assert not dep.startswith("hpcai_jax.settings"), (module, dep)


# CONTRIBUTING.md's packages below the engine: they import none of its layers and none of the
# modes and tools above (STREAM's kernels take XLA's count from the foundations, xla_cost.py;
# the engine's memory check the memory queries, device_memory.py; STREAM's mode names what it
# reads of the composed settings as a protocol, stream/record.py's RunSettings).
BELOW_THE_ENGINE = ("data", "workloads", "models", "ops", "stream", "records")
ON_TOP = ("settings", "flags", "help", "dry_run", "sweep_paper", "sweep_plan")


def _upward_from_below(graph) -> set[tuple[str, str]]:
    above = ENGINE_LAYERS + ABOVE_THE_ENGINE + ON_TOP
    return {
        (module, dep)
        for module, deps in graph.items()
        if _package(module) in BELOW_THE_ENGINE
        for dep in deps
        if _package(dep) in above
    }


def test_the_packages_below_the_engine_import_nothing_above_them():
    graph = _imports()
    assert _upward_from_below(graph) == set()
    # It can fail: STREAM's kernels on flops/ again, the engine loop engine → stream → flops;
    # STREAM's mode on the composed settings again.
    graph["hpcai_jax.stream.kernels"] = graph["hpcai_jax.stream.kernels"] | {"hpcai_jax.flops"}
    graph["hpcai_jax.stream.benchmark"] = graph["hpcai_jax.stream.benchmark"] | {
        "hpcai_jax.settings"
    }
    assert _upward_from_below(graph) == {
        ("hpcai_jax.stream.kernels", "hpcai_jax.flops"),
        ("hpcai_jax.stream.benchmark", "hpcai_jax.settings"),
    }


# CONTRIBUTING.md's folders in its order: the packages below the engine (one floor), the
# engine's layers one by one, the modes and tools above (one floor). No exception: flops/mode.py,
# a mode inside its layer, imports nothing above flops/ either.
NAMED_FLOORS = (BELOW_THE_ENGINE, *((layer,) for layer in ENGINE_LAYERS), ABOVE_THE_ENGINE)


def upward_folder_arrows(graph) -> list[tuple[str, str]]:
    """The imports from a folder CONTRIBUTING.md names into one it names later."""
    floor = {p: i for i, names in enumerate(NAMED_FLOORS) for p in names}
    return sorted(
        (module, dep)
        for module, deps in graph.items()
        for dep in deps
        if floor.get(_package(dep), -1) > floor.get(_package(module), len(NAMED_FLOORS))
    )


def test_every_pair_of_named_folders_imports_one_way():
    """Of every two folders CONTRIBUTING.md names on different floors, only the upper imports the
    lower (stream/ → flops/ included: the roofline runs STREAM, never the other way)."""
    graph = _imports()
    named = [p for floor in NAMED_FLOORS for p in floor if (PACKAGE / p).is_dir()]
    assert len(named) == 15, named
    assert upward_folder_arrows(graph) == []
    # It can fail: STREAM's kernels on flops/, and the run on the node check.
    graph["hpcai_jax.stream.kernels"] = graph["hpcai_jax.stream.kernels"] | {"hpcai_jax.flops"}
    graph["hpcai_jax.run.trainer"] = graph["hpcai_jax.run.trainer"] | {"hpcai_jax.nodecheck.rows"}
    assert upward_folder_arrows(graph) == [
        ("hpcai_jax.run.trainer", "hpcai_jax.nodecheck.rows"),
        ("hpcai_jax.stream.kernels", "hpcai_jax.flops"),
    ]


def test_contributing_names_the_layers_this_file_checks():
    """CONTRIBUTING.md's "The layers" rule names the packages below the engine, the engine's
    layers in order and the modes above as this file checks them."""
    text = (ROOT / "CONTRIBUTING.md").read_text()
    rule = text[text.index("- The layers (`tests/test_layers.py`)") :].split("\n- ")[0]
    below, rest = rule.split("sit below the engine")
    layers, above = rest.split("none the modes and")

    def folders(part: str) -> list[str]:
        return re.findall(r"`([a-z_]+)/`", part)

    assert tuple(folders(below)) == BELOW_THE_ENGINE
    assert tuple(folders(layers)) == ENGINE_LAYERS
    assert folders(above) == [p for p in ABOVE_THE_ENGINE if (PACKAGE / p).is_dir()]


def test_no_engine_module_imports_a_concrete_workload_or_model():
    """The engine sees workloads through their protocol and factory only (workloads/base.py,
    workloads/__init__.py): a new workload needs no engine change."""
    allowed = {"hpcai_jax.workloads", "hpcai_jax.workloads.base"}
    for module, deps in _imports().items():
        if _package(module) not in ENGINE_LAYERS:
            continue
        for dep in deps:
            assert not (dep.startswith("hpcai_jax.workloads.") and dep not in allowed), (
                module,
                dep,
            )
            assert not dep.startswith("hpcai_jax.models"), (module, dep)


# The records' definitions and their reader (docs/record.md) sit below every mode and tool: the
# engine layers build records, report/, submission/ and the MLLOG read them. They import only
# themselves and the one exception type, and no package beyond Python's own and pydantic.
# And the foundations their writer uses (records/write.py: the file modes, the run's lock).
RECORDS_MAY_IMPORT = (
    "hpcai_jax.records",
    "hpcai_jax.errors",
    "hpcai_jax.file_modes",
    "hpcai_jax.locks",
)
RECORDS_MAY_USE = ("pydantic",)  # their declarations (docs/record.md is made from them)
JAX_PACKAGES = ("jax", "jaxlib", "flax", "optax", "orbax", "qwix")


def _third_party() -> dict[str, set[str]]:
    """Module → the top-level packages outside hpcai_jax it imports (at any depth of its code)."""
    out = {}
    for path in PACKAGE.rglob("*.py"):
        names = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names.add(node.module.split(".")[0])
        out[_module(path)] = names - {"hpcai_jax", "__future__"}
    return out


def records_problems(graph: dict[str, set[str]], third: dict[str, set[str]]) -> list:
    problems = []
    for module, deps in graph.items():
        if _package(module) != "records":
            continue
        problems += [(module, d) for d in deps if not d.startswith(RECORDS_MAY_IMPORT)]
        problems += [
            (module, p)
            for p in third[module]
            if p not in sys.stdlib_module_names and p not in RECORDS_MAY_USE
        ]
    return problems


def test_records_import_only_themselves_the_standard_library_and_pydantic():
    graph = _imports()
    assert any(_package(m) == "records" for m in graph)
    assert records_problems(graph, _third_party()) == []


def _reaches(graph: dict[str, set[str]], start: list[str]) -> set[str]:
    seen, todo = set(), list(start)
    while todo:
        module = todo.pop()
        if module not in seen:
            seen.add(module)
            todo += [d for d in graph.get(module, ()) if d in graph]
    return seen


def jax_importers(graph, third, packages: tuple[str, ...]) -> list[str]:
    """The modules the given packages reach (their own and every hpcai_jax module they import,
    transitively) that import JAX or a JAX library."""
    start = [m for m in graph if _package(m) in packages]
    return sorted(m for m in _reaches(graph, start) if third[m] & set(JAX_PACKAGES))


def test_the_report_and_the_records_never_reach_jax():
    """`python -m hpcai_jax.report` reads records copied off a cluster, anywhere."""
    graph, third = _imports(), _third_party()
    assert jax_importers(graph, third, ("report", "records")) == []
    # The checks can fail: the submission tools do reach JAX (flag parsing, the mesh layout),
    # and a records module importing the engine would break both rules.
    assert jax_importers(graph, third, ("submission",))
    graph["hpcai_jax.records.read"] = graph["hpcai_jax.records.read"] | {"hpcai_jax.engine.mesh"}
    assert "hpcai_jax.engine.mesh" in jax_importers(graph, third, ("records",))
    assert ("hpcai_jax.records.read", "hpcai_jax.engine.mesh") in records_problems(graph, third)


def test_the_engine_holds_only_what_a_training_run_uses():
    """Nothing in engine/ that only a benchmark or a mode uses: every engine module is reached
    from the trainer's imports (a measurement helper of a benchmark lives in telemetry/, a
    mode's own code in its mode's package)."""
    graph = _imports()
    reached = _reaches(graph, ["hpcai_jax.run.trainer"])
    engine = sorted(m for m in graph if _package(m) == "engine" and m != "hpcai_jax.engine")
    assert len(engine) > 8
    assert [m for m in engine if m not in reached] == []
    # It can fail: a module only a benchmark imports is not reached.
    graph["hpcai_jax.engine.only_a_benchmark"] = set()
    assert "hpcai_jax.engine.only_a_benchmark" not in _reaches(graph, ["hpcai_jax.run.trainer"])


def floors() -> list[set[str]]:
    """docs/design.md's floors, in order: the root modules (`x.py`) and packages (`x/`) each
    bullet of its "The packages, floor by floor" list names."""
    text = (ROOT / "docs" / "design.md").read_text()
    section = text[text.index("The packages, floor by floor") : text.index("## Facts")]
    bullets = ("\n" + section).split("\n- ")[1:]
    return [set(re.findall(r"`([a-z_]+(?:\.py|/))`", b)) for b in bullets]


def test_every_root_module_has_a_floor():
    """A module at the package root is named in one floor of docs/design.md's list."""
    root = {p.name for p in PACKAGE.glob("*.py")} - {"__init__.py"}
    named = [name for floor in floors() for name in floor if name.endswith(".py")]
    assert root - set(named) == set(), "root modules without a floor"
    assert len(named) == len(set(named)), "a module named on two floors"


def test_every_module_imports_only_its_floor_and_below():
    """Each module (a root module, or one of a package on the list) imports only what sits on
    its floor or below it (root modules and packages), and the foundations (the first floor)
    nothing of the package but errors.py."""
    graph, listed = _imports(), floors()
    assert listed[0] and "errors.py" in listed[0]
    assert _floor_problems(graph, listed) == []
    # It can fail: the settings importing the engine (config.py once did, for the forms).
    # And a package's module: STREAM on the composed settings again.
    graph["hpcai_jax.config"] = graph["hpcai_jax.config"] | {"hpcai_jax.engine.member_map"}
    graph["hpcai_jax.stream.record"] = graph["hpcai_jax.stream.record"] | {"hpcai_jax.settings"}
    assert _floor_problems(graph, listed) == [
        ("hpcai_jax.config", "hpcai_jax.engine"),
        ("hpcai_jax.stream.record", "hpcai_jax.settings"),
    ]


def _floor_problems(graph, listed) -> list[tuple[str, str]]:
    floor_of = {}
    for i, names in enumerate(listed):
        for name in names:
            floor_of["hpcai_jax." + name.removesuffix(".py").removesuffix("/")] = i

    def owner(module: str) -> str:
        return module if module in floor_of else ".".join(module.split(".")[:2])

    problems = []
    for module, deps in graph.items():
        mine = floor_of.get(owner(module))
        if mine is None:
            continue
        for dep in deps:
            theirs = owner(dep)
            if theirs == owner(module):
                continue
            if floor_of.get(theirs, -1) > mine or (mine == 0 and dep != "hpcai_jax.errors"):
                problems.append((module, theirs))
    return sorted(set(problems))
