"""Where a run starts: a new run, or the newest checkpoint of its --checkpoint_dir (`start`),
with its checkpointer (`checkpointer`); and `--resume_members=fit` (`fit`): a checkpoint of M members resumes on fewer devices with the members
that fit, M' the largest that satisfies Eq. 5 at the run's P_degree, P_model and members per
device; members M'..M-1 stop where the checkpoint stopped them (docs/reliability.md, "Resume
with the members that fit"). Bagging goes on: the kept members train on exactly as they would
have, and FLOPS counts the member-steps each member completed.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import NamedTuple

from absl import logging

from hpcai_jax import distributed
from hpcai_jax.config import RunConfig
from hpcai_jax.engine.setup import RunSetup
from hpcai_jax.engine.state import EnsembleState
from hpcai_jax.errors import UsageError
from hpcai_jax.records import write as record_write
from hpcai_jax.run.checkpoint import Checkpointer, fingerprint
from hpcai_jax.run.progress import Progress

WHY = "resume_members=fit"


@dataclasses.dataclass(frozen=True)
class Fitted:
    """What runs (`config`, its M the fitted M'), what the flags asked (`requested`), and the
    members dropped at this resume."""

    config: RunConfig
    requested: RunConfig
    dropped: tuple[int, ...] = ()


def has_checkpoint(directory: str) -> bool:
    """Whether `directory` holds a step of orbax's (a directory named by its step number)."""
    path = Path(directory)
    return path.is_dir() and any(p.is_dir() and p.name.isdigit() for p in path.iterdir())


def fit(config: RunConfig, num_devices: int, local_device_count: int) -> Fitted:
    """The configuration to run: the flags' own unless --resume_members=fit resumes a checkpoint
    whose M does not fit these devices; then M' = (devices / (P_degree × P_model)) × members per
    device (1 where derived), the largest multiple of that below M, members M'..M-1 dropped."""
    rc, mc = config.reliability, config.mesh
    if rc.resume_members != "fit" or not rc.checkpoint_dir or not has_checkpoint(rc.checkpoint_dir):
        return Fitted(config, config)
    m, pm = mc.ensemble_size, mc.model_parallel
    p = mc.parallel_degree or max(1, local_device_count // pm)
    mpd = mc.members_per_device or 1
    if (m // mpd) * p * pm == num_devices and m % mpd == 0:
        return Fitted(config, config)  # Eq. 5 holds: every member fits
    groups, left = divmod(num_devices, p * pm)
    fitted = groups * mpd
    if left or fitted < 1 or fitted > m:
        raise UsageError(
            f"--resume_members=fit: {num_devices} devices hold no whole number of members of "
            f"--parallel_degree={p}"
            + (f" × --model_parallel={pm}" if pm > 1 else "")
            + f" (--ensemble_size={m}, --members_per_device={mpd}): Eq. 5 cannot hold"
        )
    mesh = dataclasses.replace(mc, ensemble_size=fitted, members_per_device=mpd, parallel_degree=p)
    return Fitted(dataclasses.replace(config, mesh=mesh), config, tuple(range(fitted, m)))


def checkpointer(config: RunConfig, setup: RunSetup, fitted: Fitted) -> Checkpointer | None:
    """The run's checkpointer (None without --checkpoint_dir). Its fingerprint is the flags' M,
    whatever the resume runs, and the data set's own values (--num_classes=0 and =10 train the
    same Fashion-MNIST run)."""
    rc = config.reliability
    if not rc.checkpoint_dir:
        return None
    asked = dataclasses.replace(setup.layout, ensemble_size=config.mesh.ensemble_size)
    trained = dataclasses.replace(config, data=setup.config.data)
    return Checkpointer(
        rc.checkpoint_dir,
        rc.checkpoint_steps,
        rc.keep_checkpoints,
        fingerprint(trained, asked),
        setup.layout,
        fewer_members=bool(fitted.dropped),
    )


class Start(NamedTuple):
    """Where the run starts: the restored state (None: a new run's, initialised later), its
    progress, and whether it resumes."""

    state: EnsembleState | None
    progress: Progress
    resuming: bool


def start(setup: RunSetup, ckpt: Checkpointer | None, dropped: tuple[int, ...]) -> Start:
    """From the newest checkpoint, or a new run's start; a fit resume (`dropped`) stops those
    members at the checkpoint's step."""
    config = setup.config
    if ckpt is None or ckpt.latest_step() is None:
        # One id for the whole job: each process would stamp its own time and pid.
        run_id = distributed.from_process_zero(record_write.run_id(config, "train"))
        return Start(None, Progress(run_id=run_id), False)
    state, meta = ckpt.restore(setup.abstract_state)
    progress = Progress.from_meta(meta)
    named = config.results.run_name
    if named and named != progress.run_id:  # never continue one run under another's name
        raise UsageError(
            f"--run_name={named}: --checkpoint_dir={config.reliability.checkpoint_dir} holds "
            f"run {progress.run_id}; resume it with --run_name={progress.run_id} (or none), or "
            "start this run in another --checkpoint_dir"
        )
    mesh = dataclasses.asdict(setup.layout)
    progress.note_resume(mesh)
    _drop(setup, progress, dropped)
    logging.info(
        "resumed run %s from step %d of %d (%s)%s",
        progress.run_id,
        progress.step,
        setup.total_steps,
        config.reliability.checkpoint_dir,
        f" on another mesh: written on {meta['layout']}, now {mesh}"
        if meta.get("layout") not in (None, mesh)
        else "",
    )
    return Start(state, progress, True)


def _drop(setup: RunSetup, progress: Progress, dropped: tuple[int, ...]) -> None:
    """A fit resume's dropped members stop at the checkpoint's step, said in a warning."""
    layout = setup.layout
    why = f"--resume_members=fit on {layout.num_devices} devices"
    if new := progress.drop(dropped, why):
        logging.warning(
            "resumed with the members that fit: %d of %d (%s); members %s stop at step %d",
            layout.ensemble_size,
            layout.ensemble_size + len(progress.dropped),
            why,
            new,
            progress.step,
        )
