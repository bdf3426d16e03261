"""Every command the documentation gives runs: README.md, docs/ and the --help texts
(tests/examples.py extracts them).

`python -m hpcai_jax.main` commands run in this process under --dry_run (flags parsed and
validated, the mesh resolved on the 8 test devices, the target chosen); a sweep's under its own
--dry_run, then each of its points' main command under --dry_run on the point's devices. The
tools without a dry run have their command lines parsed by their own parsers. A bare
`python -m hpcai_jax.main` prints the one line that names the quickstart.
"""

from __future__ import annotations

import contextlib
import io
import re

import pytest
from examples import Example, documented, extract, placeholder
from helpers import ROOT, run_in_process

from hpcai_jax import dry_run, sweep
from hpcai_jax import flags as hflags
from hpcai_jax import help as main_help
from hpcai_jax.errors import UsageError
from hpcai_jax.main import QUICKSTART
from hpcai_jax.ranking import __main__ as ranking_cli
from hpcai_jax.report import __main__ as report_cli
from hpcai_jax.submission import __main__ as submission_cli

# Inline mentions of a command in a sentence, not meant to run as written: the sentence says
# what the rest of the command line is.
MENTIONS = {
    "python -m hpcai_jax.sweep --experiment=scalability --members_per_device=0",
    "python -m hpcai_jax.report --compare",
    "python -m hpcai_jax.submission check",
}
# Tools without a dry run whose command lines their parsers check.
PARSERS = {
    "hpcai_jax.report": report_cli.parser,
    "hpcai_jax.submission": submission_cli.parser,
    "hpcai_jax.ranking": ranking_cli.parser,
}
# Tools that need what a test machine lacks (a CUDA compiler, a raw data set, a profile).
NOT_RUN = {
    "hpcai_jax.acceptance.babelstream_cuda": "needs nvcc and a GPU",
    "hpcai_jax.report.timeline": "reads a profile a --profile_steps run writes",
    "hpcai_jax.third_party": "imports every third-party package (tests/test_acceptance.py)",
    "hpcai_jax.records.doc": "writes docs/record.md (tests/test_records.py checks it)",
    "hpcai_jax.submission.count": "started by submission check --recount (test_submission.py)",
}


def help_examples() -> list[Example]:
    texts = {
        "main --help": main_help.text(),
        "sweep --help": sweep.parser().format_help(),
        "report --help": report_cli.parser().format_help(),
        "submission --help": submission_cli.parser().format_help(),
        "ranking --help": ranking_cli.parser().format_help(),
    }
    return [e for where, text in texts.items() for e in extract(text, where, markdown=False)]


def examples() -> list[Example]:
    found = [*documented(ROOT), *help_examples()]
    return [e for e in found if not placeholder(e) and _text(e) not in MENTIONS]


def _text(example: Example) -> str:
    return " ".join(["python -m", example.module, *example.args])


def _dry_run_main(args: tuple[str, ...]) -> str:
    """A main command's outcome: '' when it plans cleanly, else what went wrong."""
    result = run_in_process(*args, "--dry_run") if args else run_in_process()
    if not args:
        return "" if result.returncode == 2 and QUICKSTART in result.stderr else result.stderr
    return "" if result.returncode == 0 else f"exit {result.returncode}: {result.stderr}"


def _point_plan(command: str) -> str:
    """One sweep point's main command, planned on the point's own devices."""
    args = command.split(" hpcai_jax.main ", 1)[1].split()
    number = {
        k: int(v)
        for k, v in re.findall(
            r"--(ensemble_size|parallel_degree|members_per_device)=(\d+)", command
        )
    }
    devices = number["ensemble_size"] // number["members_per_device"] * number["parallel_degree"]
    local = re.search(r"--devices_per_process=(\d+)", command)
    hflags.FLAGS.unparse_flags()
    try:
        hflags.FLAGS(["hpcai_jax.main", *args])
        config = hflags.config_from_flags()
        dry_run.plan(config, (devices, int(local.group(1)) if local else devices))
    except Exception as e:  # noqa: BLE001 - the failure is the finding
        return f"{command}: {e}"
    finally:
        hflags.FLAGS.unparse_flags()
    return ""


def _sweep(args: tuple[str, ...]) -> str:
    if "--help" in args:
        return ""
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()) as err:
        code = sweep.main(["--dry_run", *args])  # before the runs' flags (after --)
    if code != 0:
        return f"exit {code}: {err.getvalue()}"
    points = [line for line in out.getvalue().splitlines() if line.startswith("+ ")]
    return "; ".join(filter(None, map(_point_plan, points))) if points else "no point"


def _parsed(example: Example) -> str:
    if "--help" in example.args:
        return ""
    try:
        PARSERS[example.module]().parse_args(list(example.args))
    except UsageError as e:
        return str(e)
    return ""


def outcome(example: Example) -> str:
    """'' when the example runs as documented, else why not."""
    if example.module == "hpcai_jax.main":
        return _dry_run_main(example.args)
    if example.module == "hpcai_jax.sweep":
        return _sweep(example.args)
    if example.module in PARSERS:
        return _parsed(example)
    if example.module in NOT_RUN:
        return ""
    return f"no way to check {example.module}: add it to PARSERS or NOT_RUN"


def test_every_documented_command_runs():
    found = examples()
    failed = [f"{e}: {why}" for e in found if (why := outcome(e))]
    ran = sum(e.module not in NOT_RUN for e in found)
    print(f"{len(found)} documented commands, {ran} run (dry run or parse)")
    assert not failed, "\n".join(failed)
    assert ran >= 35  # the extraction still finds the documentation's commands


def test_the_paper_sweeps_documented_forms_are_among_those_run():
    """docs/paper.md's sweep commands (its full plan, --smoke, --dry_run, --only, the trade-off)
    are run above under --dry_run, each point's main command planned: none is set aside."""
    found = [e for e in examples() if e.where.startswith("docs/paper.md:")]
    sweeps = [e for e in found if e.module == "hpcai_jax.sweep" and "--help" not in e.args]
    used = {a.split("=", 1)[0] for e in sweeps for a in e.args}
    assert {"--experiment", "--smoke", "--dry_run", "--only", "--results_dir"} <= used, used
    assert any("--experiment=tradeoff" in e.args for e in sweeps)


def test_mentions_are_still_in_the_docs():
    """A mention the docs no longer make is a stale exception."""
    found = {_text(e) for e in documented(ROOT)}
    assert found >= MENTIONS, MENTIONS - found


def test_extraction_joins_continuations_and_sets_placeholders_aside():
    text = "intro\n\n    python -m hpcai_jax.main --a=1 \\\n        --b=2  # note\n\n`python -m\nhpcai_jax.report DIR` and `python -m hpcai_jax.sweep --x | tee log`\n"
    found = extract(text, "page.md")
    assert [(e.where, e.module, e.args) for e in found] == [
        ("page.md:3", "hpcai_jax.main", ("--a=1", "--b=2")),
        ("page.md:6", "hpcai_jax.report", ("DIR",)),
        ("page.md:7", "hpcai_jax.sweep", ("--x",)),
    ]
    assert [placeholder(e) for e in found] == ["", "DIR", ""]


def _plan(argv: list[str], devices: tuple[int, int]) -> list[str]:
    hflags.FLAGS.unparse_flags()
    try:
        hflags.FLAGS(["hpcai_jax.main", *argv])
        return dry_run.plan(hflags.config_from_flags(), devices)
    finally:
        hflags.FLAGS.unparse_flags()


@pytest.mark.parametrize("devices", [(1, 1), (8, 8)])
def test_flops_mode_runs_with_its_defaults(devices):
    """--mode=flops alone: its members share the devices (flags.MODE_DEFAULTS), on 1 or 8."""
    lines = _plan(["--mode=flops"], devices)
    assert f"{devices[0]} device(s)" in lines[-2] and "4 member(s) per device" in lines[-2]
    assert any("--members_per_device  auto" in line for line in lines), lines
    with pytest.raises(UsageError, match="Eq. 5 fails"):  # given, the flag is kept
        _plan(["--mode=flops", "--members_per_device=1"], devices)


def test_bare_main_names_the_quickstart():
    result = run_in_process()
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr == (
        f"hpcai_jax: error: no flags given; the first run is the quickstart: {QUICKSTART} "
        "(--help: the flags)\n"
    )


def test_help_texts_are_whole():
    """Each tool's --help starts with its description, a whole sentence (before: submission's
    began with a backtick and stopped mid-sentence)."""
    from hpcai_jax.data import climate_convert, stage

    for name, text in [
        ("submission", submission_cli.parser().format_help()),
        ("report", report_cli.parser().format_help()),
        ("sweep", sweep.parser().format_help()),
        ("stage", _help_of(stage.main)),
        ("climate_convert", _help_of(climate_convert.main)),
    ]:
        description = " ".join(text.split("\n\n")[1].split())
        assert not description.startswith("`") and description.endswith("."), (name, text)


def _help_of(tool_main) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
        tool_main(["--help"])
    return out.getvalue()


def test_the_submission_help_packs_the_record_its_own_run_writes():
    """The help's pack example takes a record the example before it writes: named by
    --run_name (not train-<UTC>-<pid>), with the MLLOG pack requires."""
    lines = submission_cli.parser().format_help().splitlines()
    run = next(line for line in lines if "python -m hpcai_jax.main " in line)
    pack = next(line for line in lines if "python -m hpcai_jax.submission pack " in line)
    name = re.search(r"--run_name=(\S+)", run)[1]
    assert re.search(r"--mllog=\S+", run) and "'.[mllog]'" in "\n".join(lines)
    results = next(
        line.split("=", 1)[1]
        for line in (ROOT / "configs" / "quickstart.flags").read_text().splitlines()
        if line.startswith("--results_dir=")
    )
    assert "--flagfile=configs/quickstart.flags" in run
    assert f"{results}/{name}.json" in pack.split()
