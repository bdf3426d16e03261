"""The image transforms: decoding, the random-resized crop and flip, the held-out centre crop."""

import io

import numpy as np
import pytest
from PIL import Image

from hpcai_jax.data import augment, jpeg_region
from hpcai_jax.data.sampler import BootstrapSampler
from hpcai_jax.data.workers import augment_keys


def _ramp(height: int, width: int) -> Image.Image:
    """R = row, G = column: a crop's pixels tell where in the image they came from."""
    rows, cols = np.mgrid[0:height, 0:width]
    return Image.fromarray(np.stack([rows, cols, np.zeros_like(rows)], -1).astype(np.uint8))


def _noise(seed: int = 0) -> Image.Image:
    return Image.fromarray(np.random.default_rng(seed).integers(0, 256, (30, 40, 3), np.uint8))


def test_decode_bytes_and_arrays_to_the_asked_channels():
    rgb = np.random.default_rng(0).integers(0, 256, (6, 5, 3), np.uint8)
    png = io.BytesIO()
    Image.fromarray(rgb).save(png, format="PNG")
    np.testing.assert_array_equal(np.asarray(augment.decode(png.getvalue(), 3)), rgb)
    np.testing.assert_array_equal(np.asarray(augment.decode(rgb, 3)), rgb)
    gray = io.BytesIO()
    Image.fromarray(np.full((4, 7), 200, np.uint8)).save(gray, format="JPEG")
    as_rgb = np.asarray(augment.decode(gray.getvalue(), 3))
    assert as_rgb.shape == (4, 7, 3) and np.all(np.abs(as_rgb.astype(int) - 200) <= 2)
    # ITU-R 601 luma of pure red: 0.299 × 255 = 76.
    red = np.zeros((3, 3, 3), np.uint8)
    red[..., 0] = 255
    assert np.asarray(augment.decode(red, 1)).tolist() == [[76] * 3] * 3
    assert np.asarray(augment.decode(red[..., :1], 1)).shape == (3, 3)


def test_eval_image_takes_the_central_square_of_the_resized_image():
    out = augment.eval_image(_ramp(60, 80), 14)  # shorter side to 16: 21 × 16, then 14 × 14
    assert out.shape == (14, 14, 3) and out.dtype == np.uint8
    # The crop starts 1 row and 3 columns into the resized image; resized pixel k's centre is
    # at (k + 0.5) × 60/16 − 0.5 rows and (k + 0.5) × 80/21 − 0.5 columns of the source.
    rows = (np.arange(14) + 1.5) * 60 / 16 - 0.5
    cols = (np.arange(14) + 3.5) * 80 / 21 - 0.5
    np.testing.assert_allclose(out[:, 7, 0], rows, atol=1)
    np.testing.assert_allclose(out[7, :, 1], cols, atol=1)
    gray = augment.eval_image(augment.decode(np.zeros((9, 30, 1), np.uint8), 1), 8)
    assert gray.shape == (8, 8, 1)


@pytest.mark.parametrize("shape", [(30, 40), (375, 500), (12, 200)])
def test_crop_boxes_stay_inside_with_the_recipes_area_and_aspect(shape):
    height, width = shape
    boxes = [augment.crop_box(height, width, augment.example_rng(0, 0, 0, i)) for i in range(500)]
    found = [b for b in boxes if b is not None]
    for top, left, h, w in found:
        assert 0 <= top <= height - h and 0 <= left <= width - w
        # Rounding each side moves the area and aspect by at most half a pixel per side.
        assert 0.08 * height * width - (h + w) <= h * w <= height * width
        assert (w + 0.5) / (h - 0.5) >= 3 / 4 and (w - 0.5) / (h + 0.5) <= 4 / 3
    if shape == (375, 500):
        assert len(found) >= 495  # nearly always found in 10 attempts on ImageNet-like shapes
        areas = np.array([h * w for _, _, h, w in found]) / (height * width)
        assert 0.08 <= areas.min() < 0.12 and 0.9 < areas.max() <= 1.0
        # Uniform on [0.08, 1] has mean 0.54; big areas miss more often (a 4:3 frame fits a 4:3
        # crop of area 1 only), so the retries pull the mean down.
        assert 0.38 < np.mean(areas) < 0.54
    if shape == (12, 200):  # aspect 1:16: a crop of aspect ≤ 4/3 holds ≤ 192/2400 of the area
        assert len(found) < 50


def test_train_crop_samples_the_box_and_flips_half_the_time():
    image, size = _ramp(40, 60), 16
    flips = 0
    for slot in range(300):
        top, left, h, w = augment.crop_box(40, 60, augment.example_rng(3, 1, 0, slot))
        out = augment.train_image_reference(image, size, augment.example_rng(3, 1, 0, slot)).astype(
            float
        )
        flipped = out[size // 2, -1, 1] < out[size // 2, 0, 1]
        flips += flipped
        cols = out[:, ::-1, 1] if flipped else out[:, :, 1]
        # Output pixel i's centre maps to top + (i + 0.5) h / S - 0.5 in the source.
        centres = (np.arange(size) + 0.5) / size
        np.testing.assert_allclose(out[:, size // 2, 0], top + centres * h - 0.5, atol=1.01)
        np.testing.assert_allclose(cols[size // 2], left + centres * w - 0.5, atol=1.01)
    assert 120 <= flips <= 180  # binomial(300, 1/2): mean 150, sd 8.7


def test_augmentation_is_a_function_of_seed_member_epoch_and_slot():
    image = _noise()

    def crop(seed, member, epoch, slot):
        return augment.train_image_reference(
            image, 16, augment.example_rng(seed, member, epoch, slot)
        )

    base = crop(0, 1, 2, 3)
    assert base.shape == (16, 16, 3) and base.dtype == np.uint8
    np.testing.assert_array_equal(base, crop(0, 1, 2, 3))
    for other in [(1, 1, 2, 3), (0, 0, 2, 3), (0, 1, 3, 3), (0, 1, 2, 4), (0, 2, 1, 3)]:
        assert not np.array_equal(base, crop(*other)), other
    # The keys arrive as NumPy integers (augment_keys); one outside 64 bits would alias another.
    np.testing.assert_array_equal(base, crop(*np.array([0, 1, 2, 3], np.int64)))
    for bad in [(-1, 1, 2, 3), (0, 1, 2, 1 << 64)]:
        with pytest.raises(ValueError, match="outside"):
            augment.example_rng(*bad)


def test_fallback_after_ten_misses_is_the_held_out_crop():
    image = Image.fromarray(np.random.default_rng(1).integers(0, 256, (4, 120, 3), np.uint8))
    for slot in range(20):
        out = augment.train_image_reference(image, 8, augment.example_rng(0, 0, 0, slot))
        reference = augment.eval_image(image, 8)
        assert np.array_equal(out, reference) or np.array_equal(out, reference[:, ::-1])


def test_augment_keys_follow_the_members_epoch_order():
    sampler = BootstrapSampler("with_replacement", num_examples=40, batch_size=8, seed=7)
    keys = augment_keys(sampler, step=11, block=((2, 4), (4, 8)))  # 5 steps an epoch
    assert keys.shape == (2, 4, 4) and keys.dtype == np.int64
    assert keys[..., 0].tolist() == [[7] * 4] * 2
    assert keys[..., 1].tolist() == [[2] * 4, [3] * 4]
    assert keys[..., 2].tolist() == [[2] * 4] * 2
    assert keys[..., 3].tolist() == [[12, 13, 14, 15]] * 2  # step 1 of epoch 2, rows 4..7


def _photo_jpeg(rng: np.random.Generator, height: int, width: int) -> bytes:
    """An ImageNet-like JPEG (quality 90): a smooth colour field plus fine noise."""
    coarse = Image.fromarray(rng.integers(0, 256, (6, 8, 3), dtype=np.uint8))
    smooth = np.asarray(coarse.resize((width, height), Image.Resampling.BICUBIC), np.int16)
    pixels = np.clip(smooth + rng.normal(0, 12, (height, width, 1)), 0, 255).astype(np.uint8)
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, format="JPEG", quality=90)
    return buf.getvalue()


def _ks(a: np.ndarray, b: np.ndarray) -> float:
    """The two-sample Kolmogorov–Smirnov statistic: the largest gap between the two ECDFs."""
    grid = np.concatenate([a, b])
    cdf_a = np.searchsorted(np.sort(a), grid, side="right") / len(a)
    cdf_b = np.searchsorted(np.sort(b), grid, side="right") / len(b)
    return float(np.abs(cdf_a - cdf_b).max())


def _reference_crop_box(height, width, rng: np.random.Generator):
    """RandomResizedCrop's box as torchvision draws it, with NumPy's generator: the sampler of
    the full-decode path before the path's own generator replaced it."""
    area = height * width
    for _ in range(10):
        target = area * rng.uniform(0.08, 1.0)
        aspect = np.exp(rng.uniform(np.log(3 / 4), np.log(4 / 3)))
        w, h = round(np.sqrt(target * aspect)), round(np.sqrt(target / aspect))
        if 0 < w <= width and 0 < h <= height:
            return int(rng.integers(0, height - h + 1)), int(rng.integers(0, width - w + 1)), h, w
    return None


@pytest.fixture(scope="module")
def photos():
    rng = np.random.default_rng(23)
    shapes = [(375, 500), (500, 375), (333, 500), (410, 470), (750, 1000)]
    return [_photo_jpeg(rng, h, w) for h, w in shapes]


def test_boxes_drawn_from_the_header_follow_the_reference_distribution(photos, monkeypatch):
    # train_image draws its box from the header's size, before decoding, with the same rng.
    drawn, crop_box = [], augment.crop_box

    def recording(height, width, rng):
        drawn.append((height, width, crop_box(height, width, rng)))
        return drawn[-1][2]

    monkeypatch.setattr(augment, "crop_box", recording)
    for slot, data in enumerate(photos):
        augment.train_image(data, 3, 32, augment.example_rng(1, 0, 0, slot))
    monkeypatch.undo()
    for slot, (data, (height, width, box)) in enumerate(zip(photos, drawn, strict=True)):
        assert (height, width) == np.asarray(augment.decode(data, 3)).shape[:2]
        assert box == augment.crop_box(height, width, augment.example_rng(1, 0, 0, slot))
    # Thousands of boxes: from headers by the path's sampler, and from decoded frames by the
    # reference sampler (the one before: NumPy's uniform and integers, seeded per example);
    # area fraction, aspect and centre compared by two-sample KS.
    n = 3000
    headers = [Image.open(io.BytesIO(d)).size for d in photos]
    frames = [np.asarray(augment.decode(d, 3)).shape[1::-1] for d in photos]

    def features(sizes, draw):
        rows = []
        for slot in range(n):
            width, height = sizes[slot % len(sizes)]
            box = draw(height, width, slot)
            if box is not None:
                top, left, h, w = box
                rows.append(
                    (
                        h * w / (height * width),
                        w / h,
                        (left + w / 2) / width,
                        (top + h / 2) / height,
                    )
                )
        return np.array(rows)

    new = features(
        headers, lambda h, w, slot: augment.crop_box(h, w, augment.example_rng(0, 0, 0, slot))
    )
    reference = features(
        frames, lambda h, w, slot: _reference_crop_box(h, w, np.random.default_rng([7, slot]))
    )
    assert abs(len(new) - len(reference)) < 30  # the 10-miss fallback as often
    critical = 1.628 * np.sqrt((len(new) + len(reference)) / (len(new) * len(reference)))
    stats = [_ks(new[:, k], reference[:, k]) for k in range(4)]  # α = 0.01: ≈ 0.042
    assert max(stats) < critical, (stats, critical)


@pytest.fixture(params=["libjpeg-turbo", "pil"])
def jpeg_decoder(request, monkeypatch):
    """Each decoder behind `train_image` and `eval_encoded`: libjpeg-turbo's region decode, and
    PIL's whole frame, what runs where libjpeg-turbo 3 is missing."""
    if request.param == "pil":
        monkeypatch.setattr(jpeg_region, "decoder", lambda: None)
    elif jpeg_region.library() is None:
        pytest.skip("no libjpeg-turbo 3 here (the turbojpeg wheel: x86-64)")
    return request.param


def test_crops_match_the_full_decode(photos, jpeg_decoder):
    errors, scaled = [], 0
    for size, images in ((64, photos[:4]), (224, photos[4:])):
        for slot in range(12):
            for data in images:
                rng = augment.example_rng(2, 0, 0, slot)
                new = augment.train_image(data, 3, size, rng).astype(int)
                full = augment.decode(data, 3)
                rng = augment.example_rng(2, 0, 0, slot)
                reference = augment.train_image_reference(full, size, rng)
                box = augment.crop_box(full.height, full.width, augment.example_rng(2, 0, 0, slot))
                if jpeg_decoder == "libjpeg-turbo":
                    box = box or augment._eval_box(full.height, full.width, size)
                    scaled += augment._eighths(*box[2:], size) < 8
                elif box is None or augment.dct_scale(*box[2:], size) == 1:
                    np.testing.assert_array_equal(new, reference)  # the full decode, bit for bit
                    continue
                else:
                    scaled += 1
                errors.append(np.abs(new - reference).mean())
    assert scaled >= 20
    assert max(errors) <= 2  # 2/255 of the range, crop by crop
    if jpeg_decoder == "libjpeg-turbo":  # every crop decoded partially: ≈ 1/255 on average
        assert len(errors) == 60 and np.mean(errors) <= 0.8
    for size, data in [(64, photos[0]), (112, photos[1]), (96, photos[2]), (224, photos[4])]:
        reference = augment.eval_image(augment.decode(data, 3), size)
        assert np.abs(augment.eval_encoded(data, 3, size).astype(int) - reference).mean() <= 2
    gray = io.BytesIO()
    Image.fromarray(np.full((300, 400), 90, np.uint8)).save(gray, format="JPEG")
    out = augment.train_image(gray.getvalue(), 3, 32, augment.example_rng(0, 0, 0, 0))
    assert out.shape == (32, 32, 3) and np.all(np.abs(out.astype(int) - 90) <= 2)
    # One channel from a colour JPEG: the decoded luma against PIL's from decoded RGB.
    for slot in range(3):
        out = augment.train_image(photos[0], 1, 48, augment.example_rng(0, 0, 0, slot))
        full = augment.decode(photos[0], 1)
        reference = augment.train_image_reference(full, 48, augment.example_rng(0, 0, 0, slot))
        assert out.shape == (48, 48, 1) and np.abs(out.astype(int) - reference).mean() <= 2


def test_a_crops_border_is_as_close_to_the_full_decode_as_its_inside(jpeg_decoder):
    # Colour noise: a pixel beyond the box, missing or with wrongly upsampled chroma, shows.
    data = io.BytesIO()
    noise = np.random.default_rng(0).integers(0, 256, (120, 160, 3), np.uint8)
    Image.fromarray(noise).save(data, format="JPEG", quality=95)
    full = augment.decode(data.getvalue(), 3)
    border, inside = [], []
    for slot in range(40):
        rng = augment.example_rng(0, 0, 0, slot)
        new = augment.train_image(data.getvalue(), 3, 32, rng).astype(int)
        rng = augment.example_rng(0, 0, 0, slot)
        error = np.abs(new - augment.train_image_reference(full, 32, rng))
        border.append(np.concatenate([error[0], error[-1], error[:, 0], error[:, -1]]).mean())
        inside.append(error[1:-1, 1:-1].mean())
    assert np.mean(border) <= np.mean(inside) + 0.5


def test_what_libjpeg_turbo_does_not_decode_takes_the_pil_path():
    rgb = np.asarray(_ramp(60, 80))
    cmyk, png = io.BytesIO(), io.BytesIO()
    Image.fromarray(rgb).convert("CMYK").save(cmyk, format="JPEG", quality=95)
    Image.fromarray(rgb).save(png, format="PNG")
    # PIL's decode: its full-frame result where no DCT scale applies (PNG, arrays), within 1/255
    # where one does (its draft of the CMYK JPEG).
    for data, tolerance in ((cmyk.getvalue(), 1), (png.getvalue(), 0), (rgb, 0)):
        full = augment.decode(data, 3)
        for slot in range(4):  # flipped and not
            new = augment.train_image(data, 3, 24, augment.example_rng(0, 0, 0, slot)).astype(int)
            reference = augment.train_image_reference(full, 24, augment.example_rng(0, 0, 0, slot))
            assert np.abs(new - reference).mean() <= tolerance
        held_out = augment.eval_encoded(data, 3, 24).astype(int)
        assert np.abs(held_out - augment.eval_image(full, 24)).mean() <= tolerance


def test_a_crop_is_its_own_array_after_the_next_decode(photos, jpeg_decoder):
    # The decoder writes every region into one buffer: a crop must not be a view of it.
    for transform in (
        lambda data: augment.train_image(data, 3, 224, augment.example_rng(0, 0, 0, 1)),
        lambda data: augment.eval_encoded(data, 3, 224),
    ):
        crop = transform(photos[0])
        pixels = crop.copy()
        transform(photos[1])
        np.testing.assert_array_equal(crop, pixels)


def test_a_numpy_generator_serves_as_the_draws_too(photos):
    # Anything with random() in [0, 1): the same box and flip from the same draws.
    for seed in range(4):
        new = augment.train_image(photos[0], 3, 64, np.random.default_rng(seed)).astype(int)
        full = augment.decode(photos[0], 3)
        reference = augment.train_image_reference(full, 64, np.random.default_rng(seed))
        assert np.abs(new - reference).mean() <= 2
