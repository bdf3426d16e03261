"""`python -m hpcai_jax.main --help`: the flags grouped by mode, the ones a run is usually
configured with first, each with its help and default; `--helpfull` is absl's whole list.

Every flag belongs to the sections of the configuration (`settings.Settings`) its mode reads;
the key flags are named here, the rest of each mode's flags are listed by name.
"""

from __future__ import annotations

import textwrap

from hpcai_jax import flags as hflags

# mode → (what it does, the config sections it reads, its key flags in the order shown).
MODES: dict[str, tuple[str, tuple[str, ...], tuple[str, ...]]] = {
    "train": (
        "the bagged-ensemble benchmark run (FLOPS, VFLOPS, quality; docs/score.md)",
        (
            "mesh",
            "data",
            "model",
            "optim",
            "train",
            "results",
            "reliability",
            "distributed",
            "gpu_settings",
        ),
        (
            "flagfile",
            "ensemble_size",
            "parallel_degree",
            "members_per_device",
            "workload",
            "dataset",
            "data_dir",
            "model",
            "dtype",
            "batch_size",
            "epochs",
            "steps",
            "learning_rate",
            "target_quality",
            "results_dir",
            "run_name",
            "mllog",
            "checkpoint_dir",
            "checkpoint_every",
            "resume_members",
        ),
    ),
    "stream": (
        "BabelStream's memory bandwidth (docs/stream.md)",
        ("stream", "results", "distributed"),
        ("array_mib", "precision", "stream_kernels", "stream_devices", "num_times"),
    ),
    "check": (
        "judge this node before a run (docs/node_check.md)",
        ("check", "mesh", "model", "data", "train", "results", "distributed", "gpu_settings"),
        ("check_budget_s", "check_record"),
    ),
    "flops": (
        "the step's FLOP accounting, XLA against the paper's rules (docs/flops.md)",
        ("mesh", "model", "data", "train", "results"),
        ("model", "dataset", "batch_size", "ensemble_size", "flops_source"),
    ),
}
WIDTH = 100


def _flag_line(name: str) -> str:
    flag = hflags.FLAGS[name]
    default = "''" if flag.default == "" else flag.default
    head = f"  --{name} (default: {default})"
    body = textwrap.fill(flag.help, WIDTH, initial_indent="      ", subsequent_indent="      ")
    return f"{head}\n{body}"


def _section_flags(sections: tuple[str, ...]) -> list[str]:
    return [name for name, path in hflags.FLAG_FIELDS.items() if path[0] in sections]


def text() -> str:
    """The grouped help."""
    out = [
        "python -m hpcai_jax.main --mode=MODE [--flagfile=configs/X.flags] [--flag=value ...]",
        "",
        "Common: --mode (default: train) selects one of the modes below; --flagfile=FILE reads",
        "flags from a file (configs/ holds the shipped ones); --helpfull lists every flag with",
        "its help, absl's own included; --dry_run prints the plan of a run (its settings, mesh",
        "and target) and exits without compiling anything. A first run (minutes on a CPU;",
        "README.md):",
        "  python -m hpcai_jax.main --flagfile=configs/quickstart.flags",
    ]
    for mode, (what, sections, key) in MODES.items():
        out += ["", f"--mode={mode}: {what}"]
        out += [_flag_line(name) for name in key if name in hflags.FLAG_FIELDS]
        rest = [n for n in _section_flags(sections) if n not in key]
        if rest:
            listed = ", ".join(f"--{n}" for n in rest)
            out.append(
                textwrap.fill(
                    f"and {len(rest)} more (--helpfull): {listed}",
                    WIDTH,
                    initial_indent="  ",
                    subsequent_indent="    ",
                )
            )
    return "\n".join(out)


def wants_help(argv: list[str]) -> bool:
    """Whether the command line asks for the grouped help (--help or -h, not --helpfull)."""
    return any(a in ("--help", "-h", "-?", "--help=true") for a in argv[1:])
