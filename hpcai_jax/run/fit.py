"""`--resume_members=fit`: a checkpoint of M members resumes on fewer devices with the members
that fit, M' the largest that satisfies Eq. 5 at the run's P_degree, P_model and members per
device; members M'..M-1 stop where the checkpoint stopped them (docs/reliability.md, "Resume
with the members that fit"). Bagging goes on: the kept members train on exactly as they would
have, and FLOPS counts the member-steps each member completed.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from hpcai_jax.config import RunConfig
from hpcai_jax.errors import UsageError

WHY = "resume_members=fit"


@dataclasses.dataclass(frozen=True)
class Fitted:
    """What runs (`config`, its M the fitted M'), what the flags asked (`requested`), and the
    members dropped at this resume."""

    config: RunConfig
    requested: RunConfig
    dropped: tuple[int, ...] = ()


def has_checkpoint(directory: str) -> bool:
    """Whether `directory` holds a step of orbax's (a directory named by its step number)."""
    path = Path(directory)
    return path.is_dir() and any(p.is_dir() and p.name.isdigit() for p in path.iterdir())


def fit(config: RunConfig, num_devices: int, local_device_count: int) -> Fitted:
    """The configuration to run: the flags' own unless --resume_members=fit resumes a checkpoint
    whose M does not fit these devices; then M' = (devices / (P_degree × P_model)) × members per
    device (1 where derived), the largest multiple of that below M, members M'..M-1 dropped."""
    rc, mc = config.reliability, config.mesh
    if rc.resume_members != "fit" or not rc.checkpoint_dir or not has_checkpoint(rc.checkpoint_dir):
        return Fitted(config, config)
    m, pm = mc.ensemble_size, mc.model_parallel
    p = mc.parallel_degree or max(1, local_device_count // pm)
    mpd = mc.members_per_device or 1
    if (m // mpd) * p * pm == num_devices and m % mpd == 0:
        return Fitted(config, config)  # Eq. 5 holds: every member fits
    groups, left = divmod(num_devices, p * pm)
    fitted = groups * mpd
    if left or fitted < 1 or fitted > m:
        raise UsageError(
            f"--resume_members=fit: {num_devices} devices hold no whole number of members of "
            f"--parallel_degree={p}"
            + (f" × --model_parallel={pm}" if pm > 1 else "")
            + f" (--ensemble_size={m}, --members_per_device={mpd}): Eq. 5 cannot hold"
        )
    mesh = dataclasses.replace(mc, ensemble_size=fitted, members_per_device=mpd, parallel_degree=p)
    return Fitted(dataclasses.replace(config, mesh=mesh), config, tuple(range(fitted, m)))
