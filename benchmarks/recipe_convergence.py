"""The ImageNet recipe's convergence check at CPU scale: the same bagged members trained for the
same steps on a JPEG set built here, without and with the recipe, held-out top-1 side by side.

The set is Fashion-MNIST (Debian's IDX files: nothing is downloaded) stored as JPEGs, so that the
runs go through an ImageNet run's JPEG path. The runs (baseline, sgd_recipe, lars_recipe), what
they differ in, and why short runs favour the baseline: `docs/measurements.md`, The ImageNet
recipe at CPU scale.

    python benchmarks/recipe_convergence.py [--steps=600] [--ensemble_size=4] [--train=12000]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import tensorflow_datasets as tfds
from PIL import Image

from hpcai_jax.data.fashion_mnist import load_split

ROOT = Path(__file__).resolve().parent.parent
FASHION_MNIST = "/usr/share/datasets/fashion-mnist"


class FmnistJpeg(tfds.core.GeneratorBasedBuilder):
    """Fashion-MNIST as S × S grey JPEGs: a small ImageNet-shaped set, built here."""

    VERSION = tfds.core.Version("1.0.0")
    side, train, test = 40, 12000, 2000  # set from the flags before building

    def _info(self):
        return tfds.core.DatasetInfo(
            builder=self,
            features=tfds.features.FeaturesDict(
                {
                    "image": tfds.features.Image(shape=(None, None, 1), encoding_format="jpeg"),
                    "label": tfds.features.ClassLabel(num_classes=10),
                }
            ),
        )

    def _split_generators(self, dl_manager):
        return {
            "train": self._generate_examples("train", self.train),
            "test": self._generate_examples("test", self.test),
        }

    def _generate_examples(self, split, n):
        source = load_split(FASHION_MNIST, split)
        rows = source.read(np.arange(n))
        for i, (image, label) in enumerate(zip(rows["image"], rows["label"], strict=True)):
            big = Image.fromarray(image[..., 0]).resize(
                (self.side, self.side), Image.Resampling.BILINEAR
            )
            buf = io.BytesIO()
            big.save(buf, format="JPEG", quality=90)
            yield i, {"image": buf.getvalue(), "label": int(label)}


RUNS = {
    "baseline": ["--optimizer=sgd", "--lr_schedule=constant", "--noaugment"],
    "sgd_recipe": [
        "--optimizer=sgd",
        "--lr_schedule=warmup_cosine",
        "--warmup_epochs=0.5",
        "--augment",
        "--label_smoothing=0.1",
    ],
    "lars_recipe": [
        "--optimizer=lars",
        "--learning_rate=2.0",
        "--lars_trust_coefficient=0.001",
        "--lr_schedule=warmup_polynomial",
        "--warmup_epochs=0.5",
        "--lr_decay_power=2",
        "--augment",
        "--label_smoothing=0.1",
    ],
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--ensemble_size", type=int, default=4)
    parser.add_argument("--batch_size", type=int, default=64)
    parser.add_argument("--train", type=int, default=12000)
    parser.add_argument("--test", type=int, default=2000)
    parser.add_argument("--side", type=int, default=40, help="stored JPEG side")
    parser.add_argument("--image_size", type=int, default=32, help="trained side")
    parser.add_argument("--runs", default=",".join(RUNS))
    args = parser.parse_args()
    FmnistJpeg.side, FmnistJpeg.train, FmnistJpeg.test = args.side, args.train, args.test
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        FmnistJpeg(data_dir=tmp, file_format="array_record").download_and_prepare()
        print(f"set: {args.train} + {args.test} JPEGs ({time.perf_counter() - start:.0f} s)")
        env = {**os.environ, "JAX_PLATFORMS": "cpu"}
        env.setdefault("XLA_FLAGS", f"--xla_force_host_platform_device_count={args.ensemble_size}")
        for name in args.runs.split(","):
            out = Path(tmp) / f"results_{name}"
            command = [
                sys.executable,
                "-m",
                "hpcai_jax.main",
                "--dataset=fmnist_jpeg",
                f"--data_dir={tmp}",
                f"--image_size={args.image_size}",
                "--model=resnet_small",
                f"--ensemble_size={args.ensemble_size}",
                "--parallel_degree=1",
                f"--batch_size={args.batch_size}",
                f"--steps={args.steps}",
                "--learning_rate=0.1",
                "--eval_batch_size=500",
                "--oob_examples=0",
                "--target_quality=0.9",
                "--data_workers=1",
                f"--results_dir={out}",
                *RUNS[name],
            ]
            start = time.perf_counter()
            proc = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
            if proc.returncode != 0:
                print(f"{name}: failed\n{proc.stderr[-2000:]}")
                continue
            (path,) = out.glob("*.json")
            quality = json.loads(path.read_text())["quality"]
            results[name] = (quality["members"], quality["ensemble"])
            print(f"{name}: {time.perf_counter() - start:.0f} s", flush=True)
    print(
        f"\nresnet_small, M = {args.ensemble_size}, batch {args.batch_size}, {args.steps} steps "
        f"({args.steps * args.batch_size / args.train:.1f} epochs of {args.train}), "
        f"{args.side}² JPEGs → {args.image_size}²; held-out top-1 on {args.test}"
    )
    print(f"{'run':12} {'members':>30} {'mean':>6} {'ensemble':>8}")
    for name, (members, ensemble) in results.items():
        shown = " ".join(f"{m:.3f}" for m in members)
        print(f"{name:12} {shown:>30} {np.mean(members):6.3f} {ensemble:8.3f}")


if __name__ == "__main__":
    main()
