"""Each package's docstring names only modules that exist: a module named `x.py` is in the
package (or, with a folder, `pkg/x.py` from the package root), so a description cannot outlive
the code it describes (the models' once named an `ensemble.py` that no longer existed)."""

from __future__ import annotations

import ast
import re

from helpers import ROOT

PACKAGE = ROOT / "hpcai_jax"
NAMED = re.compile(r"(?<![\w/.])((?:[a-z_]+/)*[a-z_]+\.py)\b")


def _named(init) -> list[str]:
    doc = ast.get_docstring(ast.parse(init.read_text())) or ""
    return NAMED.findall(doc)


def test_every_module_a_package_docstring_names_exists():
    missing = []
    for init in sorted(PACKAGE.glob("*/__init__.py")):
        for name in _named(init):
            here, root = init.parent / name, PACKAGE / name
            if not (here.is_file() or root.is_file() or (ROOT / name).is_file()):
                missing.append(f"{init.relative_to(ROOT)}: {name}")
    assert not missing, missing


def test_the_check_sees_a_stale_name(tmp_path):
    init = tmp_path / "__init__.py"
    init.write_text(
        '"""Models; the ensemble transform (ensemble.py) stacks them; see data/pipeline.py."""\n'
    )
    assert _named(init) == ["ensemble.py", "data/pipeline.py"]
