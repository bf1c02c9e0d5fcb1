"""params.yaml, validated once by a typed schema (pydantic).

Every stage script and the Snakemake workflow call :func:`load`, so a bad value is refused before any stage does
work, with one line that names the file, the key, the value and what is allowed::

    params.yaml: grpo.num_generations = 1: must be >= 2 (GRPO needs a group to compare against)

Profiles of scale: ``profile: tiny`` is the default embedded run and needs no other file. Any other profile ``NAME``
overlays ``profiles/NAME.yaml`` (next to params.yaml) onto params.yaml, key by key, before validation.

Runs: ``grpo.methods`` names sections of ``methods:``; each section is validated by its method's model
(``Params`` in the method's module, ``ddmrl.methods``; chosen by the section's ``method``, which defaults to its name)
after it is resolved:
the method's defaults, then the ``grpo:`` keys except what the method fixes (SPG has no KL), then the section's own
keys, which may not contradict what the method fixes. A resolved run is its method's ``Params``: the shared keys of
:class:`GRPOConfig` and the keys its method alone reads (MaskGRPO's ``gamma``, RebRL's ``rebrl_mode``), which other
methods' sections refuse; a component reads a key of its own from the run only where the methods using it declare it
(a view sampler's ``keys``, ``ddmrl.masking.ViewSampler``).

The schema (``ddmrl.config``'s modules, one per section, in verl's manner: ``names`` (the registered names and
shared types), ``model``, ``scale``, ``download``, ``sampler``, ``evaluate``, ``grpo``, ``tasks``, ``mar`` and
``root`` (the whole file)) is a leaf: it imports only the standard library, yaml, pydantic,
``ddmrl.errors`` and the registries of methods, tasks, reward models, model families and samplers (which import none
of their members); validating a method section imports its method's module, validating a task's name or parameters
its task's module (``task_params.<name>`` is validated by the task's ``Params``), neither of which imports torch; an
entry of ``sampler.options`` imports its sampler's module (Dream's: torch).
``docs/params.md`` is generated from it: ``python -m ddmrl.config.docs``. Hyperparameter names
follow TRL's ``GRPOConfig`` where the concept matches.
"""

from ddmrl.config._base import deep_merge, refuse, section
from ddmrl.config.download import DownloadConfig, SFTConfig, TrainConfig
from ddmrl.config.evaluate import EvaluateConfig, PassAtKConfig
from ddmrl.config.grpo import GRPOConfig, GRPOSection
from ddmrl.config.loader import load, method_config, profile_path, read_params
from ddmrl.config.mar import (
    MAR_TASK,
    MarConfig,
    MarEvaluateConfig,
    MarModelConfig,
    MarPretrainConfig,
    MarRunConfig,
    MarSamplerConfig,
    mar_run_name,
)
from ddmrl.config.model import HubItem, ModelConfig, ModelSpec
from ddmrl.config.names import DEFAULT_PROFILE, DEFAULT_TRACKERS, TRACKERS, TRAIN_LOSSES, is_commit, run_name
from ddmrl.config.root import Config, ImageConfig
from ddmrl.config.sampler import RolloutConfig, SamplerConfig
from ddmrl.config.scale import LaunchConfig, LoraConfig
from ddmrl.errors import ConfigError

__all__ = [
    "DEFAULT_PROFILE",
    "DEFAULT_TRACKERS",
    "TRACKERS",
    "TRAIN_LOSSES",
    "Config",
    "ConfigError",
    "DownloadConfig",
    "EvaluateConfig",
    "GRPOConfig",
    "GRPOSection",
    "HubItem",
    "ImageConfig",
    "LaunchConfig",
    "MAR_TASK",
    "LoraConfig",
    "MarConfig",
    "MarEvaluateConfig",
    "MarModelConfig",
    "MarPretrainConfig",
    "MarRunConfig",
    "MarSamplerConfig",
    "ModelConfig",
    "ModelSpec",
    "PassAtKConfig",
    "RolloutConfig",
    "SFTConfig",
    "SamplerConfig",
    "TrainConfig",
    "deep_merge",
    "refuse",
    "section",
    "is_commit",
    "load",
    "mar_run_name",
    "method_config",
    "profile_path",
    "read_params",
    "run_name",
]
