"""The third-party modules hpcai_jax imports, read from its own source, and whether they import.

A node's image decides what is installed, and a hand-kept list drifts from the code, so the list
is derived from the package's own imports. What counts, what is optional, and the check
`python3 -m hpcai_jax.third_party [--json]`: `docs/offline_install.md`. This module imports only
the standard library, so the check runs where nothing else is installed.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import importlib
import importlib.metadata
import json
import re
import sys
import tomllib
import warnings
from dataclasses import dataclass
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent

# Distribution of a top-level module, where the two names differ or where the module may not be
# installed to ask importlib.metadata (the node before its wheelhouse is installed).
KNOWN_DISTRIBUTIONS = {
    "PIL": "pillow",
    "absl": "absl-py",
    "array_record": "array-record",
    "cv2": "opencv-python-headless",
    "etils": "etils",
    "google": "protobuf",
    "grain": "grain",
    "jaxlib": "jaxlib",
    "ml_dtypes": "ml-dtypes",
    "mllog": "mlperf-logging",
    "mlperf_logging": "mlperf-logging",
    "orbax": "orbax-checkpoint",
    "pycocotools": "pycocotools",
    "pynvml": "nvidia-ml-py",
    "qwix": "qwix",
    "sklearn": "scikit-learn",
    "tensorflow_datasets": "tensorflow-datasets",
    "turbojpeg": "turbojpeg",
    "yaml": "pyyaml",
}

_CATCHES_IMPORT_ERROR = {"ImportError", "ModuleNotFoundError", "Exception", "BaseException"}


def normalize(name: str) -> str:
    """PEP 503's normalised form of a distribution name (pip and PyPI compare names this way)."""
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass(frozen=True)
class Site:
    """One import statement of a third-party module."""

    module: str  # top-level name
    file: str  # relative to the repository root, e.g. hpcai_jax/data/augment.py
    line: int
    guarded: bool


@dataclass(frozen=True)
class Module:
    """A third-party top-level module with every place that imports it."""

    name: str
    files: tuple[str, ...]
    optional: bool
    distribution: str | None
    extra: str = ""  # the extras that install it ("coco"), where no plain install does


def _catches_import_error(handler: ast.ExceptHandler) -> bool:
    if handler.type is None:
        return True
    types = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    for t in types:
        name = t.attr if isinstance(t, ast.Attribute) else getattr(t, "id", None)
        if name in _CATCHES_IMPORT_ERROR:
            return True
    return False


def _suppresses_import_error(item: ast.withitem) -> bool:
    call = item.context_expr
    if not isinstance(call, ast.Call):
        return False
    func = call.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
    return name == "suppress" and any(
        getattr(a, "id", getattr(a, "attr", None)) in _CATCHES_IMPORT_ERROR for a in call.args
    )


def _is_type_checking(test: ast.expr) -> bool:
    return getattr(test, "id", getattr(test, "attr", None)) == "TYPE_CHECKING"


class _FileScan(ast.NodeVisitor):
    """Import sites and references to module-private top-level functions of one file, each
    with whether it lies lexically in a guard and in which top-level function."""

    def __init__(self) -> None:
        self.imports: list[tuple[str, int, bool, str | None]] = []  # module, line, guarded, fn
        self.refs: list[tuple[str, bool, bool, str | None]] = []  # name, is_call, guarded, fn
        self.private_functions: set[str] = set()
        self._guard = 0
        self._function: str | None = None
        self._depth = 0  # nesting of function/class definitions

    def _add_import(self, name: str, line: int) -> None:
        top = name.split(".")[0]
        self.imports.append((top, line, self._guard > 0, self._function))

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._add_import(alias.name, node.lineno)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level == 0 and node.module:
            self._add_import(node.module, node.lineno)

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
        if (
            name in ("import_module", "__import__")
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            self._add_import(node.args[0].value, node.lineno)
        if isinstance(func, ast.Name) and func.id.startswith("_"):
            self.refs.append((func.id, True, self._guard > 0, self._function))
            for child in [*node.args, *node.keywords]:
                self.visit(child)
            return
        self.generic_visit(node)

    def visit_Name(self, node: ast.Name) -> None:
        if node.id.startswith("_"):  # a private function passed around: not provably guarded
            self.refs.append((node.id, False, self._guard > 0, self._function))

    def visit_Try(self, node: ast.Try) -> None:
        guards = any(_catches_import_error(h) for h in node.handlers)
        self._guard += guards
        for stmt in node.body:
            self.visit(stmt)
        self._guard -= guards
        for stmt in [*node.handlers, *node.orelse, *node.finalbody]:
            self.visit(stmt)

    visit_TryStar = visit_Try

    def visit_With(self, node: ast.With) -> None:
        guards = any(_suppresses_import_error(item) for item in node.items)
        for item in node.items:
            self.visit(item)
        self._guard += guards
        for stmt in node.body:
            self.visit(stmt)
        self._guard -= guards

    def visit_If(self, node: ast.If) -> None:
        if _is_type_checking(node.test):  # never runs: not a runtime dependency
            for stmt in node.orelse:
                self.visit(stmt)
            return
        self.generic_visit(node)

    def _visit_definition(self, node) -> None:
        top = self._depth == 0
        if top and isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            if node.name.startswith("_"):
                self.private_functions.add(node.name)
            self._function = node.name
        self._depth += 1
        self.generic_visit(node)
        self._depth -= 1
        if top:
            self._function = None

    visit_FunctionDef = visit_AsyncFunctionDef = visit_ClassDef = _visit_definition


def _sites_of_file(path: Path, rel: str) -> list[Site]:
    scan = _FileScan()
    scan.visit(ast.parse(path.read_text(encoding="utf-8"), filename=str(path)))
    # Private functions whose every reference is a guarded call (least fixed point, so a
    # function calling only itself is not guarded by that alone).
    guarded_fns: set[str] = set()
    changed = True
    while changed:
        changed = False
        for fn in scan.private_functions - guarded_fns:
            refs = [r for r in scan.refs if r[0] == fn and r[3] != fn]
            if refs and all(
                is_call and (guarded or caller in guarded_fns)
                for _, is_call, guarded, caller in refs
            ):
                guarded_fns.add(fn)
                changed = True
    return [
        Site(module, rel, line, guarded or fn in guarded_fns)
        for module, line, guarded, fn in scan.imports
    ]


def import_sites(package_dir: Path = PACKAGE_DIR) -> list[Site]:
    """Every import of a third-party module in the package's source, in file order."""
    root = package_dir.parent
    sites = []
    for path in sorted(package_dir.rglob("*.py")):
        for site in _sites_of_file(path, path.relative_to(root).as_posix()):
            if site.module not in sys.stdlib_module_names and site.module != package_dir.name:
                sites.append(site)
    return sites


_installed: dict[str, list[str]] | None = None


def distribution_of(module: str) -> str | None:
    """The distribution (PEP 503 name) that provides a top-level module: the installed one where
    there is one, else the table's, else None."""
    global _installed
    if _installed is None:
        _installed = importlib.metadata.packages_distributions()
    candidates = sorted({normalize(d) for d in _installed.get(module, [])})
    known = KNOWN_DISTRIBUTIONS.get(module)
    if known is not None and (not candidates or normalize(known) in candidates):
        return normalize(known)
    return candidates[0] if candidates else None


def _requirements(package_dir: Path) -> list[str]:
    """The project's requirements as Requires-Dist lines (`name...; extra == "x"`): from the
    pyproject.toml of a source checkout, else from the installed distribution's metadata."""
    pyproject = package_dir.parent / "pyproject.toml"
    if pyproject.is_file():
        project = tomllib.loads(pyproject.read_text(encoding="utf-8")).get("project", {})
        extras = project.get("optional-dependencies", {})
        return [*project.get("dependencies", [])] + [
            f'{r}; extra == "{extra}"' for extra, reqs in extras.items() for r in reqs
        ]
    try:
        return importlib.metadata.requires(package_dir.name) or []
    except importlib.metadata.PackageNotFoundError:
        return []


def extras_of(package_dir: Path = PACKAGE_DIR) -> dict[str, tuple[str, ...]]:
    """Distribution (PEP 503 name) → the extras that install it, for each distribution that only
    an extra installs; the `test` extra is named only where no other one holds it."""
    core, extras = set(), {}
    for line in _requirements(package_dir):
        name = normalize(re.match(r"[A-Za-z0-9._-]+", line.strip()).group(0))
        extra = re.search(r"extra\s*==\s*[\"']([^\"']+)", line)
        if extra is None:
            core.add(name)
        else:
            extras.setdefault(name, []).append(extra.group(1))
    return {
        name: tuple([e for e in found if e != "test"] or found)
        for name, found in extras.items()
        if name not in core
    }


def third_party_modules(package_dir: Path = PACKAGE_DIR) -> dict[str, Module]:
    """Each third-party top-level module with the files that import it, whether it is optional
    (every import guarded, or only an extra installs it) and its distribution."""
    by_module: dict[str, list[Site]] = {}
    for site in import_sites(package_dir):
        by_module.setdefault(site.module, []).append(site)
    extras = extras_of(package_dir)
    modules = {}
    for name, sites in sorted(by_module.items(), key=lambda kv: kv[0].lower()):
        distribution = distribution_of(name)
        extra = " or ".join(extras.get(distribution or "", ()))
        modules[name] = Module(
            name,
            tuple(sorted({s.file for s in sites})),
            bool(extra) or all(s.guarded for s in sites),
            distribution,
            extra,
        )
    return modules


def install_hint(extra: str) -> str:
    """Where a missing module comes from: its extra, as the README installs the project."""
    first = extra.split(" or ")[0]
    return f"extra {extra}: pip install -e '.[{first}]'" if extra else ""


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}".rstrip(": ")


def check(modules: dict[str, Module]) -> list[dict]:
    """Imports each module in this process; one result per module."""
    results = []
    for module in modules.values():
        result = {
            "module": module.name,
            "distribution": module.distribution,
            "optional": module.optional,
            "extra": module.extra,
            "files": list(module.files),
            "ok": False,
            "version": None,
            "location": None,
            "error": None,
        }
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                imported = importlib.import_module(module.name)
        except Exception as e:  # noqa: BLE001 - a broken install raises anything, not just ImportError
            result["error"] = _first_line(e)
        else:
            result["ok"] = True
            location = getattr(imported, "__file__", None)
            if location is None and getattr(imported, "__path__", None):
                location = list(imported.__path__)[0]  # a namespace package
            result["location"] = location
            if module.distribution:
                with contextlib.suppress(importlib.metadata.PackageNotFoundError):
                    result["version"] = importlib.metadata.version(module.distribution)
        results.append(result)
    return results


def _line(r: dict) -> str:
    name = r["module"] + (" (optional)" if r["optional"] else "")
    dist = r["distribution"] or "?"
    if r["ok"]:
        dist += f" {r['version']}" if r["version"] else ""
        return f"ok       {name:<30} {dist:<32} {r['location']}"
    status = "missing" if r["optional"] else "MISSING"
    hint = f" ({install_hint(r['extra'])})" if r.get("extra") else ""
    return (
        f"{status:<8} {name:<30} {dist:<32} {r['error']}{hint}; imported by {', '.join(r['files'])}"
    )


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit 2, as the repository's commands do
        self.exit(2, f"third_party: error: {message}\n")


def main(argv: list[str] | None = None) -> int:
    parser = _Parser(prog="python3 -m hpcai_jax.third_party", description=__doc__.split("\n")[0])
    parser.add_argument("--json", action="store_true", help="one JSON object instead of lines")
    try:
        as_json = parser.parse_args(sys.argv[1:] if argv is None else argv).json
    except SystemExit as e:
        return int(e.code or 0)
    results = check(third_party_modules())
    missing = [r["module"] for r in results if not r["ok"] and not r["optional"]]
    optional_missing = [r["module"] for r in results if not r["ok"] and r["optional"]]
    if as_json:
        summary = {"modules": results, "missing": missing, "optional_missing": optional_missing}
        print(json.dumps(summary, indent=1))
    else:
        for r in results:
            print(_line(r))
        ok = sum(r["ok"] for r in results)
        line = f"third_party: {len(results)} modules, {ok} import"
        if missing:
            line += f"; MISSING (required): {', '.join(missing)}"
        if optional_missing:
            line += f"; missing (optional): {', '.join(optional_missing)}"
        print(line)
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
