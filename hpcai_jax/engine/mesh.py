"""The device mesh: axis names and Eq. 5, (M / members_per_device) × P_degree × P_model = devices;
and the member's batch once P_degree is known (--batch_policy, docs/optimizers.md).

Axis names and partition specs live in hpcai_jax/axes.py.
"""

from __future__ import annotations

import dataclasses

import jax
import numpy as np
from jax.sharding import AxisType, Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from hpcai_jax.axes import DATA, ENSEMBLE, MODEL
from hpcai_jax.config import MeshConfig, RunConfig, TrainConfig
from hpcai_jax.errors import UsageError


@dataclasses.dataclass(frozen=True)
class MeshLayout:
    ensemble_size: int  # M
    members_per_device: int
    parallel_degree: int  # P_degree: data-parallel devices of one member
    num_devices: int
    model_parallel: int = 1  # P_model: devices sharing one member's layers

    @property
    def ensemble_axis_size(self) -> int:
        return self.ensemble_size // self.members_per_device

    @property
    def devices_per_member(self) -> int:
        """The paper's P_degree when a member is also split over `model`: P_degree × P_model."""
        return self.parallel_degree * self.model_parallel

    @property
    def shape(self) -> dict[str, int]:
        return {
            ENSEMBLE: self.ensemble_axis_size,
            DATA: self.parallel_degree,
            MODEL: self.model_parallel,
        }


def resolve_layout(config: MeshConfig, num_devices: int, local_device_count: int) -> MeshLayout:
    """Fills the derived numbers and checks Eq. 5; raises UsageError showing the arithmetic."""
    m, pm = config.ensemble_size, config.model_parallel
    if num_devices % pm:
        raise UsageError(f"--model_parallel={pm} must divide the {num_devices} devices")
    p = config.parallel_degree or max(1, local_device_count // pm)
    if num_devices % (p * pm):  # Eq. 5 cannot hold, whatever M and members per device
        raise UsageError(_member_span(p, pm, num_devices))
    mpd = config.members_per_device
    replicas = m * p * pm
    product = f"--ensemble_size={m} × --parallel_degree={p}" + (
        f" × --model_parallel={pm}" if pm > 1 else ""
    )
    if mpd is None:
        if replicas % num_devices or replicas < num_devices:
            raise UsageError(
                f"{product} = {replicas} member-replicas cannot be spread evenly over "
                f"{num_devices} devices: set --members_per_device or change M/P_degree"
            )
        mpd = replicas // num_devices
    if m % mpd:
        raise UsageError(f"--members_per_device={mpd} must divide --ensemble_size={m}")
    if (m // mpd) * p * pm != num_devices:
        ways = _ways_to_fit(m, mpd, p, pm, num_devices)
        raise UsageError(
            f"Eq. 5 fails: (--ensemble_size={m} / --members_per_device={mpd}) × "
            f"--parallel_degree={p}"
            + (f" × --model_parallel={pm}" if pm > 1 else "")
            + f" = {(m // mpd) * p * pm}, but there are {num_devices} devices"
            + (f"; to fit: {', or '.join(ways)}" if ways else "")
        )
    return MeshLayout(
        ensemble_size=m,
        members_per_device=mpd,
        parallel_degree=p,
        num_devices=num_devices,
        model_parallel=pm,
    )


def _member_span(p: int, pm: int, devices: int) -> str:
    """Why a member's devices cannot tile the mesh, and the P_degree values that would."""
    spans = f"--parallel_degree={p}" + (f" × --model_parallel={pm}" if pm > 1 else "")
    fits = [str(d) for d in range(1, devices // pm + 1) if (devices // pm) % d == 0]
    choice = fits[0] if len(fits) == 1 else f"{', '.join(fits[:-1])} or {fits[-1]}"
    return (
        f"{spans}: each member spans {p * pm} devices, which must divide the {devices} "
        f"device{'s' if devices > 1 else ''}; --parallel_degree can be {choice} here"
    )


def _ways_to_fit(m: int, mpd: int, p: int, pm: int, devices: int) -> list[str]:
    """The flags, each changed alone, that would make Eq. 5 hold on `devices`."""
    ways = []
    replicas = m * p * pm
    if replicas > devices and replicas % devices == 0 and m % (replicas // devices) == 0:
        ways.append(f"--members_per_device={replicas // devices} (or auto: members share devices)")
    if devices % ((m // mpd) * pm) == 0:
        ways.append(f"--parallel_degree={devices // ((m // mpd) * pm)}")
    if devices % (p * pm) == 0:
        ways.append(f"--ensemble_size={devices // (p * pm) * mpd}")
    return ways


def resolved_batch(config: RunConfig, parallel_degree: int) -> RunConfig:
    """The engine's view of `config` once P_degree is known: train.batch_size the member's batch
    (`member_batch`; the peak learning rate, learning_rate × batch / lr_reference_batch, then
    scales by P_degree too) and batch_policy per_member, so resolving twice changes nothing. The
    record keeps the settings as given (engine/setup.RunSetup.recorded_config)."""
    if config.train.batch_policy == "per_member":
        return config
    train = dataclasses.replace(
        config.train,
        batch_size=member_batch(config.train, parallel_degree),
        batch_policy="per_member",
    )
    return dataclasses.replace(config, train=train)


def member_batch(train: TrainConfig, parallel_degree: int) -> int:
    """The batch of one member under --batch_policy with `parallel_degree` devices per member."""
    if train.batch_policy == "per_device":
        return train.batch_size * parallel_degree
    return train.batch_size


def make_mesh(layout: MeshLayout, devices: list | None = None) -> Mesh:
    """An (ensemble, data, model) mesh. `model` is innermost (a member's layer-by-layer
    gathers are its most frequent traffic), then `data`, so that one member's devices sit
    next to each other (one host, when they are the local devices)."""
    devices = jax.devices() if devices is None else devices
    shape = (layout.ensemble_axis_size, layout.parallel_degree, layout.model_parallel)
    names = (ENSEMBLE, DATA, MODEL)
    # Auto axes: every sharded computation here runs inside shard_map, so sharding-in-types
    # (Explicit) buys nothing and trips jnp helpers outside it.
    types = (AxisType.Auto,) * 3
    if len(devices) == len(jax.devices()):
        return jax.make_mesh(shape, names, axis_types=types, devices=devices)
    return Mesh(np.asarray(devices).reshape(shape), names, axis_types=types)


def sharding(mesh: Mesh, spec: P) -> NamedSharding:
    return NamedSharding(mesh, spec)
