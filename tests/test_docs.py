"""The docs name only files and flags that exist, and never the workspace's `shared/` folder.

Scanned: README.md, BUILD_NOTES.md, launch/README.md, benchmarks/README.md and every .md under
docs/. In each, the code is checked: inline `spans`, fenced ``` blocks and blocks indented by
four spaces (a line ending in a backslash continues on the next). Code is split into tokens as a
shell would (plain white space where quotes do not pair); of `NAME=value` and `--flag=value`
tokens the value is a token too.

Paths. A token (a leading `(` and trailing `.,:;)` dropped, and a `:line` suffix) is a path when
it contains `/` or ends in one of EXTENSIONS and holds only path characters (letters, digits,
`_-./*{},`). Not checked: absolute paths, URLs and `~` paths (not in the repository), a
first component in capitals (a placeholder: `DIR/downloads`), folders that runs create
(RUN_OUTPUTS: `results/...`), and the few other projects' paths in FOREIGN_PATHS. Every other
path must exist, relative to the repository root or to `hpcai_jax/` (the docs abbreviate the
package's modules: `engine/step.py`), and never through `..`; a bare file name (no `/`) must be
the name of some file of the repository, a bare `folder/` a folder of the root or the package; `*` must match a file and `{a,b}` expands; `dir/module.name` (a module and
one of its names, `run/trainer.run_train`) needs `dir/module.py` to define `name`. Markdown
link and image targets that are not URLs must exist next to the doc.

Flags. A `--flag` in code belongs to the program before it: after `hpcai_jax.main` (also
`launch/tpu_pod.sh run`) it must be a flag of hpcai_jax.main: the config fields' flags,
derived here from hpcai_jax/config.py by flags.py's rule (the field's name, or the `flag=`
given to `config._field` or `fields.setting`; statically, so that this
test does not import JAX), and absl's own (ABSL_FLAGS); after another program of this
repository (`python benchmarks/x.py`, `python launch/local.py`, `python -m hpcai_jax.sweep`,
`bash benchmarks/device_check.sh`, ...) it must be one that script defines (argparse's
`add_argument("--x"`, or a shell `case` label `--x)`), or `--help`. After another tool's
command (FOREIGN_COMMANDS: sbatch, srun, apptainer, gcloud, cmake, ...) flags are that tool's
and not checked. A flag with no program before it (prose such as `--dtype=float16`, an error
message, a value such as `EXTRA_FLAGS="--seed=1"`) must be a flag of hpcai_jax.main or of
any program of the repository, an XLA flag (`--xla_...`), or one of FOREIGN_FLAGS.

Shared. No doc may cite `shared/` or `../shared`: that folder is the workspace's, not the
repository's, and does not ship.
"""

from __future__ import annotations

import ast
import functools
import glob
import itertools
import os
import re
import shlex
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "hpcai_jax"
DOCS = [
    ROOT / "README.md",
    ROOT / "BUILD_NOTES.md",
    ROOT / "launch" / "README.md",
    ROOT / "benchmarks" / "README.md",
    *sorted((ROOT / "docs").rglob("*.md")),
]
EXTENSIONS = (".py", ".md", ".flags", ".sh", ".sbatch", ".yaml", ".toml", ".json", ".def", ".png")
# Folders that runs, tools and the install steps create; the docs show paths under them.
RUN_OUTPUTS = ("results", "logs", "checkpoints", "report", ".venv", ".cache")
# Other projects' paths the docs cite, and names that look like paths but are no repository file.
FOREIGN_PATHS = {
    "UoB-HPC/BabelStream",  # BabelStream's repository
    "BabelStream/build/omp-stream",  # a BabelStream build
    "mlcommons/training",  # MLPerf's repository
    "image_classification/tensorflow2/lars_util.py",  # a file in it
    "qwix/_src/providers/qt.py",  # a file of the qwix package
    "hpcai_jax/.venv",  # the virtual environment launch/tpu_pod.sh makes on TPU workers
    "Dense_0/bias",  # a parameter's path in an error message
    "MBytes/sec",  # BabelStream's column heading
    "stats.json",  # written by the ExtremeWeather converter next to the data
    "pairs.json",  # an output file named on a command line
    "system.json",  # written by `python -m hpcai_jax.submission pack` into a package
    "phases.json",  # written by a --profile_steps run into its trace directory
    "resnet50-m8.json",  # a packed record in docs/submission.md's example failure line
}
# Commands of other tools: the flags after them are theirs.
FOREIGN_COMMANDS = {
    "#SBATCH",
    "apptainer",
    "apt-get",
    "cd",
    "chromium",
    "cmake",
    "cuda-stream",
    "gcloud",
    "git",
    "ld.so",
    "mkdir",
    "nvcc",
    "nvidia-smi",
    "omp-stream",
    "pip",
    "ruff",
    "sbatch",
    "scontrol",
    "srun",
    "sudo",
    "tensorboard",
    "tfds",
}
# Other tools' flags the docs name on their own, by tool.
FOREIGN_FLAGS = {
    "shm-size": "docker",
    "ipc": "docker",
    "gpus-per-node": "sbatch",
    "gpus-per-task": "sbatch",
    "ntasks-per-node": "sbatch",
    "open-mode": "sbatch",
    "signal": "sbatch",
    "requeue": "sbatch",
    "nv": "apptainer",
    "bind": "apptainer",
    "float": "BabelStream",
    "device": "BabelStream",
    "config": "mlperf_logging's compliance checker",
}
# absl's own flags (and its logging's --verbosity), which every absl program (hpcai_jax.main) takes.
ABSL_FLAGS = {"flagfile", "help", "helpfull", "helpshort", "undefok", "verbosity"}
# hpcai_jax.main's own flags that are no setting of a run (hpcai_jax/main.py).
COMMAND_FLAGS = {"dry_run"}
SEPARATORS = {"&&", "||", ";", "|"}
PATH_CHARS = re.compile(r"[\w\-./*{},]+")
FLAG = re.compile(r"(?<![\w-])--([A-Za-z][\w-]*)")
LOOSE, MAIN, FOREIGN = "(none)", "hpcai_jax.main", "(another tool)"


# ---------------------------------------------------------------------------------------------
# The docs' code


def code_of(text: str) -> list[tuple[int, str]]:
    """(line number, piece of code) of a markdown text: block lines, then inline spans (which
    may cross a line break)."""
    pieces, block, prose, fence, previous_blank = [], [], [], False, True
    for number, line in enumerate(text.split("\n"), 1):
        if line.lstrip().startswith("```"):
            fence = not fence
            prose.append("")
            continue
        indented = line.startswith("    ") and (previous_blank or block)
        if fence or (indented and line.strip()):
            block.append((number, line.strip()))
            prose.append("")
        else:
            pieces.extend(_joined(block))
            block = []
            prose.append(line)
        previous_blank = not line.strip()
    pieces.extend(_joined(block))
    prose_text = "\n".join(prose)
    for match in re.finditer(r"(`+)((?:(?!\n[ \t]*\n)[\s\S])+?)\1", prose_text):
        number = prose_text.count("\n", 0, match.start()) + 1
        pieces.append((number, " ".join(match.group(2).split())))
    return sorted(pieces)


def _joined(block: list[tuple[int, str]]) -> list[tuple[int, str]]:
    """Block lines with backslash continuations joined."""
    out, pending = [], None
    for number, line in block:
        if pending is not None:
            number, line = pending[0], pending[1] + " " + line
        if line.endswith("\\"):
            pending = (number, line[:-1].rstrip())
        else:
            out.append((number, line))
            pending = None
    if pending is not None:
        out.append(pending)
    return out


def tokens(code: str) -> list[str]:
    try:
        return shlex.split(code)
    except ValueError:
        return code.split()


@functools.cache
def all_code() -> list[tuple[str, int, str]]:
    """(doc, line, code) of every doc that exists."""
    return [
        (str(doc.relative_to(ROOT)), number, code)
        for doc in DOCS
        if doc.exists()
        for number, code in code_of(doc.read_text(encoding="utf-8"))
    ]


# ---------------------------------------------------------------------------------------------
# Paths


@functools.cache
def repository_files() -> frozenset[Path]:
    skip = {".git", "__pycache__", ".venv", ".pytest_cache", ".ruff_cache"}
    files = set()
    for folder, dirs, names in os.walk(ROOT):
        dirs[:] = [d for d in dirs if d not in skip and not d.endswith(".egg-info")]
        files.update(Path(folder, name).relative_to(ROOT) for name in names)
    return frozenset(files)


@functools.cache
def file_names() -> frozenset[str]:
    return frozenset(path.name for path in repository_files())


def path_candidates(token: str) -> list[str]:
    """The parts of a token that read as repository paths (see the module docstring)."""
    out = []
    for part in re.split(r"=", token) if "=" in token else [token]:
        part = part.lstrip("(").rstrip(".,:;)")
        part = re.sub(r":\d+$", "", part)
        if not part or not PATH_CHARS.fullmatch(part):
            continue
        if "/" not in part and not part.endswith(EXTENSIONS):
            continue
        if part.startswith(("/", "~", "-")) or "..." in part or part.strip("/.") == "":
            continue
        first = part.split("/")[0]
        if first.isupper() or first in RUN_OUTPUTS or part.rstrip("/") in FOREIGN_PATHS:
            continue
        out.append(part)
    return out


def _expanded(path: str) -> list[str]:
    """`a/{b,c}.py` → a/b.py, a/c.py."""
    match = re.search(r"\{([^{}]*)\}", path)
    if not match:
        return [path]
    return [
        expanded
        for choice in match.group(1).split(",")
        for expanded in _expanded(path[: match.start()] + choice + path[match.end() :])
    ]


def _defines(module: Path, name: str) -> bool:
    """Whether a module defines `name` at its top level (def, class or assignment)."""
    pattern = rf"^(?:def|class)\s+{re.escape(name)}\b|^{re.escape(name)}\s*[:=]"
    return re.search(pattern, module.read_text(encoding="utf-8"), re.M) is not None


def _exists_under(base: Path, path: str) -> bool:
    if "*" in path:
        return bool(glob.glob(str(base / path)))
    if (base / path).exists():
        return True
    module, dot, name = path.rpartition(".")  # run/trainer.run_train
    source = base / f"{module}.py"
    return bool(dot) and name.isidentifier() and source.is_file() and _defines(source, name)


def path_exists(path: str) -> bool:
    """The rule of the module docstring for one path the docs name."""
    for candidate in _expanded(path):
        if ".." in Path(candidate).parts:
            return False  # outside the repository
        if "/" in candidate.rstrip("/"):
            found = _exists_under(ROOT, candidate) or _exists_under(PACKAGE, candidate)
        elif candidate.endswith("/"):  # a folder: `engine/`
            found = (ROOT / candidate).is_dir() or (PACKAGE / candidate).is_dir()
        elif "*" in candidate:
            found = any(Path(name).match(candidate) for name in file_names())
        else:  # a bare file name: some file of the repository
            found = candidate in file_names()
        if not found:
            return False
    return True


def missing_paths() -> list[str]:
    problems = []
    for doc, line, code in all_code():
        for token in tokens(code):
            for path in path_candidates(token):
                if not path_exists(path):
                    problems.append(f"{doc}:{line}: `{path}` does not exist")
    return problems


def test_paths_in_the_docs_exist():
    problems = missing_paths()
    assert not problems, "\n".join(problems)


def test_links_in_the_docs_resolve():
    problems = []
    for doc in DOCS:
        if not doc.exists():
            continue
        for match in re.finditer(r"\]\(([^)\s]+)\)", doc.read_text(encoding="utf-8")):
            target = match.group(1).split("#")[0]
            if target and "://" not in target and not (doc.parent / target).exists():
                problems.append(f"{doc.relative_to(ROOT)}: link to {target} does not resolve")
    assert not problems, "\n".join(problems)


def test_docs_never_cite_the_shared_folder():
    cited = re.compile(r"(?<![\w.-])(?:\.\./)*shared/")
    problems = [
        f"{doc.relative_to(ROOT)}:{number}: {line.strip()}"
        for doc in DOCS
        if doc.exists()
        for number, line in enumerate(doc.read_text(encoding="utf-8").split("\n"), 1)
        if cited.search(line)
    ]
    assert not problems, "the shared/ folder does not ship:\n" + "\n".join(problems)


# ---------------------------------------------------------------------------------------------
# Flags


def _main_flags_from_config() -> dict[str, str]:
    """hpcai_jax.main's config flags and their fields' types, read from the source as flags.py
    derives them."""
    # settings.py, and the modules of the parts it composes (a mode's settings live apart).
    modules = (
        "settings.py",
        "config.py",
        "distributed.py",
        "stream/config.py",
        "check_config.py",
    )
    classes = {
        node.name: node
        for module in modules
        for node in ast.parse((PACKAGE / module).read_text(encoding="utf-8")).body
        if isinstance(node, ast.ClassDef)
    }

    def leaves(cls: ast.ClassDef):
        for base in cls.bases:  # a subclass's settings are its bases' and its own
            if isinstance(base, ast.Name) and base.id in classes:
                yield from leaves(classes[base.id])
        for item in cls.body:
            if not (isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)):
                continue
            kind = ast.unparse(item.annotation)
            if kind in classes:
                yield from leaves(classes[kind])
                continue
            name = item.target.id
            if isinstance(item.value, ast.Call):
                for keyword in item.value.keywords:
                    if keyword.arg == "flag":
                        name = keyword.value.value
            yield name, kind

    return dict(leaves(classes["Settings"]))


@functools.cache
def main_flags() -> frozenset[str]:
    declared = _main_flags_from_config()
    negated = {f"no{name}" for name, kind in declared.items() if kind == "bool"}  # absl's --noX
    return frozenset(declared.keys() | negated | ABSL_FLAGS | COMMAND_FLAGS)


def script_flags(path: Path) -> set[str]:
    """The flags a script of this repository defines (argparse, or shell case labels)."""
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".py":
        found = re.findall(r"add_argument\(\s*\"--([\w-]+)\"", text)
        return {*found, "help"} if found else set()
    return set(re.findall(r"^\s*(?:-\w\s*\|\s*)?--([\w-]+)(?:=\*)?\s*\)", text, re.M))


@functools.cache
def programs() -> dict[str, frozenset[str]]:
    """Program (a repository path, or a `-m` module) → the flags it takes."""
    out = {MAIN: main_flags()}
    for relative in repository_files():
        path = ROOT / relative
        if relative.parts[0] == "tests" or path.suffix not in (".py", ".sh"):
            continue
        found = script_flags(path)
        if found:
            out[str(relative)] = frozenset(found)
            if relative.parts[0] == "hpcai_jax":
                module = ".".join(relative.with_suffix("").parts)
                out[module.removesuffix(".__main__")] = frozenset(found)
    # launch/tpu_pod.sh run [FLAG ...] passes hpcai_jax.main's flags on.
    out["launch/tpu_pod.sh"] = out.get("launch/tpu_pod.sh", frozenset()) | main_flags()
    return out


def _program_at(words: list[str], i: int) -> tuple[str | None, int]:
    """The program a command starting at words[i] runs, and the index after its name; None if
    words[i] starts no command."""
    word = words[i]
    if word in FOREIGN_COMMANDS:
        return FOREIGN, i + 1
    if word == "/usr/bin/time" and i + 1 < len(words):
        return _program_at(words, i + 1)
    if re.fullmatch(r"python[\d.]*", word):
        rest = words[i + 1 : i + 3]
        if rest[:1] == ["-m"] and len(rest) == 2:
            module = rest[1]
            return (module if module.startswith("hpcai_jax") else FOREIGN), i + 3
        if rest and rest[0].endswith(".py"):
            return rest[0], i + 2
        return FOREIGN, i + 1
    if word in ("bash", "sh") and i + 1 < len(words):
        return words[i + 1], i + 2
    if word in programs() and "/" in word:
        return word, i + 1
    return None, i


def flags_used(code: str) -> list[tuple[str, str]]:
    """(program, flag) of every flag in a piece of code; program LOOSE when none precedes."""
    words, out, program, i = tokens(code), [], LOOSE, 0
    while i < len(words):
        word = words[i]
        if word in SEPARATORS or (word == "--" and program != FOREIGN):
            program, i = LOOSE, i + 1
            continue
        started, after = _program_at(words, i)
        if started is not None:
            program, i = started, after
            continue
        if re.fullmatch(r"--[A-Za-z][\w-]*(=.*)?", word, re.S):
            out.append((program, FLAG.match(word).group(1)))
            nested = word.partition("=")[2]
        else:
            nested = word
        out.extend((LOOSE, name) for name in FLAG.findall(nested))
        i += 1
    return out


def flag_is_real(program: str, name: str) -> bool:
    if program == FOREIGN:
        return True
    if program == LOOSE:
        return (
            name.startswith("xla_")
            or name in FOREIGN_FLAGS
            or any(name in flags for flags in programs().values())
        )
    return name in programs().get(program, frozenset())


def unknown_flags() -> list[str]:
    return [
        f"{doc}:{line}: `--{name}` is not a flag of {program}"
        + ("" if program != LOOSE else " nor of any program of the repository")
        for doc, line, code in all_code()
        for program, name in flags_used(code)
        if not flag_is_real(program, name)
    ]


def test_flags_in_the_docs_are_real():
    problems = unknown_flags()
    assert not problems, "\n".join(problems)


def test_modules_run_with_dash_m_exist():
    problems = []
    for doc, line, code in all_code():
        words = tokens(code)
        for first, second in itertools.pairwise(words):
            if first == "-m" and second.startswith("hpcai_jax"):
                module = PACKAGE.parent / second.replace(".", "/")
                if not (module.with_suffix(".py").is_file() or (module / "__main__.py").is_file()):
                    problems.append(f"{doc}:{line}: no module {second} to run")
    assert not problems, "\n".join(problems)


def test_static_flag_list_matches_the_flags_module():
    """The flag list above is read from the source; check it against absl's when the suite has
    imported hpcai_jax.flags anyway (this file alone does not, to stay fast: it needs JAX)."""
    if "hpcai_jax.flags" not in sys.modules:
        pytest.skip("hpcai_jax.flags not imported in this session (it imports JAX)")
    flags_module = sys.modules["hpcai_jax.flags"]
    real = {flag.name for flag in flags_module.FLAGS.flags_by_module_dict()["hpcai_jax.flags"]}
    assert set(_main_flags_from_config()) == real


def test_the_checks_catch_what_they_should():
    """Each rule fails on a made-up doc line, so that the tests above cannot pass vacuously."""
    assert path_candidates("`hpcai_jax/run_record.py`".strip("`")) == ["hpcai_jax/run_record.py"]
    assert not path_exists("hpcai_jax/run_record.py")
    assert path_exists("engine/step.py") and path_exists("tests/test_flops_*.py")
    assert path_exists("run/trainer.run_train") and not path_exists("run/trainer.no_such_name")
    assert not path_exists("tests/test_stream_{config,no_such}.py")
    assert path_candidates("--flagfile=configs/quickstart.flags") == ["configs/quickstart.flags"]
    assert path_candidates("results/quickstart.json") == []
    used = flags_used("python -m hpcai_jax.main --no_such_flag --dtype=float16 -- python x.py")
    assert used == [(MAIN, "no_such_flag"), (MAIN, "dtype")]
    assert not flag_is_real(MAIN, "no_such_flag") and flag_is_real(MAIN, "dtype")
    assert not flag_is_real(MAIN, "num_processes_x")
    assert flags_used(
        "python launch/local.py --num_processes=2 -- python -m hpcai_jax.main --seed=1"
    ) == [("launch/local.py", "num_processes"), (MAIN, "seed")]
    assert not flag_is_real("launch/local.py", "seed")
    assert flags_used("srun --kill-on-bad-exit=0") == [(FOREIGN, "kill-on-bad-exit")]
    assert not flag_is_real(LOOSE, "kill-on-bad-exit")
    assert code_of("a `x/y.py` b\n\n    cmd \\\n      --z\n") == [(1, "x/y.py"), (3, "cmd --z")]
