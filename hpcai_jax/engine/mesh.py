"""The device mesh: axis names and Eq. 5, (M / members_per_device) × P_degree = devices.

Axis names and partition specs live in hpcai_jax/axes.py.
"""

from __future__ import annotations

import dataclasses

import jax
import numpy as np
from jax.sharding import AxisType, Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from hpcai_jax.axes import DATA, ENSEMBLE
from hpcai_jax.config import MeshConfig
from hpcai_jax.errors import UsageError


@dataclasses.dataclass(frozen=True)
class MeshLayout:
    ensemble_size: int  # M
    members_per_device: int
    parallel_degree: int  # P_degree
    num_devices: int

    @property
    def ensemble_axis_size(self) -> int:
        return self.ensemble_size // self.members_per_device

    @property
    def shape(self) -> dict[str, int]:
        return {ENSEMBLE: self.ensemble_axis_size, DATA: self.parallel_degree}


def resolve_layout(config: MeshConfig, num_devices: int, local_device_count: int) -> MeshLayout:
    """Fills the derived numbers and checks Eq. 5; raises UsageError showing the arithmetic."""
    m = config.ensemble_size
    p = config.parallel_degree or local_device_count
    mpd = config.members_per_device
    if mpd == 0:
        if (m * p) % num_devices or m * p < num_devices:
            raise UsageError(
                f"--ensemble_size={m} × --parallel_degree={p} = {m * p} member-replicas cannot be "
                f"spread evenly over {num_devices} devices: set --members_per_device or change M/P_degree"
            )
        mpd = m * p // num_devices
    if m % mpd:
        raise UsageError(f"--members_per_device={mpd} must divide --ensemble_size={m}")
    if (m // mpd) * p != num_devices:
        raise UsageError(
            f"Eq. 5 fails: (--ensemble_size={m} / --members_per_device={mpd}) × "
            f"--parallel_degree={p} = {(m // mpd) * p}, but there are {num_devices} devices"
        )
    return MeshLayout(
        ensemble_size=m, members_per_device=mpd, parallel_degree=p, num_devices=num_devices
    )


def make_mesh(layout: MeshLayout, devices: list | None = None) -> Mesh:
    """An (ensemble, data) mesh. The data axis is innermost so that one member's replicas sit on
    neighbouring devices (one host, when P_degree is the local device count)."""
    devices = jax.devices() if devices is None else devices
    shape = (layout.ensemble_axis_size, layout.parallel_degree)
    if len(devices) == len(jax.devices()):
        # Auto axes: every sharded computation here runs inside shard_map, so sharding-in-types
        # (Explicit) buys nothing and trips jnp helpers outside it.
        return jax.make_mesh(
            shape, (ENSEMBLE, DATA), axis_types=(AxisType.Auto,) * 2, devices=devices
        )
    return Mesh(
        np.asarray(devices).reshape(shape), (ENSEMBLE, DATA), axis_types=(AxisType.Auto,) * 2
    )


def sharding(mesh: Mesh, spec: P) -> NamedSharding:
    return NamedSharding(mesh, spec)
