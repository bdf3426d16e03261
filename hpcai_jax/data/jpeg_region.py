"""Decoding one region of a JPEG at a DCT scale: libjpeg-turbo 3's TurboJPEG API, via ctypes.

A random-resized crop needs a box of the image at about the output's resolution. libjpeg-turbo 3
decodes just that (tj3SetCroppingRegion, tj3SetScalingFactor, tj3Decompress8): it stops after
the box's last row, skips the inverse DCT and colour conversion of the rows above the box
(jpeg_skip_scanlines) and of the columns outside it (jpeg_crop_scanline), and can run the inverse
DCT at M/8 of the size (M = 1..8). What it cannot skip is the entropy decoding of the rows above
and beside the box. TensorFlow's decode_and_crop_jpeg does the same.

No maintained Python binding exposes this (docs/input.md): PyTurboJPEG's `crop` is a lossless
transform that re-encodes; simplejpeg, imagecodecs, OpenCV and kornia-rs scale but do not crop;
pyvips crops lazily but costs more than a full decode here. So this module binds the seven
functions it needs, against a libturbojpeg that exports the TurboJPEG 3 API: the one the
`turbojpeg` wheel (PyPI; x86-64) bundles, else the system's (libjpeg-turbo >= 3.0). `decoder()`
is None where there is neither, and the caller decodes with PIL.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import importlib.metadata
import math
import threading
from fractions import Fraction
from typing import NamedTuple

import numpy as np

# turbojpeg.h (3.0): init type, parameters, pixel formats, colour spaces, error codes.
_TJINIT_DECOMPRESS = 1
_TJPARAM_SUBSAMP, _TJPARAM_JPEGWIDTH, _TJPARAM_JPEGHEIGHT = 4, 5, 6
_TJPARAM_COLORSPACE = 8
_TJPF = {1: 6, 3: 0}  # channels -> TJPF_GRAY, TJPF_RGB
_TO_RGB = (0, 1, 2)  # TJCS_RGB, TJCS_YCbCr, TJCS_GRAY: the colour spaces it converts to RGB
# tjMCUWidth, indexed by TJSAMP_*: 444, 422, 420, GRAY, 440, 411, 441.
_MCU_WIDTH = (8, 16, 16, 8, 8, 32, 8)


class _ScalingFactor(ctypes.Structure):
    _fields_ = [("num", ctypes.c_int), ("denom", ctypes.c_int)]


class _Region(ctypes.Structure):
    _fields_ = [("x", ctypes.c_int), ("y", ctypes.c_int), ("w", ctypes.c_int), ("h", ctypes.c_int)]


# Scaling factors as TurboJPEG accepts them (in lowest terms), by eighths.
_SCALES = {m: _ScalingFactor(*Fraction(m, 8).as_integer_ratio()) for m in range(1, 9)}


class Header(NamedTuple):
    """What the decoder needs of a JPEG before decoding: its size and its iMCU width."""

    height: int
    width: int
    mcu_width: int


class Region(NamedTuple):
    """Decoded pixels [rows, cols, channels] and where their first row and column lie in the
    image scaled by eighths/8. The pixels are a view of the decoder's buffer: the next decode
    overwrites them."""

    pixels: np.ndarray
    top: int
    left: int


def _bundled_library() -> str | None:
    """The libturbojpeg that the `turbojpeg` wheel carries (auditwheel puts it in
    turbojpeg.libs/), found through the distribution's file list rather than by importing it:
    PyTurboJPEG installs a module of the same name."""
    try:
        dist = importlib.metadata.distribution("turbojpeg")
    except importlib.metadata.PackageNotFoundError:
        return None
    for file in dist.files or ():
        if file.name.startswith("libturbojpeg"):
            return str(file.locate())
    return None


def _bind(path: str) -> ctypes.CDLL | None:
    """The library at `path` with the functions' signatures set, or None where it cannot be
    loaded or predates the TurboJPEG 3 API."""
    try:
        lib = ctypes.CDLL(path)
        lib.tj3Init  # noqa: B018 -- the TurboJPEG 3 API's presence
    except (OSError, AttributeError):
        return None
    handle, buf, size = ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t
    lib.tj3Init.restype, lib.tj3Init.argtypes = handle, [ctypes.c_int]
    lib.tj3Destroy.restype, lib.tj3Destroy.argtypes = None, [handle]
    lib.tj3DecompressHeader.argtypes = [handle, buf, size]
    lib.tj3Get.argtypes = [handle, ctypes.c_int]
    lib.tj3SetScalingFactor.argtypes = [handle, _ScalingFactor]
    lib.tj3SetCroppingRegion.argtypes = [handle, _Region]
    lib.tj3Decompress8.argtypes = [handle, buf, size, ctypes.c_void_p, ctypes.c_int, ctypes.c_int]
    return lib


@functools.cache
def library() -> ctypes.CDLL | None:
    """The TurboJPEG 3 library of this process (the wheel's first, then the system's), or None."""
    for path in (_bundled_library(), ctypes.util.find_library("turbojpeg")):
        lib = _bind(path) if path else None
        if lib is not None:
            return lib
    return None


class Decoder:
    """One TurboJPEG handle. A handle holds the last header read, so it serves one thread."""

    def __init__(self, lib: ctypes.CDLL):
        self._lib = lib
        self._handle = lib.tj3Init(_TJINIT_DECOMPRESS)
        if not self._handle:
            raise MemoryError("tj3Init failed")
        self._eighths = 8  # the handle's scaling factor: 1/1 after tj3Init
        # One buffer for every region, grown as needed: a warm cache line, not fresh pages.
        self._buffer, self._address = np.empty(0, np.uint8), 0

    def __del__(self):
        if getattr(self, "_handle", None):
            self._lib.tj3Destroy(self._handle)

    def header(self, data: bytes) -> Header | None:
        """The JPEG's header, or None where this path does not apply (not a JPEG, CMYK,
        unusual subsampling): the caller decodes those with PIL. (What the header admits but
        `decode` cannot do, 12-bit or lossless JPEGs, fails there, and goes to PIL too.)"""
        lib, h = self._lib, self._handle
        if lib.tj3DecompressHeader(h, data, len(data)) != 0:
            return None
        colorspace, subsamp = lib.tj3Get(h, _TJPARAM_COLORSPACE), lib.tj3Get(h, _TJPARAM_SUBSAMP)
        if colorspace not in _TO_RGB or not 0 <= subsamp < len(_MCU_WIDTH):
            return None
        height, width = lib.tj3Get(h, _TJPARAM_JPEGHEIGHT), lib.tj3Get(h, _TJPARAM_JPEGWIDTH)
        return Header(height, width, _MCU_WIDTH[subsamp])

    def decode(
        self,
        data: bytes,
        header: Header,
        eighths: int,
        rows: tuple[int, int],
        cols: tuple[int, int],
        channels: int,
    ) -> Region | None:
        """Rows [r0, r1) and columns [c0, c1) of the image scaled by eighths/8 (clipped to it;
        c0 moved left to an iMCU boundary, as libjpeg-turbo requires), as `channels` (1 or 3)
        channels; None where the region is empty or libjpeg-turbo fails or warns (the caller
        then uses PIL). `header` must be this data's, read by this decoder last. The region's
        outermost rows and columns (where they are not the image's) can differ from the full
        decode's: chroma upsampling lacks its neighbours there; ask for one more each side."""
        lib, h = self._lib, self._handle
        height, width = -(-header.height * eighths // 8), -(-header.width * eighths // 8)
        mcu = header.mcu_width * eighths // 8
        r0, r1 = min(max(0, rows[0]), height - 1), min(height, rows[1])
        c0, c1 = min(max(0, cols[0]), width - 1) // mcu * mcu, min(width, cols[1])
        if r1 <= r0 or c1 <= c0:
            return None
        if eighths != self._eighths:
            if lib.tj3SetScalingFactor(h, _SCALES[eighths]) != 0:
                return None
            self._eighths = eighths
        if lib.tj3SetCroppingRegion(h, _Region(c0, r0, c1 - c0, r1 - r0)) != 0:
            return None
        shape = (r1 - r0, c1 - c0, channels)
        size = math.prod(shape)
        if self._buffer.size < size:
            self._buffer = np.empty(size, np.uint8)
            self._address = self._buffer.ctypes.data
        status = lib.tj3Decompress8(
            h, data, len(data), self._address, (c1 - c0) * channels, _TJPF[channels]
        )
        # Errors, and warnings too (a truncated file, extraneous bytes): PIL decides, as before.
        if status != 0:
            return None
        return Region(self._buffer[:size].reshape(shape), r0, c0)


_local = threading.local()


def decoder() -> Decoder | None:
    """This thread's decoder, or None where no TurboJPEG 3 library is installed."""
    lib = library()
    if lib is None:
        return None
    if not hasattr(_local, "decoder"):
        _local.decoder = Decoder(lib)
    return _local.decoder
