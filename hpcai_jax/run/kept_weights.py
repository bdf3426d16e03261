"""`--keep_weights`: a complete training run keeps its members' final parameters and model state,
and the MLLOG names them by a digest, so that `python -m hpcai_jax.submission check --reevaluate`
can measure their held-out quality again (docs/submission.md, "Re-evaluation").

Under --checkpoint_dir the run's final checkpoint holds them (its `state` item); else they are
saved beside the record, `<results_dir>/<run_id>.weights`, as orbax's StandardSave of
{params, model_state}, every array stacked [M, ...]. `load` reads either back as numpy arrays on
any host, whatever mesh wrote them.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import jax
import numpy as np
import orbax.checkpoint as ocp
from absl import logging
from etils import epath
from jax.experimental import multihost_utils

from hpcai_jax.errors import DiskFull, UsageError, disk_full, is_full
from hpcai_jax.records import write as record_write
from hpcai_jax.run.checkpoint import draining_event_loops, remove_unfinished

SUFFIX = ".weights"
ITEMS = ("params", "model_state")
MLLOG_KEY = "weights_digest"


def beside(results_dir: str | Path, run_id: str) -> Path:
    """Where a run without --checkpoint_dir keeps them: beside its record."""
    return Path(results_dir) / f"{run_id}{SUFFIX}"


def in_checkpoint(checkpoint_dir: str | Path, step: int) -> Path:
    """The `state` item of the run's checkpoint of `step` (run/checkpoint.py's layout)."""
    return Path(checkpoint_dir) / str(step) / "state"


def named(tree: dict) -> list[tuple[str, object]]:
    """Every array of {params, model_state} as ('params/conv/kernel', array), sorted by name:
    the fixed order the digest reads them in."""
    flat = jax.tree_util.tree_flatten_with_path({k: tree.get(k, {}) for k in ITEMS})[0]
    out = [("/".join(str(getattr(p, "key", p)) for p in path), leaf) for path, leaf in flat]
    return sorted(out, key=lambda item: item[0])


def _host(leaf) -> np.ndarray:
    """The whole array on this host: every process takes part where it spans several."""
    if isinstance(leaf, jax.Array) and not leaf.is_fully_addressable:
        leaf = multihost_utils.process_allgather(leaf, tiled=True)
    return np.ascontiguousarray(np.asarray(leaf))


def digest(tree: dict) -> tuple[str, int]:
    """(sha256 hex, arrays): over each array's name, dtype, shape and bytes (C order, as stored),
    in the order of `named`. One array at a time is brought to the host, so a large ensemble
    never needs all of its weights in host memory at once (a collective over the processes)."""
    h = hashlib.sha256()
    arrays = named(tree)
    for name, leaf in arrays:
        a = _host(leaf)
        h.update(f"{name}\0{a.dtype.name}\0{a.shape}\0".encode())
        h.update(a.tobytes())
    return h.hexdigest(), len(arrays)


def save(path: Path, tree: dict) -> None:
    """{params, model_state} at `path` (new), as orbax's StandardSave; every process calls it.
    A write that fails (a full disk) lets the others in flight end before orbax closes their
    event loop: they would each print a traceback calling back into it."""
    with draining_event_loops():
        _save(path, tree)


def _save(path: Path, tree: dict) -> None:
    checkpointer = ocp.StandardCheckpointer()
    try:
        # force: a partial folder left by an earlier try of this run is replaced (results.claim
        # refused the run id otherwise, so what is there is this run's).
        checkpointer.save(epath.Path(path).absolute(), {k: tree[k] for k in ITEMS}, force=True)
        checkpointer.wait_until_finished()
    finally:
        checkpointer.close()


def load(path: Path) -> dict:
    """{params, model_state} as numpy arrays from a `.weights` folder or a checkpoint's `state`
    item; UsageError (one line naming `path`) where it is not one orbax reads."""
    handler = ocp.PyTreeCheckpointHandler()
    where = epath.Path(path).absolute()
    try:
        tree = handler.metadata(where)
        tree = dict(getattr(tree, "tree", tree))
        if "params" not in tree:
            raise ValueError("no params in it")
        wanted = {k: tree.get(k) or {} for k in ITEMS}
        args = jax.tree.map(lambda _: ocp.RestoreArgs(restore_type=np.ndarray), wanted)
        item = jax.tree.map(lambda m: np.zeros((0,), m.dtype), wanted)
        restored = handler.restore(
            where,
            args=ocp.args.PyTreeRestore(item=item, restore_args=args, partial_restore=True),
        )
    except Exception as e:  # noqa: BLE001 - orbax raises many types for a missing or bad folder
        raise UsageError(f"{path}: no members' weights orbax can read ({_brief(e)})") from None
    finally:
        handler.close()
    return {k: restored.get(k) or {} for k in ITEMS}


def _brief(error: BaseException) -> str:
    while error.__cause__ is not None:
        error = error.__cause__
    text = str(error).splitlines()[0][:160] if str(error) else ""
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def keep(ctx, complete: bool) -> DiskFull | None:
    """After the final checkpoint (run/trainer.py): a complete run's weights, saved beside the
    record unless the final checkpoint holds them, and their digest in the MLLOG. A full disk
    keeps none (no folder left) and gives the one-line error for the run to raise once its
    record, which says so, is written."""
    config = ctx.setup.config
    if not (config.results.keep_weights and complete):
        return None
    state, run_id = ctx.state, ctx.progress.run_id
    tree = {"params": state.params, "model_state": state.model_state}
    if jax.process_count() == 1:
        # One host holds every member: orbax writes numpy arrays at once, where its first save
        # of device arrays spends seconds preparing their transfers (4 s for the tests' run).
        tree = jax.tree.map(np.asarray, tree)
    if ctx.ckpt is not None:
        where = in_checkpoint(config.reliability.checkpoint_dir, ctx.progress.step)
        kept = "checkpoint"
    else:
        where = beside(config.results.results_dir, run_id)
        kept = "beside the record"
        # Under its partial name until the run commits its outputs together (run/outputs.py).
        if full := _saved_or_full(record_write.staged(where), tree, config.results.results_dir):
            return full
    value, arrays = digest(tree)
    ctx.mlog.weights_kept(value, {"arrays": arrays, "kept": kept, "path": str(where)})
    logging.info("kept the members' final weights (%s): %s, sha256 %s", kept, where, value)
    return None


def _saved_or_full(path: Path, tree: dict, results_dir: str) -> DiskFull | None:
    """`save`, or where the disk is full, the folder and orbax's temporary one removed and the
    error returned (any other failure is raised)."""
    try:
        save(path, tree)
        return None
    except Exception as e:
        if not is_full(e):
            raise
    if jax.process_index() == 0:
        remove_unfinished([path, *path.parent.glob(f"{path.name}.orbax-checkpoint-tmp*")])
    needed = sum(int(getattr(leaf, "nbytes", 0)) for leaf in jax.tree.leaves(tree))
    return disk_full(f"--results_dir={results_dir}", "the members' weights", path, needed)
