"""Records that do not decode (--bad_example_policy): a corrupt JPEG in a data set of a million.

Wherever an image is decoded (grain workers for training, the training process for held-out and
out-of-bag reads), an example whose bytes fail to decode is replaced by another real example of
the same split, drawn as a pure function of (split, index, attempt): every process, every worker
count and a resumed run make the same replacement, and the image is never blank. The reader
returns the bad indices with the batch; the training process tallies them here. Under `fail`
(the default) the first one ends the run in one line naming the data set, split and record
index (the index `tfds.data_source` uses); under `skip` the run goes on and the record lists
them as `data.skipped_examples` (split → sorted indices). A closed-division run may skip at
most `CLOSED_FRACTION` of a split (hpcai_jax/rules.py).

This module must not import jax: grain's workers import it.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from typing import Any

import numpy as np
from absl import logging

from hpcai_jax.errors import DataError

BAD = "__bad__"  # the key under which a reader returns [(index, why), ...] with its fields
CLOSED_FRACTION = 1e-4  # of a split: 128 of ImageNet's 1,281,167 training images
_TAG = 0xBAD0  # separates these draws from the sampler's and the augmentation's streams
_TRIES = 16  # replacements tried before the split itself is declared unreadable


class BadExampleError(DataError):
    """A record that does not decode, under --bad_example_policy=fail (or every replacement
    of one bad too): one line, exit code 65."""


def replacement(split: str, index: int, attempt: int, size: int) -> int:
    """The example that stands in for `index` at its `attempt`-th try: uniform over the split's
    other `size` - 1 examples, a function of (split, index, attempt) alone."""
    key = np.random.SeedSequence([_TAG, zlib.crc32(split.encode()), index, attempt])
    other = int(np.random.Generator(np.random.PCG64(key)).integers(size - 1))
    return other + (other >= index)


def decode_or_replace(
    split: str,
    index: int,
    record: dict,
    read: Callable[[int], dict],
    size: int,
    transform: Callable[[dict], Any],
) -> tuple[Any, dict, list[tuple[int, str]]]:
    """transform(record) for example `index`, or for its replacement where the record does not
    decode. Returns (transformed, the record used, [(bad index, why), ...]); read(i) gives
    record i of the split (of `size` records)."""
    bad: list[tuple[int, str]] = []
    at = index
    for attempt in range(_TRIES):
        try:
            return transform(record), record, bad
        except Exception as e:  # noqa: BLE001 - PIL raises OSError, SyntaxError, ValueError...
            first_line = str(e).splitlines()[0] if str(e) else ""
            bad.append((at, f"{type(e).__name__}: {first_line}"))
        if size < 2:
            break
        at = replacement(split, index, attempt, size)
        record = read(at)
    raise BadExampleError(
        f"split {split!r}: record {index} and its {len(bad) - 1} replacements do not decode "
        f"(record {bad[-1][0]}: {bad[-1][1]})"
    )


class BadExamples:
    """One split's tally in the training process, under the run's policy."""

    def __init__(self, dataset: str, split: str, policy: str):
        self.dataset, self.split, self.policy = dataset, split, policy
        self.found: dict[int, str] = {}

    def note(self, bad: list[tuple[int, str]]) -> None:
        """Records bad examples; under `fail`, raises for the first one."""
        for index, why in bad:
            if self.policy == "fail":
                raise BadExampleError(
                    f"--dataset={self.dataset}: split {self.split!r} record {int(index)} does not "
                    f"decode ({why}); --bad_example_policy=skip replaces such records by others "
                    "and lists them in the record"
                )
            index = int(index)
            if index not in self.found:
                self.found[index] = why
                logging.warning(
                    "--dataset=%s: split %r record %d does not decode (%s): replaced "
                    "(--bad_example_policy=skip)",
                    self.dataset,
                    self.split,
                    index,
                    why,
                )

    def skipped(self) -> list[int]:
        return sorted(self.found)
