"""Energy: NVML counters where a GPU has them, "not available" with why elsewhere, never an
estimate; the arithmetic of joules, watts and FLOPS per watt."""

from __future__ import annotations

import pytest

from hpcai_jax.telemetry.energy import EnergyReading, energy_record, read_energy


def test_a_cpu_has_no_energy_counter():
    reading = read_energy()
    assert not reading.available and "no energy counter on cpu" in reading.why
    record = energy_record(reading, read_energy(), 1e12)
    assert record == {"available": False, "why": reading.why}


def test_joules_watts_and_flops_per_watt_from_two_readings():
    start = EnergyReading(True, "", (1_000, 2_000), at_s=10.0)
    end = EnergyReading(True, "", (3_000, 5_000), at_s=12.0)  # +2 J and +3 J in 2 s
    record = energy_record(start, end, flops_per_s=5e12)
    assert record["available"] and record["joules"] == pytest.approx(5.0)
    assert record["average_watts"] == pytest.approx(2.5)
    assert record["flops_per_watt"] == pytest.approx(2e12)
