"""`python -m hpcai_jax.main ... --dry_run`: the run's plan without the run.

The flags are parsed and validated as for the run, the mesh is resolved on this machine's
devices and the quality target chosen; the plan is printed and nothing is compiled, trained or
written. It is how a documented command is checked cheaply (tests/test_examples.py).
"""

from __future__ import annotations

from hpcai_jax import flags as hflags
from hpcai_jax.settings import Settings

MESH_MODES = ("train", "flops")  # the modes that build the ensemble's mesh on every device


def plan(config: Settings, devices: tuple[int, int] | None = None) -> list[str]:
    """The lines of the plan; raises UsageError where the run itself would refuse to start.
    `devices` (global, local) plans for another machine than this one (a sweep's point)."""
    lines = hflags.settings_table(config).splitlines()
    if config.mode in MESH_MODES:
        import jax

        from hpcai_jax.engine.mesh import resolve_layout

        devices = devices or (jax.device_count(), jax.local_device_count())
        layout = resolve_layout(config.mesh, *devices)
        lines.append(
            f"mesh: M = {layout.ensemble_size}, {layout.members_per_device} member(s) per "
            f"device, P_degree = {layout.parallel_degree}, P_model = {layout.model_parallel}: "
            f"{layout.num_devices} device(s)"
        )
    if config.scored:
        target = config.quality_target()
        lines.append(
            f"target: {target.metric} {target.target:g} "
            f"({'official' if target.target_is_official else 'given'}), n = {target.exponent:g}"
        )
    run_id = config.results.run_name or f"{config.mode}-<UTC time>-<pid>"
    lines.append(f"record: {config.results.results_dir}/{run_id}.json (not written: --dry_run)")
    return lines
