"""Every command-line flag, in one place, and their one-time conversion into a `RunConfig`.

Names are a public interface: users' scripts and flagfiles depend on them.
"""

from __future__ import annotations

from absl import flags

from hpcai_jax import config as cfg
from hpcai_jax.distributed import DistributedConfig

_D = cfg.RunConfig()

# --- what to run -------------------------------------------------------------------------
flags.DEFINE_enum("mode", _D.mode, cfg.MODES, "train: bagged-ensemble training; flops: FLOP "
                  "accounting report; stream: memory-bandwidth benchmark.")

# --- the ensemble and the mesh (Eq. 5) ---------------------------------------------------
flags.DEFINE_integer("ensemble_size", _D.mesh.ensemble_size, "M: number of bagged base models.")
flags.DEFINE_integer("members_per_device", _D.mesh.members_per_device,
                     "Members held by one device (>1: several members per device). 0: derive "
                     "from M, P_degree and the device count.")
flags.DEFINE_integer("parallel_degree", _D.mesh.parallel_degree,
                     "P_degree: devices that data-parallel-train one member. 0: the local "
                     "device count (the paper's acc_num).")
flags.DEFINE_enum("member_strategy", _D.mesh.member_strategy, cfg.MEMBER_STRATEGIES,
                  "How a device runs its several members: vmap, unroll (a loop inside the "
                  "step), or auto (the measured default for the backend).")

# --- workload, model, data ---------------------------------------------------------------
flags.DEFINE_enum("workload", _D.model.workload, cfg.WORKLOADS, "HPC AI500 workload.")
flags.DEFINE_enum("model", _D.model.model, cfg.MODELS, "Base model of every member.")
flags.DEFINE_enum("dtype", _D.model.dtype, cfg.DTYPES, "Compute dtype (parameters stay float32).")
flags.DEFINE_string("dataset", _D.data.dataset,
                    "fashion_mnist (Debian IDX files), synthetic (generated on device), or any "
                    "tensorflow-datasets name prepared in array_record format (e.g. imagenet2012).")
flags.DEFINE_string("data_dir", _D.data.data_dir,
                    "Data directory. Default: /usr/share/datasets/fashion-mnist for fashion_mnist, "
                    "~/tensorflow_datasets for tfds data sets.")
flags.DEFINE_integer("train_examples", _D.data.train_examples,
                     "Use the first N training examples (0: all).")
flags.DEFINE_integer("eval_examples", _D.data.eval_examples,
                     "Evaluate on the first N held-out examples (0: all).")
flags.DEFINE_integer("oob_examples", _D.data.oob_examples,
                     "Out-of-bag estimate on the first N training examples: each is predicted by "
                     "the members that never trained on it (0: no estimate).")
flags.DEFINE_integer("image_size", _D.data.image_size, "Square image size for tfds and synthetic data.")
flags.DEFINE_integer("num_classes", _D.data.num_classes, "Number of classes of synthetic data.")
flags.DEFINE_integer("prefetch", _D.data.prefetch, "Batches prepared ahead on the devices.")

# --- optimisation ------------------------------------------------------------------------
flags.DEFINE_enum("optimizer", _D.optim.optimizer, cfg.OPTIMIZERS, "Optimizer of every member.")
flags.DEFINE_float("learning_rate", _D.optim.learning_rate,
                   "Base learning rate at --lr_reference_batch (linear scaling rule).")
flags.DEFINE_integer("lr_reference_batch", _D.optim.lr_reference_batch,
                     "Batch size at which --learning_rate applies unscaled.")
flags.DEFINE_float("momentum", _D.optim.momentum, "SGD momentum.")
flags.DEFINE_float("weight_decay", _D.optim.weight_decay, "Decoupled L2 weight decay.")
flags.DEFINE_enum("lr_schedule", _D.optim.lr_schedule, cfg.LR_SCHEDULES, "Learning-rate schedule.")
flags.DEFINE_float("warmup_epochs", _D.optim.warmup_epochs, "Linear warm-up length in epochs.")

# --- training loop -----------------------------------------------------------------------
flags.DEFINE_integer("batch_size", _D.train.batch_size, "|B|: batch size of one member.")
flags.DEFINE_float("epochs", _D.train.epochs, "Training epochs (fractions allowed).")
flags.DEFINE_integer("steps", _D.train.steps, "Training steps; overrides --epochs when > 0.")
flags.DEFINE_integer("seed", _D.train.seed, "Run seed: members' keys and bootstrap samples.")
flags.DEFINE_enum("bootstrap", _D.train.bootstrap, cfg.BOOTSTRAP_METHODS,
                  "Per-member resampling: with_replacement (N draws), poisson (Poisson(1) "
                  "counts), none (plain shuffling, for ablations).")
flags.DEFINE_integer("eval_batch_size", _D.train.eval_batch_size, "Held-out examples per eval step.")
flags.DEFINE_integer("log_every", _D.train.log_every, "Steps between progress lines.")
flags.DEFINE_integer("timing_warmup_steps", _D.train.timing_warmup_steps,
                     "First steps trained but excluded from timing and FLOPS.")

# --- results -----------------------------------------------------------------------------
flags.DEFINE_string("results_dir", _D.results.results_dir, "Directory for JSON results records.")
flags.DEFINE_string("run_name", _D.results.run_name,
                    "Run id, the record's file name (default: <mode>-<UTC time>-<pid>).")
flags.DEFINE_bool("overwrite", _D.results.overwrite,
                  "Replace an existing record of the same run id instead of refusing to start.")
flags.DEFINE_float("target_quality", _D.results.target_quality,
                   "Target quality for VFLOPS. 0: the official target of (workload, model, data "
                   "set), e.g. 0.763 for ResNet-50 on imagenet2012; any other run must set it.")
flags.DEFINE_float("quality_exponent", _D.results.quality_exponent,
                   "n of the VFLOPS penalty (Eq. 8). -1: the workload's (5 for image "
                   "classification); 0 means 0 (no penalty).")
flags.DEFINE_enum("flops_source", _D.results.flops_source, cfg.FLOPS_SOURCES,
                  "Which FLOP count of the compiled step FLOPS uses: xla (cost analysis), "
                  "analytic (the jaxpr walk under XLA's rules), or auto (XLA when it agrees with "
                  "the analytic count within the cross-check tolerance, else analytic).")

# --- reliability ---------------------------------------------------------------------
flags.DEFINE_string("checkpoint_dir", _D.reliability.checkpoint_dir,
                    "Orbax checkpoint directory; a run started with an existing one resumes from it.")
flags.DEFINE_integer("checkpoint_every", _D.reliability.checkpoint_every,
                     "Steps between checkpoints (0: only at the end and on preemption).")
flags.DEFINE_integer("keep_checkpoints", _D.reliability.keep_checkpoints, "Checkpoints kept.")
flags.DEFINE_enum("on_divergence", _D.reliability.on_divergence, cfg.ON_DIVERGENCE,
                  "A member with a non-finite loss or parameter: stop the run (record marked "
                  "invalid), or prune it from the ensemble and go on.")
flags.DEFINE_integer("divergence_check_every", _D.reliability.divergence_check_every,
                     "Steps between host checks of the on-device divergence flags (0: --log_every).")
flags.DEFINE_string("inject_nan", _D.reliability.inject_nan,
                    "Test hook: MEMBER@STEP sets that member's parameters to NaN before that step.")

# --- multi-process (jax.distributed) -----------------------------------------------------
flags.DEFINE_string("coordinator_address", _D.distributed.coordinator_address,
                    "HOST:PORT of process 0. Explicit flags win over cluster auto-detection.")
flags.DEFINE_integer("num_processes", _D.distributed.num_processes, "Number of processes.")
flags.DEFINE_integer("process_id", _D.distributed.process_id, "This process's index.")
flags.DEFINE_string("local_device_ids", _D.distributed.local_device_ids,
                    "Devices this process owns: '0,1,2,3', 'all' (one task per node), or empty "
                    "for JAX's choice.")
flags.DEFINE_integer("distributed_timeout_s", _D.distributed.timeout_s,
                     "Seconds to wait for every process to join.")

# --- STREAM ------------------------------------------------------------------------------
flags.DEFINE_integer("array_size", _D.stream.array_size, "STREAM: elements per array.")
flags.DEFINE_float("array_mib", _D.stream.array_mib, "STREAM: MiB per array.")
flags.DEFINE_float("array_fraction", _D.stream.array_fraction,
                   "STREAM: fraction of one device's memory for the three arrays.")
flags.DEFINE_integer("num_times", _D.stream.num_times, "STREAM: repetitions of each kernel.")
flags.DEFINE_string("precision", _D.stream.precision, "STREAM: float64, float32 or bfloat16.")
flags.DEFINE_string("stream_kernels", _D.stream.kernels, "STREAM: all, triad or nstream.")
flags.DEFINE_string("stream_devices", _D.stream.devices,
                    "STREAM: one (first local device) or all (sharded over every device).")
flags.DEFINE_bool("csv", _D.stream.csv, "STREAM: print CSV instead of the table.")
flags.DEFINE_bool("mibibytes", _D.stream.mibibytes, "STREAM: report MiB/s instead of MB/s.")
flags.DEFINE_bool("strict_size", _D.stream.strict_size,
                  "STREAM: arrays smaller than 4x the largest cache are an error, not a warning.")

FLAGS = flags.FLAGS


def config_from_flags(values: flags.FlagValues = FLAGS) -> cfg.RunConfig:
    """Builds and validates the run configuration; raises UsageError on bad values."""
    v = values
    return cfg.RunConfig(
        mode=v.mode,
        mesh=cfg.MeshConfig(ensemble_size=v.ensemble_size, members_per_device=v.members_per_device,
                            parallel_degree=v.parallel_degree, member_strategy=v.member_strategy),
        data=cfg.DataConfig(dataset=v.dataset, data_dir=v.data_dir, train_examples=v.train_examples,
                            eval_examples=v.eval_examples, oob_examples=v.oob_examples,
                            image_size=v.image_size,
                            num_classes=v.num_classes, prefetch=v.prefetch),
        model=cfg.ModelConfig(workload=v.workload, model=v.model, dtype=v.dtype),
        optim=cfg.OptimConfig(optimizer=v.optimizer, learning_rate=v.learning_rate,
                              lr_reference_batch=v.lr_reference_batch, momentum=v.momentum,
                              weight_decay=v.weight_decay, lr_schedule=v.lr_schedule,
                              warmup_epochs=v.warmup_epochs),
        train=cfg.TrainConfig(batch_size=v.batch_size, epochs=v.epochs, steps=v.steps, seed=v.seed,
                              bootstrap=v.bootstrap, eval_batch_size=v.eval_batch_size,
                              log_every=v.log_every, timing_warmup_steps=v.timing_warmup_steps),
        results=cfg.ResultsConfig(results_dir=v.results_dir, run_name=v.run_name,
                                  overwrite=v.overwrite, target_quality=v.target_quality,
                                  quality_exponent=v.quality_exponent,
                                  flops_source=v.flops_source),
        reliability=cfg.ReliabilityConfig(checkpoint_dir=v.checkpoint_dir,
                                          checkpoint_every=v.checkpoint_every,
                                          keep_checkpoints=v.keep_checkpoints,
                                          on_divergence=v.on_divergence,
                                          divergence_check_every=v.divergence_check_every,
                                          inject_nan=v.inject_nan),
        distributed=DistributedConfig(coordinator_address=v.coordinator_address,
                                      num_processes=v.num_processes, process_id=v.process_id,
                                      local_device_ids=v.local_device_ids,
                                      timeout_s=v.distributed_timeout_s),
        stream=cfg.StreamConfig(array_size=v.array_size, array_mib=v.array_mib,
                                array_fraction=v.array_fraction, num_times=v.num_times,
                                precision=v.precision, kernels=v.stream_kernels,
                                devices=v.stream_devices, csv=v.csv, mibibytes=v.mibibytes,
                                strict_size=v.strict_size),
    ).validate()
