"""The JSON values of a packed STREAM record that `check` reads, held to their types before any
arithmetic: an integer is a JSON integer within int64, a figure a finite number, a boolean
`true` or `false` (never "yes", 1 or "on", which the lenient record reader would accept), a
kernel set never empty. Each value that is not is one failure line naming the file and the
field (docs/submission.md, "BabelStream runs")."""

from __future__ import annotations

import math

LIMIT = 2**62  # an integer beyond it is no count of bytes or elements


def _int(v) -> str:
    if type(v) is not int or not 0 < v < LIMIT:
        return f"a positive integer below 2^62, found {_shown(v)}"
    return ""


def _count(v) -> str:  # may be 0: a device id, a process index
    if type(v) is not int or not 0 <= v < LIMIT:
        return f"an integer 0 to 2^62, found {_shown(v)}"
    return ""


def _figure(v) -> str:
    if type(v) not in (int, float) or not math.isfinite(v) or abs(v) >= LIMIT:
        return f"a finite number, found {_shown(v)}"
    return ""


def _positive(v) -> str:
    return _figure(v) or ("" if v > 0 else f"a number > 0, found {_shown(v)}")


def _bool(v) -> str:
    return "" if type(v) is bool else f"true or false, found {_shown(v)}"


def _str(v) -> str:
    return "" if isinstance(v, str) else f"a string, found {_shown(v)}"


def _optional(kind):
    return lambda v: "" if v is None else kind(v)


def _shown(v) -> str:
    text = repr(v)
    return text if len(text) <= 40 else f"{type(v).__name__} {text[:30]}…"


KERNEL = {
    "label": _str,
    "bytes_moved": _int,
    "arrays_moved": _int,
    "gb_per_s": _positive,
    "gb_per_s_per_device": _positive,
    "min_s": _positive,
    "max_s": _positive,
    "avg_s": _positive,
    "xla_bytes_accessed": _optional(_figure),
}
CHECK = {
    "error": _optional(_figure),
    "tolerance": _figure,
    "relative": _bool,
    "passed": _bool,
}
DEVICE = {
    "device_id": _count,
    "process_index": _count,
    "validation_passed": _bool,
    "kernels": ("mapping", KERNEL),
}
SPEC = {
    "mode": _str,
    "run_id": _str,
    "status": _str,
    "printed": _str,
    "array": {
        "elements": _int,
        "precision": _str,
        "itemsize": _int,
        "bytes_per_array": _int,
        "bytes_total": _int,
    },
    "placement": {
        "mode": _str,
        "num_devices": _int,
        "devices": ("non-empty list", _str),
        "device_kind": _str,
        "platform": _str,
        "process_count": _int,
    },
    "cache": {
        "bytes": _optional(_int),
        "source": _str,
        "scope": _str,
        "size_rule_ok": _bool,
        "message": _str,
        "arrays_bytes_per_cache": _int,
        "array_bytes_per_cache": _optional(_int),
    },
    "run": {
        "implementation": _str,
        "kernels": _str,
        "order": ("non-empty list", _str),
        "num_times": _int,
        "burst": _int,
    },
    "kernels": ("mapping", KERNEL),
    "figure_of_merit": {"kernel": _str, "gb_per_s": _positive},
    "byte_weight_mismatches": ("list", _str),
    "validation": {
        "passed": _bool,
        "gold": {"a": _figure, "b": _figure, "c": _figure, "dot": _optional(_figure)},
        "checks": ("mapping", CHECK),
    },
    "metrics": ("mapping", lambda v: _bool(v) if type(v) is bool else _figure(v)),
    "per_device": ("optional list", DEVICE),
    "per_process_gb_per_s": ("optional list", ("mapping", _positive)),
    "provenance": {
        "backend": _str,
        "device_kind": _str,
        "device_count": _int,
        "process_count": _int,
        "hosts": ("non-empty list", _str),
        "number_of_nodes": _int,
    },
    "config": {
        "stream": {
            "num_times": _int,
            "precision": _str,
            "kernels": _str,
            "devices": _str,
            "csv": _bool,
            "mibibytes": _bool,
            "array_size": _count,
        }
    },
}


def problems(data, where: str) -> list[str]:
    """`where FIELD: expected ...` for each value of a STREAM record's JSON that is not of its
    kind (SPEC), in file order."""
    out: list[str] = []
    _walk(data, SPEC, "", where, out)
    return out


def _walk(value, spec, path: str, where: str, out: list[str]) -> None:
    name = path.lstrip(".") or "the record"
    if callable(spec):
        why = spec(value)
        if why:
            out.append(f"{where} {name}: expected {why}")
        return
    if isinstance(spec, dict):
        if not isinstance(value, dict):
            out.append(f"{where} {name}: expected an object, found {_shown(value)}")
            return
        for key, inner in spec.items():
            _walk(value.get(key), inner, f"{path}.{key}", where, out)
        return
    shape, inner = spec
    if shape == "optional list" and value is None:
        return
    if shape == "mapping":
        if not isinstance(value, dict) or not value:
            out.append(f"{where} {name}: expected a non-empty object, found {_shown(value)}")
            return
        for key, item in value.items():
            _walk(item, inner, f"{path}.{key}", where, out)
        return
    if not isinstance(value, list) or (shape != "list" and not value):
        kind = "a list" if shape == "list" else "a non-empty list"
        out.append(f"{where} {name}: expected {kind}, found {_shown(value)}")
        return
    for i, item in enumerate(value):
        _walk(item, inner, f"{path}[{i}]", where, out)
