"""Climate data: the shared spec and helpers, the synthetic generator, the raw ExtremeWeather
reader (tiny HDF5 files of the real layout on a 48 × 72 grid), the converter and the CLI."""

import dataclasses
import json
import pickle
import re
import subprocess
import sys

import h5py
import numpy as np
import pytest

from hpcai_jax.data import climate, climate_convert, extremeweather, synthetic_climate
from hpcai_jax.data.climate_train import ClimateTrainSet
from hpcai_jax.errors import UsageError

GRID = (48, 72)  # the tests' full grid: 16× smaller than ExtremeWeather's 768 × 1152
HEIGHT = 24  # factor 2


# --- climate.py -----------------------------------------------------------------------------


def test_check_image_size():
    assert [climate.check_image_size(h) for h in (768, 384, 192, 96, 48)] == [1, 2, 4, 8, 16]
    assert climate.check_image_size(24, GRID) == 2
    for bad in (224, 3, 0, 1000):  # 3 divides 768 but 1152 / 256 is not whole
        with pytest.raises(UsageError, match=f"--image_size={bad}: expected an even height"):
            climate.check_image_size(bad)


def test_downscale_and_box_fields():
    image = np.arange(24, dtype=np.float16).reshape(1, 4, 6, 1)  # rows 0..5, 6..11, ...
    raw = np.array([[[8, 10, 20, 30, 3], [-1, -1, -1, -1, -1]]], np.int32)
    boxes, classes = climate.box_fields(raw)
    small, small_boxes = climate.downscale(image, boxes, 2)
    # Block means of [[0, 1], [6, 7]] = 3.5, [[2, 3], [8, 9]] = 5.5, ...
    np.testing.assert_array_equal(small[0, :, :, 0], [[3.5, 5.5, 7.5], [15.5, 17.5, 19.5]])
    assert small.dtype == np.float32
    np.testing.assert_array_equal(small_boxes, [[[4, 5, 10, 15], [-1, -1, -1, -1]]])
    np.testing.assert_array_equal(classes, [[3, -1]])


def test_channel_stats_streams_in_float64():
    rng = np.random.default_rng(0)
    # Pressures: a large offset with a small spread, where a one-pass float32 sum would fail.
    images = (1e5 + rng.normal(0, 300, (11, 3, 5, 2)) * [1, 0.01]).astype(np.float32)
    x = images.astype(np.float64).reshape(-1, 2)
    mean, std = climate.channel_stats(images, chunk_size=3)
    np.testing.assert_allclose(mean, x.mean(0), rtol=1e-12)
    np.testing.assert_allclose(std, x.std(0), rtol=1e-9)
    from_chunks = climate.channel_stats(images[i : i + 4] for i in range(0, 11, 4))
    np.testing.assert_allclose(from_chunks, (mean, std), rtol=1e-9)


def test_spec_fields():
    spec = climate.ClimateSpec("x", (96, 144, 16), (0.0,) * 16, (1.0,) * 16)
    assert spec.fields == {
        "image": ((96, 144, 16), "float16"),
        "boxes": ((15, 4), "float32"),
        "classes": ((15,), "int32"),
        "sample_key": ((2,), "uint32"),
    }


# --- synthetic_climate.py -------------------------------------------------------------------


@pytest.fixture(scope="module")
def synthetic():
    return synthetic_climate.generate(0, 96, 48, seed=3)


def test_synthetic_examples_depend_only_on_seed_and_index(synthetic):
    part = synthetic_climate.generate(40, 3, 48, seed=3)
    for name in ("image", "boxes", "classes"):
        np.testing.assert_array_equal(part[name], synthetic[name][40:43])
    other = synthetic_climate.generate(40, 1, 48, seed=4)
    assert not np.array_equal(other["image"][0], synthetic["image"][40])
    # Boxes are full-resolution boxes divided by the factor: exactly half at half the height.
    finer = synthetic_climate.generate(40, 3, 96, seed=3)
    np.testing.assert_array_equal(
        np.where(part["boxes"] < 0, -1, part["boxes"] * 2), finer["boxes"]
    )
    assert finer["image"].shape == (3, 96, 144, 16)


def test_synthetic_fields_and_boxes(synthetic):
    image, boxes, classes = synthetic["image"], synthetic["boxes"], synthetic["classes"]
    assert image.shape == (96, 48, 72, 16) and image.dtype == np.float16
    assert np.isfinite(image).all()
    x = image.astype(np.float32)
    c = climate.CHANNELS.index
    assert 950 < x[..., c("PSL")].mean() < 1030 and 250 < x[..., c("TS")].mean() < 300
    assert x[..., c("PRECT")].min() >= 0 and x[..., c("TMQ")].min() >= 0
    valid = classes >= 0
    assert set(np.unique(classes[valid])) == {0, 1, 2, 3}
    assert (boxes[~valid] == -1).all() and valid.sum(1).min() >= 1 and valid.sum(1).max() <= 6
    assert (valid[:, :-1] >= valid[:, 1:]).all()  # boxes first, padding after
    b = boxes[valid]
    assert (b[:, 0] >= 0).all() and (b[:, 1] >= 0).all()
    assert (b[:, 2] <= 48).all() and (b[:, 3] <= 72).all()
    h, w = b[:, 2] - b[:, 0], b[:, 3] - b[:, 1]
    cls = classes[valid]
    ar = cls == synthetic_climate.AR
    assert (w[ar] / h[ar] > 1.5).all()  # long, thin, diagonal-ish bands
    np.testing.assert_allclose(h[~ar], w[~ar], rtol=1e-5)  # vortices are round
    assert h[cls == 2].min() > max(h[cls == 0].max(), h[cls == 1].max())  # ETCs are larger


def test_synthetic_classes_are_separable(synthetic):
    """TCs are strong vortices and TDs weak ones: the strongest 850 hPa wind in their boxes
    tells them apart (backgrounds add ±10 m/s)."""
    wind = np.hypot(*(synthetic["image"][..., climate.CHANNELS.index(n)] for n in ("U850", "V850")))
    strongest = {0: [], 1: []}
    for row, col in zip(*np.nonzero(np.isin(synthetic["classes"], (0, 1))), strict=True):
        y0, x0, y1, x1 = synthetic["boxes"][row, col].round().astype(int)
        strongest[int(synthetic["classes"][row, col])].append(wind[row, y0:y1, x0:x1].max())
    assert np.median(strongest[1]) > np.median(strongest[0]) + 15


def test_synthetic_load_stats_from_training_split():
    train, held_out = synthetic_climate.load(48, train_examples=10, eval_examples=4, seed=1)
    assert (len(train), len(held_out)) == (10, 4)
    x = train.arrays["image"].astype(np.float64).reshape(-1, 16)
    np.testing.assert_allclose(train.spec.mean, x.mean(0), rtol=1e-9)
    np.testing.assert_allclose(train.spec.std, x.std(0), rtol=1e-9)
    assert held_out.spec == train.spec and train.spec.image_shape == (48, 72, 16)
    assert not np.array_equal(held_out.arrays["image"][0], train.arrays["image"][0])
    np.testing.assert_array_equal(
        train.read(np.array([7, 2]))["image"],
        synthetic_climate.generate(0, 8, 48, 1)["image"][[7, 2]],
    )


# --- extremeweather.py: tiny raw years of the real layout -----------------------------------


def _write_year(
    path, n, seed, grid=GRID, images_shape=None, with_boxes=True, bad_class=False, poke=None
):
    rng = np.random.default_rng(seed)
    images = rng.normal(0, 1, (n, 16, *grid)).astype(np.float32)
    images[:, 1] += 1e5  # PS in Pa: overflows float16 unless stored in hPa
    images[:, 0] = np.abs(images[:, 0]) * 1e-7  # PRECT in m/s
    if poke:  # (sample, channel, value) at one pixel
        images[poke[0], poke[1], 3, 5] = poke[2]
    boxes = np.full((n, 15, 5), -1, np.int32)
    for i in range(n):
        for k in range(i % 4 + 1):
            y0, x0 = rng.integers(0, grid[0] - 8), rng.integers(0, grid[1] - 8)
            boxes[i, k] = (y0, x0, y0 + rng.integers(2, 8), x0 + rng.integers(2, 8), (i + k) % 4)
    boxes[0, 0, 4] = 4 if bad_class else boxes[0, 0, 4]
    with h5py.File(path, "w") as f:
        f.create_dataset(
            "images",
            data=images if images_shape is None else images.reshape(images_shape),
            compression="gzip",
            chunks=(1, 1, *grid) if images_shape is None else True,
        )
        if with_boxes:
            f.create_dataset("boxes", data=boxes, compression="gzip")
    return images, boxes


@pytest.fixture(scope="module")
def raw(tmp_path_factory):
    """DATA_DIR with train/ (two years: 4 + 3 examples) and test/ (3 examples)."""
    root = tmp_path_factory.mktemp("extremeweather")
    (root / "train").mkdir()
    (root / "test").mkdir()
    a = _write_year(root / "train" / "climo_1979.h5", 4, 0)
    b = _write_year(root / "train" / "climo_1981.h5", 3, 1)
    test = _write_year(root / "test" / "climo_1984.h5", 3, 2)
    train = tuple(np.concatenate(parts) for parts in zip(a, b, strict=True))
    return root, train, test


def _expected(images, boxes, factor):
    """Hand-rolled: channels last, block mean in float64, hPa and mm/day, float16; boxes / f."""
    x = images.transpose(0, 2, 3, 1).astype(np.float64)
    n, h, w, c = x.shape
    x = x.reshape(n, h // factor, factor, w // factor, factor, c).mean(axis=(2, 4))
    x[..., 0] *= 1000 * 86400
    x[..., 1:3] /= 100
    classes = boxes[..., 4]
    scaled = np.where(classes[..., None] >= 0, boxes[..., :4] / factor, -1)
    return x.astype(np.float16), scaled.astype(np.float32), classes


def test_raw_reads_scattered_rows(raw):
    root, (images, boxes), _ = raw
    paths = extremeweather.raw_files(root, "train")
    source = extremeweather.RawClimateSource(paths, HEIGHT, grid=GRID)
    assert len(source) == 7 and source.spec.image_shape == (24, 36, 16)
    picks = np.array([5, 0, 5, 3, 4, 6])  # crosses the two files, repeats 5
    got = source.read(picks)
    want_image, want_boxes, want_classes = _expected(images[picks], boxes[picks], 2)
    assert got["image"].dtype == np.float16 and np.isfinite(got["image"]).all()
    # float32 block sums of unit-scale values round at ~1e-7: near-zero means differ by that.
    np.testing.assert_allclose(got["image"], want_image, rtol=1e-3, atol=1e-6)
    np.testing.assert_array_equal(got["boxes"], want_boxes)
    np.testing.assert_array_equal(got["classes"], want_classes)
    # stats=None: from evenly spaced training examples, here all 7 of them.
    every = _expected(images, boxes, 2)[0].astype(np.float64).reshape(-1, 16)
    np.testing.assert_allclose(source.spec.mean, every.mean(0), rtol=1e-3, atol=1e-6)
    np.testing.assert_allclose(source.spec.std, every.std(0), rtol=1e-3, atol=1e-6)
    full = extremeweather.RawClimateSource(
        paths[:1], 48, stats=(source.spec.mean, source.spec.std), grid=GRID
    )
    np.testing.assert_allclose(
        full.read(np.array([1]))["image"], _expected(images[1:2], boxes[1:2], 1)[0], rtol=1e-3
    )
    assert len(source.head(2)) == 2
    with pytest.raises(IndexError):
        source.head(2).read(np.array([2]))


def test_convert_equals_raw_reads_and_prefers_converted(raw, tmp_path):
    root, _, _ = raw
    train, test = extremeweather.open_extremeweather(root, HEIGHT, grid=GRID)
    assert isinstance(train, extremeweather.RawClimateSource)
    lines = []
    out = climate_convert.convert(root, tmp_path, HEIGHT, grid=GRID, log=lines.append)
    assert out == tmp_path / "converted_24" and sorted(p.name for p in tmp_path.iterdir()) == [
        "converted_24"
    ]
    # First each file's layout, then progress with rate and ETA.
    assert lines[0] == (
        f"{root / 'train' / 'climo_1979.h5'}: images float32 [4, 16, 48, 72], chunks "
        "[1, 1, 48, 72] (1 sample per chunk), compression gzip"
    )
    assert re.fullmatch(r"10/10 samples \(test\), [\d.]+ samples/s, ETA 0 s", lines[-1])
    c_train, c_test = extremeweather.open_extremeweather(tmp_path, HEIGHT, grid=GRID)
    assert isinstance(c_train, extremeweather.ConvertedClimateSource)
    for converted, direct in ((c_train, train), (c_test, test)):
        rows = np.arange(len(direct))[::-1]
        for name, array in converted.read(rows).items():
            np.testing.assert_array_equal(array, direct.read(rows)[name])
    # Training reads go to worker processes: both sources pickle as their files, not their data,
    # and read the same there (heads included).
    keys = np.array([[0, 0, 0, s] for s in range(3)])
    for source in (train.head(5), c_train.head(5)):
        reader = ClimateTrainSet(source, flip=True).train_reader()
        pickled = pickle.dumps(reader)
        assert len(pickled) < 4096
        copy = pickle.loads(pickled)
        assert len(copy.source) == 5
        for name, array in copy(np.array([4, 0, 4]), keys).items():
            np.testing.assert_array_equal(array, reader(np.array([4, 0, 4]), keys)[name])
    meta = json.loads((out / "test" / "stats.json").read_text())
    everything = train.read(np.arange(7))["image"].astype(np.float64).reshape(-1, 16)
    np.testing.assert_allclose(meta["mean"], everything.mean(0), rtol=1e-9)
    np.testing.assert_allclose(c_test.spec.std, everything.std(0), rtol=1e-9)
    assert meta["height"] == 24 and meta["width"] == 36 and meta["examples"] == 3
    assert meta["sources"] == [
        {
            "file": str(root / "test" / "climo_1984.h5"),
            "bytes": (root / "test" / "climo_1984.h5").stat().st_size,
        }
    ]
    lines = []  # a finished conversion is skipped
    assert climate_convert.convert(root, tmp_path, HEIGHT, grid=GRID, log=lines.append) == out
    assert lines == [f"{out}: already converted; delete it to convert again"]


def test_interrupted_conversion_resumes_where_it_stopped(raw, tmp_path, monkeypatch):
    root, _, _ = raw
    reference = climate_convert.convert(root, tmp_path / "once", HEIGHT, grid=GRID, log=len)
    convert_unit, calls = climate_convert.convert_unit, []

    def interrupted(unit, *args):
        if len(calls) == 1:
            raise KeyboardInterrupt  # the second unit (of 3: 4, 3 and 3 samples)
        calls.append(unit)
        return convert_unit(unit, *args)

    monkeypatch.setattr(climate_convert, "convert_unit", interrupted)
    with pytest.raises(KeyboardInterrupt):
        climate_convert.convert(root, tmp_path, HEIGHT, grid=GRID, log=len)
    # The hidden .partial directory is never taken for a converted set.
    assert [p.name for p in tmp_path.iterdir() if p.name != "once"] == [".converted_24.partial"]
    with pytest.raises(UsageError, match="no train/climo_"):
        extremeweather.open_extremeweather(tmp_path, HEIGHT, grid=GRID)
    monkeypatch.setattr(climate_convert, "convert_unit", convert_unit)
    lines = []
    out = climate_convert.convert(root, tmp_path, HEIGHT, grid=GRID, log=lines.append)
    assert "resuming" in lines[3] and "1 units done before" in lines[3]
    assert lines[4].startswith("7/10 samples (train)")  # the first unit was not redone
    _assert_same_conversion(out, reference)


def _assert_same_conversion(a, b):
    for split in ("train", "test"):
        for name in ("images.npy", "boxes.npy", "classes.npy"):
            assert (a / split / name).read_bytes() == (b / split / name).read_bytes(), name
        ja, jb = (json.loads((d / split / "stats.json").read_text()) for d in (a, b))
        assert ja["mean"] == jb["mean"] and ja["std"] == jb["std"]


def test_units_read_whole_chunks():
    layout = climate_convert.FileLayout(
        "y.h5", (1460, 16, 768, 1152), "float32", (46, 1, 24, 36), "gzip"
    )
    units = climate_convert.plan_units(layout, "train", 100, factor=4)
    assert [u.start for u in units[:3]] == [0, 46, 92] and units[-1].stop == 1460
    assert units[1].row == 146  # rows of the split's output: after 100 of an earlier year
    assert all(u.channels_per_slab == 1 and u.rows_per_slab % 24 == 0 for u in units)
    # One slab (46 samples × 1 channel × rows × 1152 float32) within SLAB_BYTES.
    assert 46 * units[0].rows_per_slab * 1152 * 4 <= climate_convert.SLAB_BYTES
    one = climate_convert.plan_units(
        dataclasses.replace(layout, chunks=(1, 16, 768, 1152)), "test", 0, factor=4
    )
    assert [(u.start, u.stop) for u in one[:2]] == [(0, 4), (4, 8)]
    assert one[0].channels_per_slab == 16 and one[0].rows_per_slab == 768


def test_output_is_the_same_whatever_the_chunking_and_workers(tmp_path, monkeypatch):
    """A year chunked across several samples (and channels and rows, like h5py's automatic
    chunking) and the same year in one-sample chunks, converted by 1 and by 2 processes."""
    monkeypatch.setattr(climate_convert, "SLAB_BYTES", 1)  # slabs of the fewest whole chunks
    images, boxes = _write_year(tmp_path / "first.h5", 7, 0)
    for name, chunks in (("many", (3, 4, 16, 24)), ("one", (1, 16, 48, 72))):
        for split, data in (("train", images), ("test", images[:4])):
            (tmp_path / name / split).mkdir(parents=True)
            with h5py.File(tmp_path / name / split / "climo_1979.h5", "w") as f:
                f.create_dataset("images", data=data, chunks=chunks, compression="gzip")
                f.create_dataset("boxes", data=boxes[: len(data)])
    outs = [
        climate_convert.convert(tmp_path / name, tmp_path / f"{name}{w}", HEIGHT, w, GRID, len)
        for name, w in (("many", 1), ("many", 2), ("one", 1))
    ]
    for out in outs[1:]:
        _assert_same_conversion(out, outs[0])
    source = extremeweather.RawClimateSource(
        extremeweather.raw_files(tmp_path / "one", "train"), HEIGHT, grid=GRID
    )
    converted = extremeweather.ConvertedClimateSource(outs[0] / "train")
    np.testing.assert_array_equal(
        converted.read(np.arange(7))["image"], source.read(np.arange(7))["image"]
    )


def test_bad_files_name_the_file(tmp_path):
    (tmp_path / "train").mkdir()
    bad = tmp_path / "train" / "climo_1979.h5"
    _write_year(bad, 2, 0, images_shape=(2, 16, 24, 144))
    with pytest.raises(UsageError, match=r"climo_1979.h5: has images float32 \[2, 16, 24, 144\]"):
        extremeweather.RawClimateSource([bad], HEIGHT, grid=GRID)
    _write_year(bad, 2, 0, bad_class=True)
    with pytest.raises(UsageError, match="climo_1979.h5: boxes class column outside -1..3"):
        extremeweather.RawClimateSource([bad], HEIGHT, grid=GRID)
    _write_year(bad, 2, 0, with_boxes=False)
    with pytest.raises(UsageError, match="climo_1979.h5: no dataset boxes"):
        extremeweather.RawClimateSource([bad], HEIGHT, grid=GRID)
    bad.write_bytes(b"not hdf5")
    with pytest.raises(UsageError, match="climo_1979.h5: not a readable HDF5 file"):
        extremeweather.RawClimateSource([bad], HEIGHT, grid=GRID)
    with pytest.raises(UsageError, match="climo_1980.h5: ExtremeWeather file not found"):
        extremeweather.RawClimateSource([tmp_path / "climo_1980.h5"], HEIGHT, grid=GRID)
    bad.unlink()
    with pytest.raises(UsageError, match="no train/climo_.*extremeweatherdataset.github.io"):
        extremeweather.open_extremeweather(tmp_path, HEIGHT, grid=GRID)
    with pytest.raises(
        UsageError, match="--data_dir=.*nowhere: ExtremeWeather directory not found"
    ):
        extremeweather.open_extremeweather(tmp_path / "nowhere", HEIGHT, grid=GRID)


@pytest.mark.slow
def test_cli_bad_input_is_one_line(tmp_path, capsys):
    assert climate_convert.main([f"--raw_dir={tmp_path}", "--image_size=224"]) == 2
    assert capsys.readouterr().err == (
        "hpcai_jax.data.climate_convert: error: --image_size=224: expected an even height that "
        "divides 768 (e.g. 768, 384, 192, 96, 48) for the climate data sets\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "hpcai_jax.data.climate_convert", f"--raw_dir={tmp_path}"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and "no train/climo_*.h5 files" in done.stderr


@pytest.mark.parametrize(
    "value, message",
    [
        (np.nan, "non-finite value nan in the file"),
        (np.inf, "non-finite value inf in the file"),
        (1e9, "overflows float16 storage"),  # finite in float32, inf once stored in float16
        (1e20, "fill value 1e+20 (missing data, CESM/CAM's _FillValue)"),
    ],
)
def test_non_finite_values_are_refused_naming_file_sample_and_channel(tmp_path, value, message):
    """A NaN, an inf, or a value float16 storage turns into inf (the converter once wrote
    `"mean": [Infinity, ...]`): the reader, hence the converter, stops in one line naming the
    file, the sample and the channel; a stats.json with a non-finite mean is refused too."""
    for split in ("train", "test"):
        (tmp_path / split).mkdir()
    _write_year(tmp_path / "test" / "climo_1984.h5", 2, 2)
    bad = tmp_path / "train" / "climo_1979.h5"
    _write_year(bad, 3, 0, poke=(2, 6, value))
    where = rf"climo_1979.h5: sample 2, channel 6 \(TMQ\): .*{re.escape(message)}"
    with pytest.raises(UsageError, match=where) as err:
        extremeweather.RawClimateSource([bad], HEIGHT, grid=GRID)  # its statistics read all 3
    assert "\n" not in str(err.value)
    with pytest.raises(UsageError, match=where):
        climate_convert.convert(tmp_path, tmp_path / "out", HEIGHT, grid=GRID, log=len)
    assert not list((tmp_path / "out").glob("converted_*/train/stats.json"))
    if value != 1e9:
        return
    bad.unlink()  # a good year converts; then its stats.json is spoiled
    _write_year(tmp_path / "train" / "climo_1980.h5", 3, 0)
    out = climate_convert.convert(tmp_path, tmp_path / "out", HEIGHT, grid=GRID, log=len)
    split = out / "train"
    meta = json.loads((split / "stats.json").read_text())
    meta["mean"][1] = float("inf")
    (split / "stats.json").write_text(json.dumps(meta))
    with pytest.raises(UsageError, match=r"stats.json: mean of channel 1 \(PS\) is inf"):
        extremeweather.ConvertedClimateSource(split)
