"""Entry point: `python -m hpcai_jax.main --flagfile=configs/X.flags [--flag=value ...]`.

Parses flags into a validated config and dispatches on --mode. Bad input ends in one line on
stderr and exit code 2, never a traceback.
"""

from __future__ import annotations

# From the interpreter's first moment, before the imports below take JAX's seconds: a Ctrl-C or
# SIGTERM is noted, and acted on where it is safe to (run/interrupt.py).
if __name__ == "__main__":
    from hpcai_jax.run import interrupt as _interrupt

    _interrupt.install()

import logging as std_logging  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

from absl import app, flags, logging  # noqa: E402

from hpcai_jax import distributed, flagfiles, gpu_settings, locks  # noqa: E402
from hpcai_jax import flags as hflags  # noqa: E402
from hpcai_jax import help as help_text  # noqa: E402
from hpcai_jax.errors import UsageError, is_full  # noqa: E402
from hpcai_jax.run import interrupt, startup  # noqa: E402


def _fail(message: str, code: int = 2) -> None:
    print(f"hpcai_jax: error: {message}", file=sys.stderr)
    sys.exit(code)


DRY_RUN = flags.DEFINE_boolean(
    "dry_run",
    False,
    "Parse and validate the flags, resolve the mesh on these devices and the quality target, "
    "print the plan and exit 0: nothing compiled, trained or written.",
)
QUICKSTART = "python -m hpcai_jax.main --flagfile=configs/quickstart.flags"


def _parse(argv: list[str]) -> list[str]:
    if len(argv) == 1:  # no flag at all: the defaults name no data set with a target
        _fail(f"no flags given; the first run is the quickstart: {QUICKSTART} (--help: the flags)")
    if help_text.wants_help(argv):  # grouped by mode; --helpfull stays absl's whole list
        try:
            print(help_text.text(), flush=True)
        except BrokenPipeError:  # `--help | head`: the reader took what it wanted
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(0)
    try:
        return hflags.FLAGS([argv[0], *flagfiles.expand(argv[1:])])
    except UsageError as e:
        _fail(str(e))
    except flags.Error as e:
        _fail(str(e).splitlines()[0] if str(e) else type(e).__name__)


def _process_index() -> int:
    import jax

    return jax.process_index()


def _quiet_backend_probe() -> None:
    """JAX logs, at INFO, every backend it tried and could not start ("Unable to initialize
    backend 'tpu'" on every machine without libtpu): noise beside the run's own INFO lines. The
    backend the run uses is named in its start-up line; a backend that was asked for
    (JAX_PLATFORMS) and fails still ends the run with JAX's error."""
    std_logging.getLogger("jax._src.xla_bridge").setLevel(std_logging.WARNING)


class _NoLibraryInfo(std_logging.Filter):
    """Drops the INFO lines of the libraries named (orbax writes about 30 per checkpoint save:
    its handlers, threads and timings), keeping their warnings and errors."""

    def __init__(self, *libraries: str):
        super().__init__()
        self._parts = tuple(f"{os.sep}{name}{os.sep}" for name in libraries)

    def filter(self, record: std_logging.LogRecord) -> bool:
        return record.levelno >= std_logging.WARNING or not any(
            part in record.pathname for part in self._parts
        )


class _NoFullDiskTracebacks(_NoLibraryInfo):
    """Drops the libraries' own reports of a write that found the disk full (orbax logs one
    traceback per thread of a failed save, about 30 lines each): the run names it in one line
    and exits 74 (errors.DiskFull)."""

    def filter(self, record: std_logging.LogRecord) -> bool:
        if not any(part in record.pathname for part in self._parts):
            return True
        error = record.exc_info[1] if record.exc_info else None
        return not (is_full(error) or is_full(Exception(record.getMessage())))


_FULL_DISK = _NoFullDiskTracebacks("orbax")  # one instance: added once, however often main runs


def _quiet_libraries() -> None:
    """The libraries' INFO lines stay out of the run's log unless --verbosity=1 or more asks;
    their reports of a full disk always do."""
    logging.get_absl_logger().addFilter(_FULL_DISK)
    if logging.get_verbosity() < logging.DEBUG:
        logging.get_absl_logger().addFilter(_NoLibraryInfo("orbax"))


def _quiet_other_processes() -> None:
    """Process 0's log is the job's: the others log only their warnings and errors (before:
    each repeated the settings table, the mesh, the compile and the evaluation), unless
    --verbosity=1 or more asks for everything. Their start-up line is already written."""
    if _process_index() != 0 and logging.get_verbosity() < logging.DEBUG:
        logging.set_verbosity(logging.WARNING)


def _missing(path: str) -> list[Path]:
    """The folders of `path` that do not exist yet, deepest first: those the run may make."""
    if not path:
        return []
    folder, missing = Path(path).absolute(), []
    while not folder.exists() and folder != folder.parent:
        missing.append(folder)
        folder = folder.parent
    return missing


class _MadeFolders:
    """The results and checkpoint folders this run made, removed at its end while empty (an
    error or an interrupt before anything was written): a folder that existed is never
    touched. Process 0's alone once the job is known: another process would race its
    writes."""

    def __init__(self, config):
        reliability = getattr(config, "reliability", None)
        dirs = (config.results.results_dir, getattr(reliability, "checkpoint_dir", ""))
        self.folders = [f for d in dirs for f in _missing(d)]
        self.mine = True

    def remove_empty(self) -> None:
        if not self.mine:
            return
        for folder in self.folders:  # deepest first; one that is not empty keeps its parents
            try:
                folder.rmdir()
            except FileNotFoundError:
                continue
            except OSError:
                break


def main(argv: list[str]) -> None:
    installed = interrupt.install()  # already, under `python -m`: at the top of this file
    startup.begin()
    _quiet_backend_probe()
    _quiet_libraries()
    if len(argv) > 1:
        _fail(f"unexpected arguments {' '.join(argv[1:])!r}: every setting is a --flag")
    made = None
    try:
        config = hflags.config_from_flags()
        if DRY_RUN.value:
            _dry_run(config)
        made = _MadeFolders(config)
        interrupt.on_hard_exit(made.remove_empty)
        # Before JAX starts its backend: XLA and the GPU client read these once, at start.
        applied = gpu_settings.apply(gpu_settings.select(config.gpu_settings))
        # Errors before tables: the phase lines and the settings wait until the mode has checked
        # what it can (the train mode: the layout on these devices, the data, the results).
        startup.hold(lambda: _announce(config, applied))
        with startup.phase("distributed"):
            distributed.initialize(config.distributed)
        startup.quiet(_process_index() != 0)
        made.mine = _process_index() == 0
        _quiet_other_processes()
        with startup.phase("imports"):
            run_mode = _MODES[config.mode]()
        if config.mode not in _SELF_CHECKED:
            _check_layout(config)
            startup.valid()
            interrupt.exit_at_once(f"--mode={config.mode}")
        code = run_mode(config)
        if config.mode in ("flops", "stream"):  # train and check name their record themselves
            interrupt.keeping("the run had ended, its record written")
        sys.exit(code)
    except interrupt.Interrupted as e:
        print(e.line(), file=sys.stderr, flush=True)
        sys.exit(e.exit_code)
    except UsageError as e:
        _fail(str(e), e.exit_code)
    except Exception as e:
        distributed.exit_if_lost(e)
        raise
    finally:  # a refused run logs nothing it held, and leaves no empty folder it made
        startup.drop()
        locks.release_all()  # an error's claim, which its traceback would keep until the exit
        if made is not None:
            made.remove_empty()
        if installed:  # main called in a process that is not its own (a test): put back
            interrupt.restore()


def _dry_run(config) -> None:
    """--dry_run: the plan on stdout, exit 0 (a setting the run would refuse: its one line)."""
    from hpcai_jax import dry_run

    print("\n".join(dry_run.plan(config)), flush=True)
    sys.exit(0)


def _check_layout(config) -> None:
    """--mode=flops compiles the step on every device: its layout is checked here, before the
    settings table, as the train mode checks its own."""
    if config.mode == "flops":
        import jax

        from hpcai_jax.engine.mesh import resolve_layout

        resolve_layout(config.mesh, jax.device_count(), jax.local_device_count())


def _announce(config, applied: gpu_settings.Applied) -> None:
    """The GPU settings applied and the settings that differ from the defaults (the record
    holds the whole configuration), a log line each: greppable."""
    if applied.applied:
        logging.info("%s", applied.summary())
    for line in hflags.settings_table(config).splitlines():
        logging.info("%s", line)


def _run_train():
    from hpcai_jax.run.trainer import run_train

    return run_train


def _run_flops():
    from hpcai_jax.flops.mode import run_flops

    return run_flops


def _run_stream():
    from hpcai_jax.stream import run_stream

    return run_stream


def _run_check():
    from hpcai_jax.nodecheck.runner import run_check

    return run_check


# Every mode is run_<mode>(config) -> exit code: it prints its own summary and writes one record
# (results.envelope). Imported on use: a STREAM run needs none of the engine.
_MODES = {"train": _run_train, "flops": _run_flops, "stream": _run_stream, "check": _run_check}
# The modes that call startup.valid() themselves once their configuration is checked; main
# calls it before the others.
_SELF_CHECKED = {"train"}


def run() -> None:
    app.run(main, flags_parser=_parse)


if __name__ == "__main__":
    run()
