"""Names and types every section uses: the registered names a config gives (validated against their registries,
which import nothing until a member is used), and the shared value types.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from typing import Annotated, Any, Literal, get_args

from pydantic import Field, TypeAdapter, WrapValidator
from pydantic_core import PydanticCustomError

from ddmrl.config._base import (
    DESCRIBED,
    Int,
    Str,
)
from ddmrl.masking import VIEWS
from ddmrl.models import FAMILIES
from ddmrl.objectives import ADVANTAGES
from ddmrl.samplers import SAMPLERS

DEFAULT_PROFILE = "tiny"

# ------------------------------------------------------------------------------------------------ names

UNKNOWN = "unknown_name"  # the error type of a name no registry member of the right kind has


@dataclasses.dataclass(frozen=True)
class Registered:
    """Validates the name of a member of ``registry`` (built in, an import path or an entry point); an unknown
    name is refused with the built-in choices. Imports nothing until the member is used."""

    registry: Any
    extra: tuple[str, ...] = ()  # values accepted besides the members' names ("" or "none": no member)

    def choices(self) -> tuple[str, ...]:
        return (*self.extra, *self.registry)

    def __call__(self, value: Any, handler: Any) -> Any:
        value = handler(value)
        if value not in self.registry and value not in self.extra:
            raise unknown(self.choices())
        return value


def unknown(choices: tuple[str, ...]) -> PydanticCustomError:
    """The error of a name that no member of the right kind has, listing the built-in ones."""
    return PydanticCustomError(UNKNOWN, "unknown value; choose one of {choices}", {"choices": ", ".join(choices)})


#: a model family of ``ddmrl.models.FAMILIES``
ModelKind = Annotated[Str, WrapValidator(Registered(FAMILIES))]
#: a sampler of ``ddmrl.samplers.SAMPLERS``
SamplerName = Annotated[Str, WrapValidator(Registered(SAMPLERS))]
#: a view sampler of ``ddmrl.masking.VIEWS`` (how a method's training views are drawn)
ViewSampler = Annotated[Str, WrapValidator(Registered(VIEWS))]
#: a group advantage of ``ddmrl.objectives.ADVANTAGES`` (TRL's scale_rewards)
Advantages = Annotated[Str, WrapValidator(Registered(ADVANTAGES))]
TrainLoss = Literal["elbo", "maskgit"]
TRAIN_LOSSES: tuple[str, ...] = get_args(TrainLoss)
Tracker = Literal["tensorboard", "dvclive", "wandb"]  # accelerate's tracker names (ddmrl.training.tracking)
TRACKERS: tuple[str, ...] = get_args(Tracker)
DEFAULT_TRACKERS: tuple[str, ...] = ("tensorboard", "dvclive")  # offline; wandb where a user adds it

SectionName = Annotated[
    Str,
    Field(pattern=r"^[A-Za-z0-9_]+$", json_schema_extra={"why": "section names use letters, digits and _ only"}),
]
Seeds = Annotated[tuple[Int, ...], Field(min_length=1, json_schema_extra={"why": "must list at least one seed"})]
_COMMIT = re.compile(r"[0-9a-f]{40}")


def is_commit(revision: str | None) -> bool:
    """True for a full 40-hex git commit id (the only revision that cannot move)."""
    return isinstance(revision, str) and _COMMIT.fullmatch(revision) is not None


Revision = Annotated[
    Str,
    Field(pattern=r"\S", json_schema_extra={"why": "must be a branch, tag or 40-hex commit id"}),
]


@functools.cache
def adapter(params: type) -> TypeAdapter:
    """pydantic's validator of ``params`` (a member's own section model), built once."""
    return TypeAdapter(params)


def described(text: str) -> PydanticCustomError:
    """A validation error whose message is ``text`` as it is (one line, already naming the key)."""
    return PydanticCustomError(DESCRIBED, "{text}", {"text": text})


def run_name(method: str, task: str, seed: int) -> str:
    """A GRPO run's name: ``<method section>_<task>_s<seed>``."""
    return f"{method}_{task}_s{seed}"
