"""The compiled step's memory per device, as XLA's memory analysis gives it."""

from __future__ import annotations


def memory_analysis(compiled) -> dict:
    """The compiled step's memory per device (bytes): on an accelerator, the first thing to
    check. Empty where the backend gives no analysis."""
    try:
        m = compiled.memory_analysis()
    except Exception:  # noqa: BLE001 - not every backend implements it
        return {}
    if m is None:
        return {}
    return {
        "argument_bytes": m.argument_size_in_bytes,
        "output_bytes": m.output_size_in_bytes,
        "alias_bytes": m.alias_size_in_bytes,
        "temp_bytes": m.temp_size_in_bytes,
        "generated_code_bytes": m.generated_code_size_in_bytes,
    }
