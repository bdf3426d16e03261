"""Type names as users write them (--dtype, --precision) and the numpy dtypes they mean: the one
table every module reads. bfloat16 comes from ml_dtypes, which JAX installs. int8 is the type of
--dtype=int8's quantized products (models/int8.py), not of any model's parameters or activations;
the matmul peak for MFU is measured in it."""

from __future__ import annotations

import ml_dtypes
import numpy as np

DTYPES = {
    "float64": np.dtype(np.float64),
    "float32": np.dtype(np.float32),
    "bfloat16": np.dtype(ml_dtypes.bfloat16),
    "float16": np.dtype(np.float16),
    "int8": np.dtype(np.int8),
}


def dtype(name: str) -> np.dtype:
    """The dtype of a name; "float32_highest" (a matmul precision, not a type) is float32."""
    return DTYPES[name.removesuffix("_highest")]


def itemsize(name: str) -> int:
    return dtype(name).itemsize
