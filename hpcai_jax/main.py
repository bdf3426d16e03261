"""Entry point: `python -m hpcai_jax.main --flagfile=configs/X.flags [--flag=value ...]`.

Parses flags into a validated config and dispatches on --mode. Bad input ends in one line on
stderr and exit code 2, never a traceback.
"""

from __future__ import annotations

import sys

import jax
from absl import app, flags, logging

from hpcai_jax import distributed
from hpcai_jax import flags as hflags
from hpcai_jax.errors import UsageError


def _fail(message: str, code: int = 2) -> None:
    print(f"hpcai_jax: error: {message}", file=sys.stderr)
    sys.exit(code)


def _parse(argv: list[str]) -> list[str]:
    try:
        return hflags.FLAGS(argv)
    except flags.Error as e:
        _fail(str(e).splitlines()[0] if str(e) else type(e).__name__)


def main(argv: list[str]) -> None:
    if len(argv) > 1:
        _fail(f"unexpected arguments {' '.join(argv[1:])!r}: every setting is a --flag")
    try:
        config = hflags.config_from_flags()
        distributed.initialize(config.distributed)
        if config.mode == "stream":
            from hpcai_jax.stream import run_stream_mode

            sys.exit(run_stream_mode(config))
        if config.mode == "flops":
            from hpcai_jax.engine.flops_mode import run_flops

            sys.exit(run_flops(config))
        from hpcai_jax.engine import loop as train
        from hpcai_jax.engine import record as run_record

        logging.info("hpcai_jax train: %s", config)
        record, exit_code = train.train_and_evaluate(config)
        if jax.process_index() == 0:
            print(run_record.summary(record))
        sys.exit(exit_code)
    except UsageError as e:
        _fail(str(e), e.exit_code)


def run() -> None:
    app.run(main, flags_parser=_parse)


if __name__ == "__main__":
    run()
