"""Checkpoints of the whole ensemble run with orbax: the stacked state (params, BatchNorm
statistics, optimizer state, step) plus a JSON document with everything else a resume needs
(sampler position is the step; timing accumulators; resumes; diverged members; the run id).

A checkpoint carries the fingerprint of the configuration that wrote it: what decides the
trajectory (M, per-member batch, model, data, optimizer, seed, ...). A run with another
fingerprint refuses it instead of loading it. The machine shape is not in it: the state is saved
as global arrays, so a run on another mesh (other device count, P_degree, members per device,
P_model) restores it with its own shardings and trains on identically, up to the order of its
float32 sums (docs/reliability.md, "Resuming on another machine shape").

A resume takes the newest intact checkpoint: a corrupt one (`_Corrupt` says what counts) is
named in one log line, left in place, and the next older one tried; the run's first save moves
the corrupt ones aside (docs/reliability.md, "Checkpoints and resume").
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import json
import shutil
import time
from pathlib import Path

import jax
import numpy as np
import orbax.checkpoint as ocp
from absl import logging
from etils import epath

from hpcai_jax import distributed
from hpcai_jax.config import RunConfig
from hpcai_jax.engine.mesh import MeshLayout
from hpcai_jax.errors import UsageError, disk_full, is_full
from hpcai_jax.locks import Busy, PathLock


def fingerprint(config: RunConfig, layout: MeshLayout) -> dict:
    """What must match for a checkpoint to be resumable: whatever changes the trajectory.

    Of the mesh only M counts: BatchNorm statistics and the loss are averaged over a member's
    whole global batch whatever P_degree, and members never mix, so members per device, device
    count and P_model only reorder sums. Not so under a low-precision gradient reduction: each
    device's share of the sum is rounded to that dtype (and P_degree = 1 rounds nothing), so
    there P_degree must match too."""
    mesh = {"ensemble_size": layout.ensemble_size}
    if config.mesh.grad_allreduce_dtype != "float32":
        mesh["parallel_degree"] = layout.parallel_degree
    return {
        "mesh": mesh,
        # The gradient reduction's dtype rounds the gradients (the mode only reorders sums).
        "grad_allreduce_dtype": config.mesh.grad_allreduce_dtype,
        "model": dataclasses.asdict(config.model),
        "data": {
            k: v
            for k, v in dataclasses.asdict(config.data).items()
            if k
            not in (
                "prefetch",
                "oob_examples",
                "data_workers",
                "worker_restarts",
                "bad_example_policy",
                "eval_cache_mib",
            )
        },  # none changes the trajectory (workers, restarted or not, give the batches of
        # in-process reads; under fail a run stops at its first bad record, so it read none;
        # the eval cache holds what a read gives)
        "optim": dataclasses.asdict(config.optim),
        "train": {
            k: getattr(config.train, k)
            for k in ("batch_size", "epochs", "steps", "seed", "bootstrap")
        },
    }


def _digest(value: dict) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()[:16]


def _differences(saved: dict, current: dict, prefix: str = "") -> list[str]:
    out = []
    for key in sorted(set(saved) | set(current)):
        a, b = saved.get(key), current.get(key)
        if isinstance(a, dict) and isinstance(b, dict):
            out += _differences(a, b, f"{prefix}{key}.")
        elif a != b:
            out.append(f"{prefix}{key}: checkpoint {a!r}, now {b!r}")
    return out


class _DrainingLoop(asyncio.SelectorEventLoop):
    """orbax restores on a fresh event loop and closes it as soon as one read fails, with the
    other reads still in flight: they later call back into the closed loop, and their abandoned
    coroutines are closed at exit, each printing a traceback after our one-line error. Letting
    them finish first (bounded, so a read that never ends cannot hang the exit) keeps it quiet."""

    drain_s = 60.0

    def close(self) -> None:
        deadline = time.monotonic() + self.drain_s
        while not (self.is_closed() or self.is_running()) and (tasks := asyncio.all_tasks(self)):
            left = deadline - time.monotonic()
            if left <= 0:
                break
            done, _ = self.run_until_complete(asyncio.wait(tasks, timeout=left))
            for task in done:
                if not task.cancelled():
                    task.exception()  # the restore has already reported why it failed
        super().close()


class _DrainingPolicy(asyncio.DefaultEventLoopPolicy):
    def new_event_loop(self) -> asyncio.AbstractEventLoop:
        return _DrainingLoop()


@contextlib.contextmanager
def draining_event_loops():
    previous = asyncio.get_event_loop_policy()
    asyncio.set_event_loop_policy(_DrainingPolicy())
    try:
        yield
    finally:
        asyncio.set_event_loop_policy(previous)


def remove_unfinished(folders) -> None:
    """Removes the folders a failed save left. orbax's writer threads of the failed save may
    still be ending (its close gives up on the first error), and one may add a file while the
    folder is removed: it is removed again, for at most a few seconds."""
    for folder in folders:
        deadline = time.monotonic() + 5.0
        while True:
            shutil.rmtree(folder, ignore_errors=True)
            if not folder.exists() or time.monotonic() > deadline:
                break
            time.sleep(0.05)


# orbax's step metadata: every complete save writes it into its step directory.
_STEP_METADATA = "_CHECKPOINT_METADATA"
# A step's verdict on one process; the worst over the processes is the step's.
_INTACT, _FOREIGN, _CORRUPT = 0, 1, 2


class _Corrupt(Exception):
    """A step directory that is no intact checkpoint; the message names the file and the fault.

    Corrupt: orbax's `_CHECKPOINT_METADATA` missing or not a JSON object; the `meta` item (run
    id, progress, fingerprint) missing, not a JSON object, giving another step than its
    directory's, or, where saved with a `meta_digest`, not matching it (damaged, or edited: a
    key gone); the `state` item failing to restore into the run's abstract state (orbax raises:
    an array file truncated or missing, its metadata unparsable, the item missing). Not corrupt:
    a checkpoint of another configuration (refused with no fall-back: the directory is another
    run's), and array bytes altered in place where orbax reads them without error."""


def _brief(error: BaseException) -> str:
    """The root cause: orbax wraps TensorStore's errors (which say what is wrong with which file)
    in one that prints the whole store's spec."""
    while error.__cause__ is not None:
        error = error.__cause__
    text = str(error).splitlines()[0][:200] if str(error) else ""
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def _meta_digest(meta: dict) -> str:
    """The digest of `meta` (but its own) as JSON gives it back: integer keys become strings."""
    return _digest(json.loads(json.dumps({k: v for k, v in meta.items() if k != "meta_digest"})))


class Checkpointer:
    """Saves every `every` steps (and when asked), keeps the last `keep`, restores the latest."""

    def __init__(
        self,
        directory: str,
        every: int,
        keep: int,
        fingerprint_value: dict,
        layout: MeshLayout | None = None,
        fewer_members: bool = False,
    ):
        self.directory = directory
        # A fit resume restores the first M' members of M (orbax reads only their rows).
        self._fewer_members = fewer_members
        self.every = every  # --checkpoint_every=auto sets it once a save was measured
        self._fingerprint = fingerprint_value
        self._layout = dataclasses.asdict(layout) if layout else None
        self._corrupt: list[int] = []  # steps the restore fell back past, still in place
        self._lock = None
        self._bytes: int | None = None  # the state's size, for a full disk's line
        try:
            path = epath.Path(directory).absolute()
            path.mkdir(parents=True, exist_ok=True)
            if jax.process_index() == 0:  # two runs writing the same steps would mix them
                self._lock = PathLock(str(path / ".lock"))
            self._manager = ocp.CheckpointManager(
                path,
                options=ocp.CheckpointManagerOptions(
                    max_to_keep=keep,
                    enable_async_checkpointing=True,
                    create=True,
                    # A save cut short (the process killed, the disk full) leaves a temporary
                    # directory that is never a step: removed before this run's first save.
                    cleanup_tmp_directories=True,
                ),
            )
        except Busy as e:
            raise UsageError(
                f"--checkpoint_dir={directory}: in use by another run ({e}); give each run "
                "its own --checkpoint_dir"
            ) from None
        except (OSError, ValueError) as e:
            raise UsageError(f"--checkpoint_dir={directory}: cannot use it ({e})") from None

    def latest_step(self) -> int | None:
        return self._manager.latest_step()

    def restore(self, abstract_state) -> tuple[object, dict]:
        """Restores the newest intact checkpoint: a corrupt one (`_Corrupt`) is named in one log
        line, left in place, and the next older one tried. If none is intact, or the newest
        readable one is another configuration's, closes this checkpointer (the caller exits
        next, and nothing of orbax's may still be running then) and raises UsageError.

        A checkpoint missing its metadata (orbax's `_CHECKPOINT_METADATA`, the `meta` holding the
        run id and progress, or the run id in it) is refused like any corrupt one, not restored
        under --run_name: the meta is also the run's progress (its step places the data and the
        schedule, its step times make the record's figures), so the state alone cannot resume
        the run; a step directory without orbax's file is not what a complete save leaves, so
        its other files are suspect too; and this class never sees --run_name. So a resume never
        takes another run id than the one its checkpoint was saved with."""
        try:
            with draining_event_loops():
                return self._restore_newest_intact(abstract_state)
        except UsageError:
            self.close()
            raise

    def _restore_newest_intact(self, abstract_state) -> tuple[object, dict]:
        steps = sorted(self._manager.all_steps(), reverse=True)
        faults = []
        for i, step in enumerate(steps):
            why, restored = self._try_step(step, abstract_state)
            if why is None:
                return restored
            faults.append(f"step {step}: {why}")
            self._corrupt.append(step)
            if i + 1 < len(steps):
                logging.warning(
                    "--checkpoint_dir=%s: checkpoint of step %d is corrupt (%s); left in place "
                    "at %s; falling back to step %d",
                    self.directory,
                    step,
                    why,
                    self._step_path(step),
                    steps[i + 1],
                )
        raise UsageError(
            f"--checkpoint_dir={self.directory}: every checkpoint there is unreadable "
            f"({'; '.join(faults)}); each is left in place: move them away to start afresh"
        )

    def _try_step(self, step: int, abstract_state) -> tuple[str | None, tuple | None]:
        """(None, (state, meta)) if step `step` is intact, else (why, None); UsageError if it is
        another configuration's. Each process reads its own devices' part of the state, so
        they agree on the verdict (one all-gather) before any falls back: never some processes
        on one step and the rest on another."""
        code, why, restored = _INTACT, "", None
        try:
            meta = self._read_meta(step)
            if meta.get("fingerprint_digest") != _digest(self._fingerprint):
                diff = _differences(meta.get("fingerprint", {}), self._fingerprint)
                code, why = _FOREIGN, "; ".join(diff[:4])
            else:
                self._members_left(step, meta)
                restored = self._read_state(step, abstract_state), meta
        except _Corrupt as e:
            code, why = _CORRUPT, str(e)
        codes = distributed.allgather(np.int32(code)).ravel()
        if codes.max() == _FOREIGN:
            raise UsageError(
                f"--checkpoint_dir={self.directory}: checkpoint of step {step} was "
                f"written by another configuration ({why or 'unknown'}); "
                f"use another --checkpoint_dir"
            )
        if codes.max() == _CORRUPT:
            return why if code == _CORRUPT else f"unreadable by process {codes.argmax()}", None
        return None, restored

    def _members_left(self, step: int, meta: dict) -> None:
        """A checkpoint a fit resume wrote holds fewer members than the flags' M: it resumes
        only with fit, on devices for at most those members (a dropped member never returns)."""
        saved_m = (meta.get("layout") or {}).get("ensemble_size")
        want_m = (self._layout or {}).get("ensemble_size")
        if saved_m and want_m and saved_m < want_m:
            raise UsageError(
                f"--checkpoint_dir={self.directory}: checkpoint of step {step} holds {saved_m} "
                f"members (a --resume_members=fit resume dropped the others), not {want_m}: "
                f"resume it with --resume_members=fit on devices for {saved_m} members at most"
            )

    def _step_path(self, step: int) -> epath.Path:
        return self._manager.directory / str(step)  # orbax's default step name

    def _read_meta(self, step: int) -> dict:
        """Step `step`'s meta, once its files say the step is whole; else raises _Corrupt."""
        path = self._step_path(step)
        try:
            if not isinstance(json.loads((path / _STEP_METADATA).read_text()), dict):
                raise ValueError("not a JSON object")
        except FileNotFoundError:
            raise _Corrupt(f"its {_STEP_METADATA} is missing") from None
        except (OSError, ValueError) as e:
            raise _Corrupt(f"its {_STEP_METADATA} is unreadable ({_brief(e)})") from None
        try:
            meta = ocp.JsonCheckpointHandler().restore(path / "meta")
        except Exception as e:  # noqa: BLE001 - orbax raises many types for damaged files
            raise _Corrupt(f"its meta is unreadable ({_brief(e)})") from None
        if not isinstance(meta, dict):
            raise _Corrupt("its meta is not a JSON object")
        if meta.get("step") != step:
            raise _Corrupt(f"its meta gives step {meta.get('step')!r}")
        if "meta_digest" in meta and meta["meta_digest"] != _meta_digest(meta):
            gone = [k for k in ("run_id", "fingerprint_digest") if k not in meta]
            raise _Corrupt(
                "its meta does not match the digest saved with it"
                + (f" (no {', '.join(gone)})" if gone else "")
            )
        return meta

    def _read_state(self, step: int, abstract_state):
        handler = ocp.StandardCheckpointHandler()
        try:
            return handler.restore(
                self._step_path(step) / "state",
                args=ocp.args.StandardRestore(abstract_state, strict=not self._fewer_members),
            )
        except Exception as e:  # noqa: BLE001 - orbax raises many types for damaged files
            raise _Corrupt(f"its state is unreadable ({_brief(e)})") from None
        finally:
            with contextlib.suppress(Exception):
                handler.close()

    def due(self, step: int) -> bool:
        return self.every > 0 and step % self.every == 0

    def wait(self) -> None:
        """Until the saves in flight are on disk (the auto interval's probe measures this)."""
        try:
            self._manager.wait_until_finished()
        except Exception as e:  # noqa: BLE001 - tensorstore's full disk is a ValueError
            self._failed(e)

    def save(self, step: int, state, meta: dict) -> None:
        """Asynchronous where orbax allows: returns once the arrays are copied off the devices.
        A step already on disk is kept: it holds this state (a finished run resumed again).
        The first save after a restore that fell back moves the corrupt steps aside first."""
        if self._corrupt:
            self._set_aside_corrupt(step)
        if step in self._manager.all_steps():
            return
        meta = dict(
            meta,
            fingerprint=self._fingerprint,
            fingerprint_digest=_digest(self._fingerprint),
            layout=self._layout,  # the mesh that wrote it: may differ from the resuming run's
        )
        meta["meta_digest"] = _meta_digest(meta)  # a key lost or changed makes it corrupt
        self._bytes = sum(int(getattr(leaf, "nbytes", 0)) for leaf in jax.tree.leaves(state))
        try:
            self._manager.save(
                step,
                args=ocp.args.Composite(
                    state=ocp.args.StandardSave(state), meta=ocp.args.JsonSave(meta)
                ),
                force=True,
            )
        except Exception as e:  # noqa: BLE001 - this save's, or (async) the one before's
            self._failed(e)

    def _set_aside_corrupt(self, saving: int) -> None:
        """Moves the steps the restore fell back past to `<step dir>.corrupt-<UTC>`, at this
        run's first save (step `saving`). Left in place, one may be a step this run saves again
        (orbax refuses a step it has: `save` would keep the corrupt one as that step, and every
        resume fall back past it), and each is counted by --keep_checkpoints and deleted with no
        word once the oldest. Renamed, orbax takes them for no step; kept for inspection."""
        corrupt, self._corrupt = self._corrupt, []
        utc = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        for step in corrupt if jax.process_index() == 0 else ():
            path = self._step_path(step)
            if not path.exists():  # removed by hand since the restore
                continue
            aside = path.parent / f"{path.name}.corrupt-{utc}"
            try:
                path.rename(aside)
            except OSError as e:
                raise UsageError(
                    f"--checkpoint_dir={self.directory}: cannot move the corrupt checkpoint of "
                    f"step {step} aside to {aside} ({e.strerror}); move or remove {path}"
                ) from None
            logging.warning(
                "--checkpoint_dir=%s: moved the corrupt checkpoint of step %d aside to %s before "
                "saving step %d; remove it once inspected",
                self.directory,
                step,
                aside,
                saving,
            )
        distributed.barrier("checkpoint_set_aside")  # renamed before any process re-reads
        self._manager.reload()

    def _failed(self, error: Exception):
        """A write failed (a full disk, a removed directory): close, remove what the failed save
        left, and say what is kept; any other error is raised as it is. A full disk is exit 74
        (requeued), another OSError exit 2."""
        if not (isinstance(error, OSError) or is_full(error)):
            raise error
        manager, self._manager = self._manager, None
        try:
            kept = list(manager.all_steps())
        except Exception:  # noqa: BLE001 - the manager is broken; its first error is the one
            kept = "unknown"
        with contextlib.suppress(Exception):  # the same error again, or one caused by it
            manager.close()
        self._release()
        then = f"the complete checkpoints are kept (steps {kept}): free space and run again to "
        then += "resume"
        if is_full(error):
            if jax.process_index() == 0:  # the unfinished step's temporary folder
                remove_unfinished(Path(self.directory).glob("*.orbax-checkpoint-tmp*"))
            flag, needed = f"--checkpoint_dir={self.directory}", self._bytes
            raise disk_full(flag, "a checkpoint in", self.directory, needed, then) from None
        raise UsageError(
            f"--checkpoint_dir={self.directory}: cannot write a checkpoint ({error}); {then}"
        ) from None

    def _release(self):
        if self._lock is not None:
            self._lock.release()

    def close(self) -> None:
        """Waits for pending writes (a checkpoint is only complete after this); safe to repeat, so
        that an error path may close it too. Raises UsageError when a pending write failed."""
        manager, self._manager = self._manager, None
        if manager is None:
            return
        try:
            manager.close()  # waits for pending writes first
        except Exception as e:  # noqa: BLE001 - tensorstore's full disk is a ValueError
            self._manager = manager
            self._failed(e)
        self._release()
