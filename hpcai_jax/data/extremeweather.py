"""ExtremeWeather (Racah et al., NeurIPS 2017): the authors' HDF5 years, read directly or
converted once into a layout that random reads are fast on.

`open_extremeweather` prefers the converted form at the run's height and otherwise reads the raw
years. The files, the --data_dir layout and the conversion: `docs/detection.md`, Data.
"""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import numpy as np

from hpcai_jax.data.climate import (
    CHANNELS,
    CLASSES,
    FULL_SHAPE,
    MAX_BOXES,
    NUM_CHANNELS,
    STORAGE_SCALE,
    UNITS,
    ClimateSpec,
    box_fields,
    channel_stats,
    check_image_size,
    downscale_images,
    scale_boxes,
)
from hpcai_jax.data.climate_train import SAMPLE_KEY, zero_keys
from hpcai_jax.errors import UsageError

NAME = "extremeweather"
URL = "https://extremeweatherdataset.github.io"
SPLITS = ("train", "test")
STATS_EXAMPLES = 64  # raw training examples, evenly spaced, that the spec's mean/std come from
_READ_ROWS = 4  # full-resolution examples read from HDF5 at once (56 MB float32 each)
_HOW_TO_GET = (
    f"expected DATA_DIR/train/climo_*.h5 and DATA_DIR/test/climo_*.h5 from {URL} (not downloaded "
    "here), or DATA_DIR/converted_<H>/ from `python -m hpcai_jax.data.extremeweather`"
)

Stats = tuple[tuple[float, ...], tuple[float, ...]]  # per-channel (mean, std)


class _FirstN:
    """`len` and `head` of a source whose first `_length` examples are in use: a head is a
    shallow copy sharing the open files or maps, with a shorter length."""

    _length: int

    def __len__(self) -> int:
        return self._length

    def head(self, n: int):
        """The first n examples (n = 0: all)."""
        if n == 0 or n >= len(self):
            return self
        first = copy.copy(self)
        first._length = n
        return first


class RawClimateSource(_FirstN):
    """The examples of one or more raw years, in order, at `height` rows.

    Box rows are (ymin, xmin, ymax, xmax, class) with y along the 768 axis and unused rows all
    -1: the layout the dataset's site documents, and what public readers of these files unpack
    (`ymin, xmin, ymax, xmax, event_class = row`, skipping rows that are all -1).

    Args:
      paths: the HDF5 files, read as one set in the given order.
      height: image rows after downscaling (a divisor of grid[0]).
      stats: the spec's per-channel (mean, std) in climate.UNITS; None: computed from
        STATS_EXAMPLES evenly spaced examples of these files.
      grid: the files' (height, width); tests use a small one.
    """

    def __init__(
        self,
        paths: list[Path],
        height: int,
        stats: Stats | None = None,
        grid: tuple[int, int] = FULL_SHAPE,
    ):
        import h5py  # only the raw files need it

        self._factor = check_image_size(height, grid)
        self._grid = grid
        self._files, self._images, boxes = [], [], []
        for path in paths:
            f, images, raw_boxes = _open_year(h5py, Path(path), grid)
            self._files.append(f)
            self._images.append(images)
            boxes.append(raw_boxes)
        raw = np.concatenate(boxes) if boxes else np.zeros((0, MAX_BOXES, 5), np.int32)
        self._boxes, self._classes = box_fields(raw)
        self._boxes = scale_boxes(self._boxes, self._factor)
        self._starts = np.cumsum([0] + [len(images) for images in self._images])
        self._length = int(self._starts[-1])
        self.paths = [Path(p) for p in paths]
        self._image_shape = (height, grid[1] // self._factor, NUM_CHANNELS)
        try:
            self.spec = ClimateSpec(NAME, self._image_shape, *(stats or self._sample_stats()))
        except BaseException:  # a bad value in the sampled examples: no file left open
            for f in self._files:
                f.close()
            raise

    def __getstate__(self) -> dict:
        """Pickled as what reopens it (a worker process opens its own HDF5 handles)."""
        stats = (self.spec.mean, self.spec.std)
        return {"args": (self.paths, self._image_shape[0], stats, self._grid), "length": len(self)}

    def __setstate__(self, state: dict) -> None:
        self.__init__(*state["args"])
        self._length = state["length"]

    def read(self, indices: np.ndarray) -> dict[str, np.ndarray]:
        """Reads each distinct example once, in file order and in runs of consecutive rows (so
        HDF5 decompresses each chunk once per run), then puts them in the order asked."""
        indices = np.asarray(indices, np.int64).reshape(-1)
        if len(indices) and (indices.min() < 0 or indices.max() >= len(self)):
            raise IndexError(f"example index out of range [0, {len(self)})")
        distinct, order = np.unique(indices, return_inverse=True)
        images = np.empty((len(distinct), *self._image_shape), np.float16)
        for lo, hi in _runs(distinct, self._starts):
            file_no = int(np.searchsorted(self._starts, distinct[lo], side="right") - 1)
            first = int(distinct[lo] - self._starts[file_no])
            for start in range(0, hi - lo, _READ_ROWS):
                count = min(_READ_ROWS, hi - lo - start)
                block = self._images[file_no][first + start : first + start + count]
                image = self._to_image(block)
                _check_finite(self.paths[file_no], first + start, block, image)
                images[lo + start : lo + start + count] = image
        return {
            "image": images[order],
            "boxes": self._boxes[indices],
            "classes": self._classes[indices],
            SAMPLE_KEY: zero_keys(len(indices)),
        }

    def _to_image(self, block: np.ndarray) -> np.ndarray:
        """[k, 16, H, W] float32 CAM5 fields → [k, h, w, 16] float16 in climate.UNITS."""
        small = downscale_images(block.transpose(0, 2, 3, 1), self._factor)
        with np.errstate(over="ignore"):  # an overflow is inf, refused by _check_finite
            return (small * STORAGE_SCALE).astype(np.float16)

    def _sample_stats(self) -> Stats:
        picks = np.unique(np.linspace(0, len(self) - 1, min(STATS_EXAMPLES, len(self))).round())
        return channel_stats(
            self.read(picks[i : i + _READ_ROWS])["image"] for i in range(0, len(picks), _READ_ROWS)
        )


def _check_finite(path: Path, first_row: int, raw: np.ndarray, image: np.ndarray) -> None:
    """Raises UsageError naming the file, sample and channel of the first non-finite value of
    the float16 images `image` made from `raw` ([k, 16, H, W]; rows first_row, first_row + 1,
    ... of the file): a NaN or inf in the file, or a value too large for float16 storage."""
    bad = ~np.isfinite(image)
    if not bad.any():
        return
    k, _, _, c = (int(i[0]) for i in np.nonzero(bad))
    refuse_sample(path, first_row + k, c, raw[k, c])


# Missing-data markers of the climate model output ExtremeWeather was cut from: a value equal to
# one is missing data, not weather (both overflow float16 storage, so they are always caught).
FILL_VALUES = {1e20: "CESM/CAM's _FillValue", 9.969209968386869e36: "netCDF's default fill"}


def refuse_sample(path: Path, sample: int, c: int, raw: np.ndarray) -> None:
    """Raises the UsageError of channel c of a sample whose float16 image is not finite, `raw`
    (that channel's values in the file, or some rows of them) saying why."""
    where = f"{path}: sample {sample}, channel {c} ({CHANNELS[c]})"
    raw_bad = ~np.isfinite(raw)
    if raw_bad.any():
        value = raw[raw_bad][0]
        raise UsageError(f"{where}: non-finite value {value} in the file; fix or drop the file")
    peak = float(np.max(np.abs(raw)))
    fill = next((f for f in FILL_VALUES if np.any(np.isclose(raw, f, rtol=1e-6))), None)
    if fill is not None:
        raise UsageError(
            f"{where}: fill value {fill:g} (missing data, {FILL_VALUES[fill]}) in the file; "
            "ExtremeWeather has no missing values: fix or drop the file"
        )
    raise UsageError(
        f"{where}: |value| up to {peak:.4g} in the file overflows float16 storage "
        f"(× {float(STORAGE_SCALE[c]):g} into {UNITS[c]}, max 65504); not ExtremeWeather's units?"
    )


def _check_stats(where: str, mean, std) -> None:
    """Every channel's mean and std finite (a converter's stats.json, or computed ones)."""
    for name, values in (("mean", mean), ("std", std)):
        for c, value in enumerate(values):
            if not math.isfinite(value):
                raise UsageError(
                    f"{where}: {name} of channel {c} ({CHANNELS[c]}) is {value}, not finite; "
                    "convert again"
                )


def _open_year(h5py, path: Path, grid: tuple[int, int]):
    """Opens one raw year and checks its layout; a mismatch names the file and what was expected."""
    expected = (
        f"expected datasets images float32 [n, 16, {grid[0]}, {grid[1]}] and boxes int [n, 15, 5]"
    )
    if not path.is_file():
        raise UsageError(f"{path}: ExtremeWeather file not found; {_HOW_TO_GET}")
    try:
        f = h5py.File(path, "r")
    except OSError as e:
        raise UsageError(f"{path}: not a readable HDF5 file ({e}); {expected}") from None
    missing = [name for name in ("images", "boxes") if name not in f]
    if missing:
        f.close()
        raise UsageError(f"{path}: no dataset {' or '.join(missing)}; {expected}")
    images, boxes = f["images"], f["boxes"]
    if (
        images.ndim != 4
        or images.shape[1:] != (NUM_CHANNELS, *grid)
        or images.dtype != np.float32
        or boxes.shape != (images.shape[0], MAX_BOXES, 5)
        or boxes.dtype.kind not in "iu"
    ):
        found = (
            f"images {images.dtype} {list(images.shape)}, boxes {boxes.dtype} {list(boxes.shape)}"
        )
        f.close()
        raise UsageError(f"{path}: has {found}; {expected}")
    raw_boxes = np.asarray(boxes[...], np.int32)
    if not np.isin(raw_boxes[..., 4], range(-1, len(CLASSES))).all():
        f.close()
        raise UsageError(f"{path}: boxes class column outside -1..3 ({', '.join(CLASSES)})")
    return f, images, raw_boxes


def _runs(distinct: np.ndarray, starts: np.ndarray) -> list[tuple[int, int]]:
    """[lo, hi) positions of runs of consecutive indices in sorted `distinct` within one file."""
    if len(distinct) == 0:
        return []
    file_no = np.searchsorted(starts, distinct, side="right")
    breaks = np.flatnonzero((np.diff(distinct) != 1) | (np.diff(file_no) != 0)) + 1
    edges = [0, *breaks.tolist(), len(distinct)]
    return list(zip(edges[:-1], edges[1:], strict=True))


class ConvertedClimateSource(_FirstN):
    """One split written by `convert`: the images memory-mapped, so a read touches only its rows."""

    def __init__(self, directory: Path):
        directory = Path(directory)
        stats_file = directory / "stats.json"
        try:
            meta = json.loads(stats_file.read_text())
            height, width = int(meta["height"]), int(meta["width"])
            stats = (tuple(meta["mean"]), tuple(meta["std"]))
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise UsageError(
                f"{stats_file}: not a converter's stats.json ({e}); convert again with "
                "`python -m hpcai_jax.data.extremeweather`"
            ) from None
        _check_stats(str(stats_file), *stats)
        self.spec = ClimateSpec(NAME, (height, width, NUM_CHANNELS), *stats)
        expected = {name: shape for name, (shape, _) in self.spec.fields.items()}
        self.directory = directory
        arrays = {}
        for name, file in (("image", "images"), ("boxes", "boxes"), ("classes", "classes")):
            path = directory / f"{file}.npy"
            try:
                array = np.load(path, mmap_mode="r")
            except (OSError, ValueError) as e:
                raise UsageError(f"{path}: not readable ({e}); convert again") from None
            dtype = self.spec.fields[name][1]
            if array.shape[1:] != expected[name] or array.dtype != dtype:
                raise UsageError(
                    f"{path}: has {array.dtype} {list(array.shape)}; expected {dtype} "
                    f"[n, {', '.join(map(str, expected[name]))}] as its stats.json says"
                )
            arrays[name] = array if name == "image" else np.asarray(array)
        if len({len(a) for a in arrays.values()}) != 1:
            raise UsageError(f"{directory}: images, boxes and classes differ in length")
        self._arrays = arrays
        self._length = len(arrays["image"])
        self.meta = meta

    def __getstate__(self) -> dict:
        """Pickled as its directory (a worker process maps the files itself)."""
        return {"directory": self.directory, "length": len(self)}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["directory"])
        self._length = state["length"]

    def read(self, indices: np.ndarray) -> dict[str, np.ndarray]:
        indices = np.asarray(indices, np.int64).reshape(-1)
        if len(indices) and (indices.min() < 0 or indices.max() >= len(self)):
            raise IndexError(f"example index out of range [0, {len(self)})")
        out = {name: np.asarray(array[indices]) for name, array in self._arrays.items()}
        return {**out, SAMPLE_KEY: zero_keys(len(indices))}


def raw_files(raw_dir: Path, split: str) -> list[Path]:
    """The split's climo_*.h5 files in name (year) order; none → UsageError."""
    paths = sorted((Path(raw_dir) / split).glob("climo_*.h5"))
    if not paths:
        raise UsageError(f"--data_dir={raw_dir}: no {split}/climo_*.h5 files; {_HOW_TO_GET}")
    return paths


def converted_dir(data_dir: Path, height: int) -> Path:
    return Path(data_dir) / f"converted_{height}"


def open_extremeweather(
    data_dir: str | Path, height: int, grid: tuple[int, int] = FULL_SHAPE
) -> tuple[ConvertedClimateSource | RawClimateSource, ConvertedClimateSource | RawClimateSource]:
    """(train, test) from DATA_DIR/converted_<height>/ if complete, else from the raw years
    (the spec's mean/std then from STATS_EXAMPLES training examples)."""
    check_image_size(height, grid)
    data_dir = Path(data_dir) if data_dir else None
    if data_dir is None or not data_dir.is_dir():
        raise UsageError(
            f"--data_dir={data_dir or ''}: ExtremeWeather directory not found; {_HOW_TO_GET}"
        )
    converted = converted_dir(data_dir, height)
    if all((converted / split / "stats.json").is_file() for split in SPLITS):
        return tuple(ConvertedClimateSource(converted / split) for split in SPLITS)
    train = RawClimateSource(raw_files(data_dir, "train"), height, grid=grid)
    test = RawClimateSource(
        raw_files(data_dir, "test"), height, stats=(train.spec.mean, train.spec.std), grid=grid
    )
    return train, test
