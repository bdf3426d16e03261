"""`python -m hpcai_jax.submission.count FLAGFILE [--parallel_degree=P] [--claims=R,...]`: the
FLOPs of one step of a packed flagfile's training step, for `check --recount` (recount.py runs it
in a subprocess on the run's device count, faked on CPUs; docs/submission.md §3).

No data set is read: a tfds set whose shapes are declared here (`DECLARED`: ImageNet) is counted
on generated inputs of those shapes, the built-in sets have fixed shapes already, so a closed
ImageNet package is recounted on any machine. The step is lowered, and its count before
optimisation (`lowered`) taken; it is compiled, and its count taken by the training run's own rule
(`compiled`: XLA's cost analysis against the analytic walk, telemetry/flop_count.crosscheck),
only where a claimed figure lies near but not within 1 % of the lowered count: a compile of
ResNet-50 costs a minute of CPU, the lowering seconds. Prints one JSON object.
"""

from __future__ import annotations

import dataclasses
import json
import sys

# A tfds set's input shapes, declared: the classes of its RGB images (--image_size gives their
# side), as data/datasets.synthetic_spec generates them. Counting on generated inputs of these
# shapes is counting the set's step: the workload reads nothing else of the data set (its mean
# and std are constants of the step).
DECLARED = {"imagenet2012": 1000}
# Within this of the lowered count a claim is it (a GPU run's count is the lowered program's,
# xla_cost.py); further than FAR it is no count of this step by any rule (a run's own count is
# XLA's within telemetry/flop_count.CROSSCHECK_TOLERANCE of the analytic walk, which the lowered
# count matches to 0.1 % here, or the walk itself); in between only the compiled count can tell.
NEAR, FAR = 0.01, 0.12


def declared(config):
    """`config` with a declared tfds set replaced by generated inputs of its shapes (the same
    step), or as it is."""
    from hpcai_jax.quality_targets import dataset_name

    classes = DECLARED.get(dataset_name(config.data.dataset))
    if classes is None:
        return config
    data = dataclasses.replace(config.data, dataset="synthetic", num_classes=classes)
    return dataclasses.replace(config, data=data)


def count(config, claims: list[float]) -> dict:
    from hpcai_jax.engine.compiled import abstract_batch
    from hpcai_jax.engine.setup import build_setup
    from hpcai_jax.flops.crosscheck import crosscheck
    from hpcai_jax.xla_cost import xla_cost

    config = declared(config)
    setup = build_setup(config, open_data=False)
    fields = setup.workload.spec.fields
    batch = abstract_batch(setup.mesh, setup.layout, config.train.batch_size, fields)
    lowered = setup.train_step.lower(setup.abstract_state, batch)
    counted = None
    if setup.count_step is not None:  # loops over members, written out for cost analysis
        counted = setup.count_step.lower(setup.abstract_state, batch)
    analysis = (counted or lowered).cost_analysis()
    if isinstance(analysis, list | tuple):
        analysis = analysis[0] if analysis else None
    devices = setup.layout.num_devices
    low = float(analysis["flops"]) * devices if analysis and analysis.get("flops") else None
    out = {"lowered": low, "compiled": None, "source": None, "devices": devices}
    if low is None or any(NEAR < abs(c / low - 1) <= FAR for c in claims):
        trips = setup.layout.members_per_device
        cost = xla_cost(lowered.compile(), devices, lowered, counted, trips)
        cross = crosscheck(config, cost.flops, list(setup.mesh.devices.flat))
        out.update(compiled=cross.train_step_flops, source=cross.train_step_flops_source)
    return out


def main(argv: list[str]) -> int:
    from hpcai_jax.errors import UsageError
    from hpcai_jax.submission import flagfile

    flags = [a for a in argv if a.startswith("--")]
    paths = [a for a in argv if not a.startswith("--")]
    options = dict(a[2:].split("=", 1) for a in flags)
    try:
        if len(paths) != 1 or set(options) - {"parallel_degree", "claims"}:
            raise UsageError("expected FLAGFILE [--parallel_degree=P] [--claims=R,...]")
        config = flagfile.read(paths[0])
        if "parallel_degree" in options:
            mesh = dataclasses.replace(config.mesh, parallel_degree=int(options["parallel_degree"]))
            config = dataclasses.replace(config, mesh=mesh)
        claims = [float(c) for c in options.get("claims", "").split(",") if c]
        print(json.dumps(count(config, claims)))
    except UsageError as e:
        print(f"hpcai_jax.submission.count: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
