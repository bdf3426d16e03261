"""Builds a wheelhouse for an offline node: only what its image lacks, for another Python.

Shipping a vendor image's whole closure would be gigabytes, and pip's own resolver cannot be told
"these are installed over there", so the closure is walked here against the node's have-list.
How the walk works, and how to run it (through wheelhouse.sh): `docs/offline_install.md`. Exit 0
built, 1 the build failed, 2 bad arguments (one line on stderr).
"""

from __future__ import annotations

import datetime
import email.parser
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

try:
    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.specifiers import SpecifierSet
    from packaging.tags import Tag, compatible_tags, cpython_tags
    from packaging.utils import canonicalize_name, parse_wheel_filename
    from packaging.version import Version
except ImportError:  # a build machine with pip but without packaging: pip carries a copy
    from pip._vendor.packaging.requirements import InvalidRequirement, Requirement
    from pip._vendor.packaging.specifiers import SpecifierSet
    from pip._vendor.packaging.tags import Tag, compatible_tags, cpython_tags
    from pip._vendor.packaging.utils import canonicalize_name, parse_wheel_filename
    from pip._vendor.packaging.version import Version

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
PYPROJECT = REPO / "pyproject.toml"
DEFAULT_HAVE = HERE / "vendor_image.txt"
TOOL = "hpcai_jax benchmarks/accelerator/wheelhouse.py"
MANIFEST = "wheelhouse.json"
# The node runs the tests, --mllog and the COCO cross-check: the test extra (pytest, its
# workers, mlperf-logging's checker, yaml, pycocotools), mllog and coco.
DEFAULT_EXTRAS = ("test", "mllog", "coco")
# Developer-only tools dropped from every extra: ruff is CI's formatting gate, not needed to run
# anything on a node (and ~12 MiB).
DEVELOPER_ONLY = {"ruff"}
# The newest glibc of the targets we meet (Ubuntu 24.04's 2.39); --platform=manylinux_2_NN_ARCH
# lowers it for an older image.
DEFAULT_GLIBC_MINOR = 39
SIZE_AIM = 40 * 2**20
ROOT = "hpcai_jax"


class UsageError(Exception):
    """A bad argument: one line on stderr, exit 2."""


class BuildError(Exception):
    """The wheelhouse cannot be built: one message, exit 1."""


class Reselect(Exception):
    """A chosen version fails a specifier found later: choose again under the intersection."""

    def __init__(self, name: str, spec: SpecifierSet):
        super().__init__(name)
        self.name, self.spec = name, spec


@dataclass(frozen=True)
class Target:
    """The interpreter and platform the wheels are for, and its environment markers."""

    python: tuple[int, int]
    full_version: str
    machine: str
    glibc_minor: int

    @property
    def cp(self) -> str:
        return f"cp{self.python[0]}{self.python[1]}"

    @property
    def platforms(self) -> list[str]:
        """Newest first, as pip ranks a real machine's tags; the legacy aliases beside theirs."""
        legacy = {17: "manylinux2014", 12: "manylinux2010", 5: "manylinux1"}
        out = []
        for minor in range(self.glibc_minor, 4, -1):
            out.append(f"manylinux_2_{minor}_{self.machine}")
            if minor in legacy and (self.machine == "x86_64" or minor == 17):
                out.append(f"{legacy[minor]}_{self.machine}")
        return out

    def supported_tags(self) -> set[Tag]:
        plats = self.platforms
        return set(cpython_tags(self.python, platforms=plats)) | set(
            compatible_tags(self.python, self.cp, platforms=plats)
        )

    def markers(self) -> dict[str, str]:
        return {
            "python_version": f"{self.python[0]}.{self.python[1]}",
            "python_full_version": self.full_version,
            "implementation_name": "cpython",
            "implementation_version": self.full_version,
            "platform_python_implementation": "CPython",
            "sys_platform": "linux",
            "platform_system": "Linux",
            "platform_machine": self.machine,
            "os_name": "posix",
            "platform_release": "",
            "platform_version": "",
            "extra": "",
        }

    def pip_options(self) -> list[str]:
        opts = ["--python-version", self.full_version, "--implementation", "cp"]
        opts += ["--abi", self.cp]
        for plat in self.platforms:
            opts += ["--platform", plat]
        return opts

    def describe(self) -> dict:
        return {
            "python": f"{self.python[0]}.{self.python[1]}",
            "python_full_version": self.full_version,
            "implementation": "cp",
            "abi": self.cp,
            "machine": self.machine,
            "platforms": self.platforms,
        }

    def is_this_machine(self) -> bool:
        return sys.version_info[:2] == self.python and os.uname().machine == self.machine


@dataclass
class Dist:
    """One chosen wheel in the staging folder, with what its metadata requires."""

    name: str
    version: Version
    path: Path
    requires: list[str]
    requires_python: str | None
    built_from_sdist: bool


@dataclass
class Node:
    """A package being walked: the intersection of its specifiers, the extras asked of it, who
    asked, and the chosen wheel."""

    name: str
    spec: SpecifierSet
    extras: set[str] = field(default_factory=set)
    walked_extras: set[str] | None = None
    by: list[tuple[str, str]] = field(default_factory=list)
    dist: Dist | None = None


# -- arguments ---------------------------------------------------------------------------


@dataclass
class Options:
    out: Path
    target: Target
    have_file: Path
    extras: tuple[str, ...]


def parse_args(argv: list[str], extras_known: set[str]) -> Options:
    out = None
    python, platform, have, extras = "3.12", "manylinux_x86_64", str(DEFAULT_HAVE), None
    for arg in argv:
        key, eq, value = arg.partition("=")
        if key == "--python" and eq:
            python = value
        elif key == "--platform" and eq:
            platform = value
        elif key == "--have" and eq:
            have = value
        elif key == "--extras" and eq:
            extras = value
        elif arg.startswith("-"):
            raise UsageError(
                f"unknown option {arg} (expected --python=X.Y, --platform=manylinux_x86_64, "
                "--have=FILE, --extras=NAME,...)"
            )
        elif out is not None:
            raise UsageError(f"one OUT_DIR expected, got {out} and {arg}")
        else:
            out = arg
    if not out:
        raise UsageError(
            "no OUT_DIR: usage: wheelhouse.sh OUT_DIR [--python=3.12] "
            "[--platform=manylinux_x86_64] [--have=FILE] [--extras=test,mllog,coco]"
        )
    m = re.fullmatch(r"3\.(\d+)(?:\.(\d+))?", python)
    if not m:
        raise UsageError(f"--python={python}: expected a CPython 3 version X.Y or X.Y.Z, e.g. 3.12")
    minor = int(m.group(1))
    full = f"3.{minor}.{m.group(2) or 0}"
    p = re.fullmatch(r"manylinux(?:_2_(\d+))?_(x86_64|aarch64)", platform)
    if not p:
        raise UsageError(
            f"--platform={platform}: expected manylinux_x86_64, manylinux_aarch64 or "
            "manylinux_2_NN_ARCH (glibc 2.NN at most)"
        )
    glibc = int(p.group(1)) if p.group(1) else DEFAULT_GLIBC_MINOR
    if glibc < 17:
        raise UsageError(f"--platform={platform}: expected glibc 2.17 or newer")
    have_file = Path(have)
    if not have_file.is_file():
        raise UsageError(f"--have={have}: no such file (expected pip freeze output or names)")
    if extras is None:
        chosen = DEFAULT_EXTRAS
    else:
        chosen = tuple(e.strip() for e in extras.split(",") if e.strip())
        unknown = [e for e in chosen if e not in extras_known]
        if unknown:
            raise UsageError(
                f"--extras={extras}: {', '.join(unknown)} not an extra of pyproject.toml "
                f"(expected some of {', '.join(sorted(extras_known))}, or empty for none)"
            )
    return Options(Path(out), Target((3, minor), full, p.group(2), glibc), have_file, chosen)


def read_have(path: Path) -> dict[str, str | None]:
    """Names (PEP 503) to the version installed, from `pip freeze`, `pip list --format=freeze` or
    bare names; `#` comments and pip options are skipped."""
    have: dict[str, str | None] = {}
    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        line = raw.split(" #")[0].strip() if not raw.lstrip().startswith("#") else ""
        if not line:
            continue
        if line.startswith("-"):  # -e URL#egg=NAME, --index-url ...
            egg = re.search(r"[#&]egg=([A-Za-z0-9._-]+)", line)
            if egg:
                have[canonicalize_name(egg.group(1))] = None
            continue
        try:
            req = Requirement(line)
        except InvalidRequirement:
            raise UsageError(
                f"--have={path}:{number}: expected a distribution name or name==version, "
                f"got {raw.strip()!r}"
            ) from None
        pinned = [s.version for s in req.specifier if s.operator in ("==", "===")]
        have[canonicalize_name(req.name)] = pinned[0] if pinned else None
    return have


# -- fetching ------------------------------------------------------------------------------


def _metadata(wheel: Path) -> tuple[list[str], str | None]:
    try:
        with zipfile.ZipFile(wheel) as z:
            name = next(
                n for n in z.namelist() if n.count("/") == 1 and n.endswith(".dist-info/METADATA")
            )
            msg = email.parser.Parser().parsestr(z.read(name).decode("utf-8"))
    except (zipfile.BadZipFile, StopIteration, UnicodeDecodeError) as e:
        raise BuildError(f"{wheel.name}: unreadable wheel metadata ({e!r})") from None
    return msg.get_all("Requires-Dist") or [], msg.get("Requires-Python")


def _pip(args: list[str]) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "pip", *args, "--disable-pip-version-check", "--no-input"]
    # pip's own deprecation warnings are not ours to fail on (a test run sets them to errors).
    env = {k: v for k, v in os.environ.items() if k != "PYTHONWARNINGS"}
    return subprocess.run(cmd, capture_output=True, text=True, env=env)


def _tail(proc: subprocess.CompletedProcess, lines: int = 6) -> str:
    text = [
        line
        for line in (proc.stderr + proc.stdout).splitlines()
        if line.strip() and not line.startswith("WARNING: Location")
    ]
    return "\n  ".join(text[-lines:])


class Fetcher:
    """Chooses and downloads wheels for the target into a staging folder, remembering each
    (name, specifier) asked so that a restarted walk downloads nothing again."""

    def __init__(self, target: Target, staging: Path):
        self.target = target
        self.staging = staging
        self.cache: dict[tuple[str, str], Dist] = {}
        self.calls = 0

    def _new_dir(self) -> Path:
        self.calls += 1
        d = self.staging / f"call{self.calls}"
        d.mkdir()
        return d

    def _dist(self, wheel: Path, from_sdist: bool) -> Dist:
        name, version, _, _ = parse_wheel_filename(wheel.name)
        requires, requires_python = _metadata(wheel)
        return Dist(str(name), version, wheel, requires, requires_python, from_sdist)

    def fetch(self, wanted: dict[str, SpecifierSet], metadata_only=frozenset()) -> dict[str, Dist]:
        """The wheel pip chooses for each name under its specifier: one pip call for them all;
        a name pip finds no wheel for is built from its source (an error for those wanted only
        for their metadata), and the rest asked again."""
        todo = {n: s for n, s in wanted.items() if (n, str(s)) not in self.cache}
        while todo:
            d = self._new_dir()
            specs = [f"{name}{spec}" for name, spec in todo.items()]
            proc = _pip(
                ["download", "--no-deps", "--only-binary=:all:", *self.target.pip_options()]
                + ["-d", str(d), *specs]
            )
            if proc.returncode == 0:
                for wheel in d.glob("*.whl"):
                    dist = self._dist(wheel, False)
                    if dist.name in todo:
                        self.cache[(dist.name, str(todo[dist.name]))] = dist
                missed = [n for n, s in todo.items() if (n, str(s)) not in self.cache]
                if missed:
                    raise BuildError(f"pip download gave no wheel for {', '.join(missed)}")
                break
            # pip stops at the first requirement it finds nothing for; others may follow.
            unmet = {
                canonicalize_name(re.split(r"[\s<>=!~;\[(]", m)[0])
                for m in re.findall(r"No matching distribution found for (\S+)", proc.stderr)
            } & set(todo)
            if not unmet:
                raise BuildError(f"pip download {' '.join(specs)} failed:\n  {_tail(proc)}")
            for name in sorted(unmet):
                spec = todo.pop(name)
                if name in metadata_only:
                    raise BuildError(f"no wheel of {name}{spec} for {self.target.cp}")
                self.cache[(name, str(spec))] = self._build_from_source(name, spec)
        return {n: self.cache[(n, str(s))] for n, s in wanted.items()}

    def _build_from_source(self, name: str, spec: SpecifierSet) -> Dist:
        """A requirement with no wheel for the target: pip downloads its sdist and builds it (pip's
        wheel cache keeps the build, so a second wheelhouse does not build again)."""
        d = self._new_dir()
        print(f"  {name}{spec}: no wheel for {self.target.cp}; building its source distribution")
        proc = _pip(
            ["wheel", "--no-deps", f"--no-binary={name}", "--ignore-requires-python"]
            + ["-w", str(d), f"{name}{spec}"]
        )
        wheels = list(d.glob("*.whl"))
        if proc.returncode != 0 or len(wheels) != 1:
            raise BuildError(
                f"{name}{spec}: no wheel for {self.target.cp} {self.target.machine}, and building "
                f"its source distribution failed:\n  {_tail(proc)}"
            )
        wheel = wheels[0]
        tags = parse_wheel_filename(wheel.name)[3]
        pure = all(t.abi == "none" and t.platform == "any" for t in tags)
        if not pure and not self.target.is_this_machine():
            raise BuildError(
                f"{name}: only a source distribution fits {self.target.cp}, and it compiles "
                f"({wheel.name}): build it on a {self.target.cp} {self.target.machine} machine "
                "or add it to the image"
            )
        return self._dist(wheel, True)


# -- the walk ------------------------------------------------------------------------------


def project_requirements(pyproject: dict, extras: tuple[str, ...]) -> tuple[list, list[str]]:
    """(requirement, who asks) for the dependencies and the chosen extras; and the developer-only
    requirements left out."""
    project = pyproject["project"]
    roots = [(Requirement(r), ROOT) for r in project.get("dependencies", [])]
    skipped = []
    for extra in extras:
        for r in project.get("optional-dependencies", {})[extra]:
            req = Requirement(r)
            if canonicalize_name(req.name) in DEVELOPER_ONLY:
                skipped.append(f"{r} ({ROOT}[{extra}])")
            else:
                roots.append((req, f"{ROOT}[{extra}]"))
    return roots, skipped


def _applies(req: Requirement, env: dict, extras: set[str]) -> bool:
    if req.marker is None:
        return True
    return any(req.marker.evaluate({**env, "extra": e}) for e in {"", *extras})


def _extra_only(req: Requirement, env: dict, extras: set[str]) -> bool:
    """A requirement that only the given extras bring (not one of the package's base ones)."""
    if req.marker is None or req.marker.evaluate({**env, "extra": ""}):
        return False
    return any(req.marker.evaluate({**env, "extra": e}) for e in extras)


@dataclass
class Walk:
    nodes: dict[str, Node]
    trusted: dict[str, dict]
    warnings: list[str]


def walk(
    roots: list[tuple[Requirement, str]],
    have: dict[str, str | None],
    target: Target,
    fetcher: Fetcher,
    learned: dict[str, SpecifierSet],
) -> Walk:
    """One walk of the closure, level by level (one pip call per level where it can)."""
    env = target.markers()
    nodes: dict[str, Node] = {}
    trusted: dict[str, dict] = {}
    warnings: list[str] = []
    pending = [(r, by) for r, by in roots if _applies(r, env, set())]
    while pending:
        expand: list[Node] = []
        to_fetch: dict[str, Node] = {}
        have_extras: dict[str, set[str]] = {}
        for req, by in pending:
            name = canonicalize_name(req.name)
            if name in have:
                t = trusted.setdefault(
                    name, {"have_version": have[name], "by": [], "extras": set(), "walked": set()}
                )
                if (by, str(req)) not in t["by"]:
                    t["by"].append((by, str(req)))
                t["extras"] |= set(req.extras)
                v = have[name]
                if v is not None and not req.specifier.contains(v, prereleases=True):
                    warnings.append(
                        f"the have-list's {name} {v} does not satisfy {req} (from {by}): "
                        "trusted anyway"
                    )
                if t["extras"] - t["walked"]:
                    have_extras[name] = t["extras"] - t["walked"]
                continue
            node = nodes.get(name)
            if node is None:
                node = nodes[name] = Node(name, SpecifierSet(str(learned.get(name, ""))))
            node.spec &= req.specifier
            node.extras |= set(req.extras)
            if (by, str(req)) not in node.by:
                node.by.append((by, str(req)))
            if node.dist is None:
                to_fetch[name] = node
            elif not node.spec.contains(node.dist.version, prereleases=True):
                raise Reselect(name, node.spec)
            elif node.walked_extras is not None and node.extras - node.walked_extras:
                expand.append(node)
        # One pip call for the level: the new packages, and the metadata of trusted ones asked
        # for extras (the have-list's version where it names one), to walk what only those
        # extras bring.
        wanted = {name: node.spec for name, node in to_fetch.items()}
        metas = {n: SpecifierSet(f"=={have[n]}" if have[n] else "") for n in have_extras}
        try:
            got = fetcher.fetch(wanted | metas, metadata_only=frozenset(metas))
        except BuildError:
            if not metas:
                raise
            got = fetcher.fetch(wanted)
            for name, spec in metas.items():  # best effort: the have-list vouches for them
                try:
                    got |= fetcher.fetch({name: spec}, metadata_only=frozenset(metas))
                except BuildError as e:
                    warnings.append(f"{name}'s extras not walked (no metadata: {e})")
                    trusted[name]["walked"] |= have_extras.pop(name)
        for name, node in to_fetch.items():
            node.dist = got[name]
            print(f"  + {name} {node.dist.version}   <- {node.by[0][0]}: {node.by[0][1]}")
            expand.append(node)
        pending = []
        for node in expand:
            node.walked_extras = set(node.extras)
            for r in node.dist.requires:
                req = Requirement(r)
                if _applies(req, env, node.extras):
                    pending.append((req, node.name))
        for name, extras in sorted(have_extras.items()):
            trusted[name]["walked"] |= extras
            by = f"{name}[{','.join(sorted(trusted[name]['extras']))}] (have-list)"
            for r in got[name].requires:
                req = Requirement(r)
                if _extra_only(req, env, extras):
                    pending.append((req, by))
    return Walk(nodes, trusted, warnings)


def resolve(roots, have, target, fetcher) -> Walk:
    """Walks until every chosen version satisfies every specifier met on the way."""
    learned: dict[str, SpecifierSet] = {}
    for _ in range(30):
        try:
            return walk(roots, have, target, fetcher, learned)
        except Reselect as r:
            print(f"  ~ {r.name}: chosen again under {r.spec}; walking again")
            if str(learned.get(r.name)) == str(r.spec):
                raise BuildError(f"{r.name}: no version satisfies {r.spec}") from None
            learned[r.name] = r.spec
    raise BuildError("no consistent set of versions after 30 walks")


# -- checking and writing --------------------------------------------------------------------


def check_wheels(nodes: dict[str, Node], target: Target) -> None:
    """Every wheel installs on the target: a tag it supports, and its Requires-Python."""
    supported = target.supported_tags()
    if target.is_this_machine():  # a wheel compiled here for here
        supported |= set(cpython_tags(target.python, platforms=[f"linux_{target.machine}"]))
    bad = []
    for node in nodes.values():
        dist = node.dist
        tags = parse_wheel_filename(dist.path.name)[3]
        if not tags & supported:
            bad.append(f"{dist.path.name} (tags {', '.join(sorted(map(str, tags)))})")
        elif dist.requires_python and not SpecifierSet(dist.requires_python).contains(
            target.full_version, prereleases=True
        ):
            bad.append(f"{dist.path.name} (Requires-Python {dist.requires_python})")
    if bad:
        raise BuildError(
            f"not installable on {target.cp} {target.platforms[0]}: " + "; ".join(sorted(bad))
        )


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def prepare_out(out: Path) -> list[Path]:
    """The files of an earlier wheelhouse of ours to replace; refuses a directory holding
    anything else that would be installed or overwritten (user files are never deleted)."""
    if out.exists() and not out.is_dir():
        raise UsageError(f"OUT_DIR {out}: exists and is not a directory")
    if not out.exists() or not any(out.iterdir()):
        return []
    manifest = out / MANIFEST
    try:
        old = json.loads(manifest.read_text(encoding="utf-8"))
        ours = old.get("tool") == TOOL
    except (OSError, ValueError, AttributeError):
        ours = False
    if not ours:
        raise UsageError(
            f"OUT_DIR {out}: not empty and not a wheelhouse of ours (no {MANIFEST} written by "
            "wheelhouse.sh); expected a new or empty directory"
        )
    listed = {w["file"] for w in old.get("wheels", [])}
    strays = sorted(p.name for p in out.glob("*.whl") if p.name not in listed)
    if strays:
        raise UsageError(
            f"OUT_DIR {out}: holds wheels its {MANIFEST} does not list ({', '.join(strays)}); "
            "expected a wheelhouse of ours, unchanged"
        )
    return [out / name for name in listed if (out / name).exists()] + [manifest]


def build(opts: Options, pyproject: dict) -> dict:
    replace = prepare_out(opts.out)
    have = read_have(opts.have_file)
    roots, skipped = project_requirements(pyproject, opts.extras)
    target = opts.target
    print(
        f"wheelhouse: for {target.cp} {target.machine} (glibc <= 2.{target.glibc_minor}), "
        f"extras {','.join(opts.extras) or '(none)'}, have-list {opts.have_file} "
        f"({len(have)} names)"
    )
    for s in skipped:
        print(f"  - {s}: developer-only, left out")
    with tempfile.TemporaryDirectory(prefix="wheelhouse-") as tmp:
        fetcher = Fetcher(target, Path(tmp))
        result = resolve(roots, have, target, fetcher)
        check_wheels(result.nodes, target)
        opts.out.mkdir(parents=True, exist_ok=True)
        for path in replace:
            path.unlink()
        wheels = []
        for name in sorted(result.nodes):
            node = result.nodes[name]
            dest = opts.out / node.dist.path.name
            shutil.copyfile(node.dist.path, dest)
            wheels.append(
                {
                    "file": dest.name,
                    "name": name,
                    "version": str(node.dist.version),
                    "size": dest.stat().st_size,
                    "sha256": _sha256(dest),
                    "built_from_sdist": node.dist.built_from_sdist,
                    "required_by": [{"by": by, "requirement": r} for by, r in node.by],
                }
            )
    manifest = {
        "tool": TOOL,
        "format": 1,
        "built_utc": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "target": target.describe(),
        "have": {"source": str(opts.have_file.resolve()), "names": len(have)},
        "pyproject": str(PYPROJECT),
        "extras": list(opts.extras),
        "left_out_developer_only": skipped,
        "wheels": wheels,
        "trusted": [
            {
                "name": name,
                "have_version": t["have_version"],
                "extras": sorted(t["extras"]),
                "required_by": [{"by": by, "requirement": r} for by, r in t["by"]],
            }
            for name, t in sorted(result.trusted.items())
        ],
        "warnings": result.warnings,
        "total_size": sum(w["size"] for w in wheels),
    }
    (opts.out / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")
    return manifest


def report(manifest: dict, out: Path) -> None:
    print(f"wheelhouse: {out} ({len(manifest['wheels'])} wheels)")
    for w in manifest["wheels"]:
        built = "  (built from its sdist)" if w["built_from_sdist"] else ""
        print(f"  {w['size'] / 2**20:8.2f} MiB  {w['file']}{built}")
    total = manifest["total_size"]
    aim = "within" if total <= SIZE_AIM else "OVER"
    print(f"  {total / 2**20:8.2f} MiB  total ({aim} the 40 MiB aim)")
    for w in manifest["warnings"]:
        print(f"wheelhouse: warning: {w}")
    print(f"wheelhouse: wrote {out / MANIFEST}")


def main(argv: list[str]) -> int:
    prog = "wheelhouse.sh"
    try:
        pyproject = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))
        opts = parse_args(argv, set(pyproject["project"].get("optional-dependencies", {})))
        manifest = build(opts, pyproject)
    except UsageError as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return 2
    except BuildError as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return 1
    report(manifest, opts.out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
