"""A packed run forged the way a dishonest submitter would (tests/test_forgery.py): the figures
a claim rests on edited in the record and the MLLOG together, every figure that follows from them
re-derived with the package's own arithmetic (hpcai_jax/metrics.py), and the flagfile,
README.md and system.json rewritten with pack's writers, so that only what `check` proves beyond
arithmetic (docs/submission.md §3) can tell."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np

from hpcai_jax import metrics, records
from hpcai_jax.submission import README, SYSTEM, flagfile, pack, system
from hpcai_jax.submission.logfile import PREFIX
from hpcai_jax.telemetry import mllog


class Forged:
    """One run of a package folder, as JSON to edit: `record` and the MLLOG's `lines`."""

    def __init__(self, folder: Path, run: str):
        self.folder, self.run = folder, run
        self.record = json.loads((folder / f"{run}.json").read_text())
        text = (folder / f"{run}.mllog").read_text().splitlines()
        self.lines = [json.loads(line.removeprefix(PREFIX)) for line in text]

    def key(self, key: str) -> list[dict]:
        return [line for line in self.lines if line["key"] == key]

    def one(self, key: str) -> dict:
        return self.key(key)[0]

    def drop(self, predicate) -> None:
        self.lines = [line for line in self.lines if not predicate(line)]

    def evaluations(self) -> list[tuple[dict, dict]]:
        """(eval_stop, eval_accuracy) per evaluation, as logfile.Log pairs them."""
        stops, accs = self.key("eval_stop"), self.key("eval_accuracy")
        return list(zip(stops, accs, strict=True))

    # What a forger edits --------------------------------------------------------------------

    def retime(self, forged) -> None:
        """Every MLLOG time t becomes round(forged(t)) (monotone); the record's epoch and curve
        times are then read off the forged log, as the run would have written them."""
        for line in self.lines:
            line["time_ms"] = round(forged(line["time_ms"]))
        starts = {line["metadata"]["epoch_num"]: line for line in self.key("epoch_start")}
        stops = {line["metadata"]["epoch_num"]: line for line in self.key("epoch_stop")}
        for epoch in self.record["epochs"]:
            index = epoch["index"]
            epoch["wall_s"] = (stops[index]["time_ms"] - starts[index]["time_ms"]) / 1e3

    def scale_timing(self, s: float) -> None:
        """Every measured duration of the record ÷ s, as a forger who sped the whole run up
        s-fold writes it (the log: `retime`)."""
        t = self.record["timing"]
        for key in ("min_s", "median_s", "max_s", "mean_s", "total_s"):
            t["step_s"][key] /= s
        for key in ("train_wall_s", "data_wait_s", "eval_s", "checkpoint_s", "total_wall_s"):
            t[key] /= s
        for process in t["per_process"] or []:
            process["step_s"] = {k: v / s for k, v in process["step_s"].items()}

    def set_quality(self, value) -> None:
        """Every held-out quality q becomes value(q): the curve's, the final one's, and so the
        log's eval_accuracy lines (`rederive`)."""
        q = self.record["quality"]
        for point in q["curve"]:
            point["ensemble"] = value(point["ensemble"])
            point["members"] = [value(v) for v in point["members"]]
        q["ensemble"] = q["curve"][-1]["ensemble"]
        q["members"] = list(q["curve"][-1]["members"])

    # What follows from it --------------------------------------------------------------------

    def rederive(self) -> None:
        """Every figure that follows from the edited ones, by the package's own arithmetic."""
        r = self.record
        m, per = r["mesh"]["ensemble_size"], r["flops"]["per_step"]
        for epoch in r["epochs"]:
            epoch["flops"] = per / m * (m * epoch["steps"])
            epoch["flops_per_s"] = epoch["flops"] / epoch["wall_s"]
        for process in r["timing"]["per_process"] or []:
            process["epoch_wall_s"] = [epoch["wall_s"] for epoch in r["epochs"]]
        eq6 = metrics.over_epochs(
            [e["flops"] for e in r["epochs"]], [e["wall_s"] for e in r["epochs"]]
        )
        self._quality()
        q, out = r["quality"], r["metrics"]
        penalty = metrics.penalty(q["ensemble"], q["target"], q["exponent"])
        t = r["timing"]
        steady = metrics.per_second(per / m, r["flops"]["useful_member_steps"], t["train_wall_s"])
        per_device = steady / r["mesh"]["num_devices"]
        out.update(
            flops_per_s=eq6,
            vflops_per_s=eq6 * penalty,
            penalty=penalty,
            flops_per_s_steady=steady,
            vflops_per_s_steady=steady * penalty,
            flops_per_s_per_device=per_device,
            mfu_measured=metrics.mfu(per_device, r["peak_flops"]["measured_per_device"]),
        )
        self._log(eq6, penalty)

    def _quality(self) -> None:
        r, start = self.record, self.one("run_start")["time_ms"]
        q = r["quality"]
        for point, (stop, _) in zip(q["curve"], self.evaluations(), strict=True):
            point["wall_s"] = (stop["time_ms"] - start) / 1e3
            point["member_mean"] = float(np.mean(point["members"]))
        q["member_mean"] = q["curve"][-1]["member_mean"]
        reached = [p for p in q["curve"] if p["ensemble"] >= q["target"]]
        r["time_to_target_s"] = reached[0]["wall_s"] if reached else None
        r["time_to_target_why"] = None if reached else "never reached"

    def _log(self, eq6: float, penalty: float) -> None:
        r = records.read(self.record)  # the forged record, edited and re-derived
        q = r.quality
        self.one("flops_per_step")["value"] = r.flops.per_step
        self.one("number_of_models")["value"] = r.mesh.ensemble_size
        for point, (_, acc) in zip(q.curve, self.evaluations(), strict=True):
            acc["value"] = point.ensemble
            acc["metadata"].update(member_mean=point.member_mean, target=q.target)
        line = self.one("flops_per_s")
        line["value"] = eq6
        line["metadata"].update(per_step=r.flops.per_step, epochs=len(r.epochs))
        line = self.one("vflops_per_s")
        line["value"] = eq6 * penalty
        line["metadata"].update(
            target=q.target, exponent=q.exponent, quality=q.ensemble, penalty=penalty
        )
        # success where the forged curve reaches the target, as the writer decides it.
        line = self.one("run_stop")
        line["metadata"] = {
            **{k: v for k, v in line["metadata"].items() if k in ("file", "lineno")},
            **mllog.outcome(r),
        }

    def save(self, folder: Path, run: str) -> None:
        """The record, the log and the flagfile as run `run` in `folder`."""
        (folder / f"{run}.json").write_text(json.dumps(self.record))
        log = "".join(PREFIX + json.dumps(line) + "\n" for line in self.lines)
        (folder / f"{run}.mllog").write_text(log)
        lines = flagfile.lines(records.read(self.record).config, run)
        header = f"# run {run}: its configuration, rebuilt from the record's config section\n"
        (folder / f"{run}.flags").write_text(header + "\n".join(lines) + "\n")

    def write(self, run: str | None = None) -> None:
        """Saved into its package (as run `run`, default its own id), then README.md and
        system.json regenerated from every record of the package as pack writes them."""
        self.save(self.folder, run or self.run)
        regenerate(self.folder)


def copy_of(package: Path, folder: Path, run_id: str) -> Forged:
    """A fresh copy of a packed `package` in `folder`/package, to forge run `run_id` in."""
    copy = folder / "package"
    shutil.copytree(package, copy)
    return Forged(copy, run_id)


def regenerate(folder: Path) -> None:
    """README.md and system.json from the folder's records with pack's writers, keeping the
    submitter's keys and the packing host's description."""
    runs = [records.read(p) for p in sorted(folder.glob("*.json")) if p.name != SYSTEM]
    (folder / README).write_text(pack.readme(runs))
    old = json.loads((folder / SYSTEM).read_text())
    user = {
        k: v for k, v in old.items() if k not in ("devices", "software", "runs", "packing_host")
    }
    new = system.describe(runs, user) | {"packing_host": old["packing_host"]}
    (folder / SYSTEM).write_text(json.dumps(new, indent=2) + "\n")


def count(q: float, n: int) -> float:
    """The nearest accuracy `n` held-out examples can give, as the evaluation computes it (k / n
    in float64: workloads/classification.py)."""
    return round(q * n) / n


def stretch(starts_stops: list[tuple[int, int]], factor: float):
    """A monotone map of MLLOG times that shrinks each [start, stop] interval `factor`-fold and
    moves everything after it earlier by what it lost."""

    def forged(t: float) -> float:
        lost = sum(max(0.0, min(t, b) - a) for a, b in starts_stops if t > a)
        return t - lost * (1 - 1 / factor)

    assert math.isfinite(factor) and factor > 0
    return forged
