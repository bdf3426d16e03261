"""Region decoding through libjpeg-turbo 3's TurboJPEG API (ctypes)."""

import ctypes.util
import io
import threading

import numpy as np
import pytest
from PIL import Image

from hpcai_jax.data import jpeg_region

needs_library = pytest.mark.skipif(
    jpeg_region.library() is None, reason="no libjpeg-turbo 3 here (the turbojpeg wheel: x86-64)"
)


def _jpeg(pixels: np.ndarray, **options) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, format="JPEG", quality=90, **options)
    return buf.getvalue()


def test_a_library_without_the_turbojpeg_3_api_is_not_bound():
    assert jpeg_region._bind("/nonexistent/libturbojpeg.so") is None
    assert jpeg_region._bind(ctypes.util.find_library("c")) is None  # loads, has no tj3Init


@needs_library
@pytest.mark.parametrize(
    "options",
    [{"subsampling": 0}, {"subsampling": 1}, {"subsampling": 2}, {"progressive": True}, "gray"],
    ids=["444", "422", "420", "progressive", "gray"],
)
def test_a_region_is_the_full_decode_of_its_rows_and_columns(options):
    rng = np.random.default_rng(0)
    pixels = rng.integers(0, 256, (61, 83, 3), np.uint8)  # noise: every misplaced pixel shows
    data = _jpeg(pixels[..., 0], subsampling=0) if options == "gray" else _jpeg(pixels, **options)
    decoder = jpeg_region.decoder()
    header = decoder.header(data)
    assert header[:2] == (61, 83)
    for eighths in (1, 2, 4, 8):
        height, width = -(-61 * eighths // 8), -(-83 * eighths // 8)
        for channels in (1, 3):
            # A copy: the next decode overwrites the decoder's buffer.
            full = decoder.decode(data, header, eighths, (0, height), (0, width), channels)
            full = full.pixels.copy()
            assert full.shape == (height, width, channels)
            for _ in range(4):
                r0, r1 = (int(v) for v in np.sort(rng.integers(-2, height + 2, 2)) + (0, 1))
                c0, c1 = (int(v) for v in np.sort(rng.integers(-2, width + 2, 2)) + (0, 1))
                region = decoder.decode(data, header, eighths, (r0, r1), (c0, c1), channels)
                if region is None:  # empty once clipped to the image
                    assert min(r1, height) <= max(r0, 0) or min(c1, width) <= max(c0, 0)
                    continue
                rows, cols = region.pixels.shape[:2]
                # The rows asked for (clipped), and the columns from the iMCU boundary before c0.
                assert (region.top, region.top + rows) == (max(0, r0), min(height, r1))
                assert region.left <= max(0, c0) and region.left + cols == min(width, c1)
                assert region.left % (header.mcu_width * eighths // 8) == 0
                # Equal to the full decode but for the outermost rows and columns that are not
                # the image's (chroma upsampling lacks its neighbours there).
                inner = (
                    slice(region.top > 0, rows - (region.top + rows < height)),
                    slice(region.left > 0, cols - (region.left + cols < width)),
                )
                expected = full[region.top :, region.left :][:rows, :cols]
                np.testing.assert_array_equal(region.pixels[inner], expected[inner])


@needs_library
def test_what_libjpeg_turbo_does_not_decode_is_left_to_pil():
    decoder = jpeg_region.decoder()
    png = io.BytesIO()
    Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(png, format="PNG")
    cmyk = io.BytesIO()
    Image.new("CMYK", (16, 16), (10, 20, 30, 40)).save(cmyk, format="JPEG")
    for data in (png.getvalue(), cmyk.getvalue(), b"\xff\xd8 not a JPEG"):
        assert decoder.header(data) is None
    data = _jpeg(np.random.default_rng(0).integers(0, 256, (40, 48, 3), np.uint8))
    header = decoder.header(data)
    assert decoder.decode(data, header, 8, (10, 10), (0, 48), 3) is None  # no rows
    assert decoder.decode(data, header, 8, (0, 40), (0, 48), 3) is not None
    truncated = data[: len(data) * 3 // 4]  # the headers, half the scan: a warning
    assert decoder.decode(truncated, decoder.header(truncated), 8, (0, 40), (0, 48), 3) is None


@needs_library
def test_each_thread_decodes_with_its_own_handle():
    decoders = []
    thread = threading.Thread(target=lambda: decoders.append(jpeg_region.decoder()))
    thread.start()
    thread.join()
    assert jpeg_region.decoder() is jpeg_region.decoder()
    assert decoders[0] is not jpeg_region.decoder()
