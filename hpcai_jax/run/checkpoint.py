"""Checkpoints of the whole ensemble run with orbax: the stacked state (params, BatchNorm
statistics, optimizer state, step) plus a JSON document with everything else a resume needs
(sampler position is the step; timing accumulators; resumes; diverged members; the run id).

A checkpoint carries the fingerprint of the configuration that wrote it: what decides the
trajectory (M, per-member batch, model, data, optimizer, seed, ...). A run with another
fingerprint refuses it instead of loading it. The machine shape is not in it: the state is saved
as global arrays, so a run on another mesh (other device count, P_degree, members per device,
P_model) restores it with its own shardings and trains on identically, up to the order of its
float32 sums (docs/reliability.md, "Resuming on another machine shape").
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import json
import time

import jax
import orbax.checkpoint as ocp
from etils import epath

from hpcai_jax.config import RunConfig
from hpcai_jax.engine.mesh import MeshLayout
from hpcai_jax.errors import UsageError
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
            )
        },  # none changes the trajectory (workers, restarted or not, give the batches of
        # in-process reads; under fail a run stops at its first bad record, so it read none)
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
def _draining_event_loops():
    previous = asyncio.get_event_loop_policy()
    asyncio.set_event_loop_policy(_DrainingPolicy())
    try:
        yield
    finally:
        asyncio.set_event_loop_policy(previous)


class Checkpointer:
    """Saves every `every` steps (and when asked), keeps the last `keep`, restores the latest."""

    def __init__(
        self,
        directory: str,
        every: int,
        keep: int,
        fingerprint_value: dict,
        layout: MeshLayout | None = None,
    ):
        self.directory = directory
        self._every = every
        self._fingerprint = fingerprint_value
        self._layout = dataclasses.asdict(layout) if layout else None
        self._lock = None
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
        """Restores the latest checkpoint. If it is unreadable or foreign, closes this checkpointer
        (the caller exits next, and nothing of orbax's may still be running then) and raises
        UsageError."""
        try:
            with _draining_event_loops():
                return self._restore(abstract_state)
        except UsageError:
            self.close()
            raise

    def _restore(self, abstract_state) -> tuple[object, dict]:
        step = self.latest_step()
        try:
            meta = self._manager.restore(
                step, args=ocp.args.Composite(meta=ocp.args.JsonRestore())
            )["meta"]
        except Exception as e:  # noqa: BLE001 - orbax raises many types for damaged files
            raise UsageError(
                f"--checkpoint_dir={self.directory}: checkpoint of step {step} is "
                f"unreadable ({type(e).__name__}); move it away to start afresh"
            ) from None
        if meta.get("fingerprint_digest") != _digest(self._fingerprint):
            diff = _differences(meta.get("fingerprint", {}), self._fingerprint)
            raise UsageError(
                f"--checkpoint_dir={self.directory}: checkpoint of step {step} was "
                f"written by another configuration ({'; '.join(diff[:4]) or 'unknown'}); "
                f"use another --checkpoint_dir"
            )
        try:
            state = self._manager.restore(
                step, args=ocp.args.Composite(state=ocp.args.StandardRestore(abstract_state))
            )["state"]
        except Exception as e:  # noqa: BLE001
            raise UsageError(
                f"--checkpoint_dir={self.directory}: state of step {step} is "
                f"unreadable ({type(e).__name__}: {str(e)[:120]}); move it away to "
                f"start afresh"
            ) from None
        return state, meta

    def due(self, step: int) -> bool:
        return self._every > 0 and step % self._every == 0

    def save(self, step: int, state, meta: dict) -> None:
        """Asynchronous where orbax allows: returns once the arrays are copied off the devices.
        A step already on disk is kept: it holds this state (a finished run resumed again)."""
        if step in self._manager.all_steps():
            return
        meta = dict(
            meta,
            fingerprint=self._fingerprint,
            fingerprint_digest=_digest(self._fingerprint),
            layout=self._layout,  # the mesh that wrote it: may differ from the resuming run's
        )
        try:
            self._manager.save(
                step,
                args=ocp.args.Composite(
                    state=ocp.args.StandardSave(state), meta=ocp.args.JsonSave(meta)
                ),
                force=True,
            )
        except OSError as e:  # this save's, or (async) the one before's
            self._failed(e)

    def _failed(self, error: OSError):
        """A write failed (a full disk, a removed directory): close, and say what is kept."""
        manager, self._manager = self._manager, None
        try:
            kept = list(manager.all_steps())
        except Exception:  # noqa: BLE001 - the manager is broken; its first error is the one
            kept = "unknown"
        with contextlib.suppress(Exception):  # the same error again, or one caused by it
            manager.close()
        self._release()
        raise UsageError(
            f"--checkpoint_dir={self.directory}: cannot write a checkpoint ({error}); the "
            f"complete checkpoints are kept (steps {kept}): free space and run again to resume"
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
        except OSError as e:
            self._manager = manager
            self._failed(e)
        self._release()
