"""params.yaml, validated once by a typed schema (pydantic).

Every stage script and the Snakemake workflow call :func:`load`, so a bad value is refused before any stage does
work, with one line that names the file, the key, the value and what is allowed::

    params.yaml: grpo.num_generations = 1: must be >= 2 (GRPO needs a group to compare against)

Profiles of scale: ``profile: tiny`` is the default embedded run and needs no other file. Any other profile ``NAME``
overlays ``profiles/NAME.yaml`` (next to params.yaml) onto params.yaml, key by key, before validation.

Runs: ``grpo.methods`` names sections of ``methods:``; each section is validated by its method's model
(``schema.METHOD_CONFIGS``, chosen by the section's ``method``, which defaults to its name) after it is resolved:
the method's defaults, then the ``grpo:`` keys except what the method fixes (SPG has no KL), then the section's own
keys, which may not contradict what the method fixes. Every resolved run is a flat :class:`GRPOConfig` that holds
every knob of every method, so library code reads ``cfg.gamma`` or ``cfg.shrink`` on any run.

The schema (``ddmrl.config.schema``) is a leaf: it imports only the standard library, yaml, pydantic and
``ddmrl.errors``. ``docs/params.md`` is generated from it: ``python -m ddmrl.config.docs``. Hyperparameter names
follow TRL's ``GRPOConfig`` where the concept matches.
"""

from ddmrl.config._base import deep_merge
from ddmrl.config.loader import load, method_config, profile_path, read_params
from ddmrl.config.schema import (
    DEFAULT_PROFILE,
    DEFAULT_TRACKERS,
    METHOD_CONFIGS,
    TASK_MODALITY,
    TASK_PARAMS,
    TRACKERS,
    TRAIN_LOSSES,
    Config,
    DiffuGRPOConfig,
    DownloadConfig,
    EvaluateConfig,
    GDPOConfig,
    GRPOConfig,
    GRPOSection,
    HubItem,
    ImageConfig,
    LaunchConfig,
    LoraConfig,
    MaskGRPOConfig,
    MethodConfig,
    ModelConfig,
    ModelSpec,
    RebRLConfig,
    RolloutConfig,
    SamplerConfig,
    SFTConfig,
    SPGConfig,
    TraceRLConfig,
    TrainConfig,
    UniGRPOConfig,
    Wd1Config,
    fixed_values,
    is_commit,
    run_name,
)
from ddmrl.errors import ConfigError

__all__ = [
    "DEFAULT_PROFILE",
    "DEFAULT_TRACKERS",
    "METHOD_CONFIGS",
    "TASK_MODALITY",
    "TASK_PARAMS",
    "TRACKERS",
    "TRAIN_LOSSES",
    "Config",
    "ConfigError",
    "DiffuGRPOConfig",
    "DownloadConfig",
    "EvaluateConfig",
    "GDPOConfig",
    "GRPOConfig",
    "GRPOSection",
    "HubItem",
    "ImageConfig",
    "LaunchConfig",
    "LoraConfig",
    "MaskGRPOConfig",
    "MethodConfig",
    "ModelConfig",
    "ModelSpec",
    "RebRLConfig",
    "RolloutConfig",
    "SFTConfig",
    "SPGConfig",
    "SamplerConfig",
    "TraceRLConfig",
    "TrainConfig",
    "UniGRPOConfig",
    "Wd1Config",
    "deep_merge",
    "fixed_values",
    "is_commit",
    "load",
    "method_config",
    "profile_path",
    "read_params",
    "run_name",
]
