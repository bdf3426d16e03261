"""The configuration `main` runs: the training run's settings (`config.RunConfig`, all the
engine reads) composed with each mode's own: the distributed start-up's (`distributed.py`),
STREAM's (`stream/config.py`, beside its mode) and the node check's (`check_config.py`,
extending the one node-check setting a training run reads). It sits above `config.py`, which
imports none of the modes, and below the modes that read it (`nodecheck/`; STREAM takes what it
reads of it as a protocol, `stream/record.py`); `flags.py` derives one flag per setting of
`Settings`, and a record's `config` section is `Settings.to_dict()`."""

from __future__ import annotations

import dataclasses

from hpcai_jax import fields, gpu_settings
from hpcai_jax.check_config import CheckConfig
from hpcai_jax.config import RunConfig
from hpcai_jax.distributed import DistributedConfig
from hpcai_jax.stream.config import StreamConfig


@dataclasses.dataclass(frozen=True)
class Settings(RunConfig):
    """Every setting of every mode; a RunConfig wherever the engine takes one."""

    check: CheckConfig = CheckConfig()
    distributed: DistributedConfig = DistributedConfig()
    stream: StreamConfig = StreamConfig()

    def parts(self) -> tuple:
        return (*super().parts(), self.distributed)

    def validate(self) -> Settings:
        """The training settings' checks and rules (RunConfig.validate), the GPU settings'
        names, and STREAM's own rules (but for finiteness) only in stream mode, so that other
        modes never trip on them."""
        fields.check(self)
        gpu_settings.select(self.gpu_settings)
        fields.check_finite(self.stream)  # every float a user can type is finite
        super().validate()
        if self.mode == "stream":
            self.stream.validate()
        return self
