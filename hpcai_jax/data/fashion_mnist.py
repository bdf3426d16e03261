"""Fashion-MNIST from the IDX files that Debian's `dataset-fashion-mnist` package installs.

Real data that installs offline (docs/design.md, fact 8): 60,000 training and 10,000 test images,
28×28 grey, 10 classes, MIT licence.
"""

from __future__ import annotations

import gzip
import struct
from pathlib import Path

import numpy as np

from hpcai_jax.data.source import ArraySource, ImageSpec
from hpcai_jax.errors import UsageError

DEFAULT_DIR = "/usr/share/datasets/fashion-mnist"
SPEC = ImageSpec(
    name="fashion_mnist",
    image_shape=(28, 28, 1),
    num_classes=10,
    mean=(0.2860 * 255,),
    std=(0.3530 * 255,),
)
_FILES = {
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}
_HOW_TO_GET = (
    "install it with `apt-get install dataset-fashion-mnist` or point --data_dir at the IDX files"
)


def _find(data_dir: Path, stem: str) -> Path:
    for name in (stem + ".gz", stem):
        if (data_dir / name).is_file():
            return data_dir / name
    raise UsageError(
        f"--data_dir={data_dir}: Fashion-MNIST file {stem}.gz not found; {_HOW_TO_GET}"
    )


def read_idx(path: Path) -> np.ndarray:
    """Parses an IDX file (optionally gzipped): magic 0x0000 08 <ndim>, big-endian dims, uint8 data."""
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rb") as f:
            raw = f.read()
        zero, dtype_code, ndim = struct.unpack(">HBB", raw[:4])
        if zero != 0 or dtype_code != 0x08 or not 1 <= ndim <= 4:
            raise ValueError("bad magic number")
        dims = struct.unpack(f">{ndim}I", raw[4 : 4 + 4 * ndim])
        data = np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim)
        if data.size != int(np.prod(dims)):
            raise ValueError(f"{data.size} bytes of data for shape {dims}")
    except (OSError, EOFError, ValueError, struct.error, gzip.BadGzipFile) as e:
        raise UsageError(f"{path}: not a valid IDX file ({e}); {_HOW_TO_GET}") from None
    return data.reshape(dims)


def load_split(data_dir: str, split: str) -> ArraySource:
    directory = Path(data_dir or DEFAULT_DIR)
    if not directory.is_dir():
        raise UsageError(
            f"--data_dir={directory}: Fashion-MNIST directory not found; {_HOW_TO_GET}"
        )
    image_file, label_file = _FILES[split]
    images = read_idx(_find(directory, image_file))
    labels = read_idx(_find(directory, label_file)).astype(np.int32)
    if images.ndim != 3 or images.shape[1:] != (28, 28) or len(images) != len(labels):
        raise UsageError(
            f"{directory}: Fashion-MNIST {split} files have shapes {images.shape} and "
            f"{labels.shape}; expected [N, 28, 28] and [N]"
        )
    return ArraySource(SPEC, {"image": images[..., None], "label": labels})
