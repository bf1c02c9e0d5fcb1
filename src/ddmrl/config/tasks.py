"""Tasks and rewards: a task's name and parameters (validated by the task's ``Params``), the reward models a task
names.
"""

from __future__ import annotations

import dataclasses
import difflib
from typing import Annotated, Any

from pydantic import ConfigDict, Field, ValidationError, WrapValidator
from pydantic import dataclasses as pdc
from pydantic_core import PydanticCustomError

from ddmrl.config._base import (
    Float,
    Str,
    describe,
    refuse,
)
from ddmrl.config.names import UNKNOWN, adapter, described, unknown
from ddmrl.registry import IMPORT_PATH
from ddmrl.rewards import REWARD_MODELS, reward_model
from ddmrl.tasks import TASKS

# ------------------------------------------------------------------------------- tasks and rewards (ddmrl.tasks)


TASK_PARAMS_TYPE = {"type": "mapping: task name to its parameters (a Task section)"}


def task_kind(name: str) -> str:
    """What registered task ``name`` is: text (named by ``tasks``), image (``image.tasks``) or benchmark (an image
    task for evaluation only, ``image.eval_tasks``), as its class declares it (``modality``, ``evaluation_only``);
    imports the task's module only."""
    task = TASKS[name]
    return "benchmark" if task.modality == "image" and task.evaluation_only else task.modality


def tasks_of(*kinds: str) -> tuple[str, ...]:
    """The registered tasks of ``kinds``, in the registry's order (imports every task's module)."""
    return tuple(name for name in TASKS if task_kind(name) in kinds)


def _is_task(name: Any, kinds: tuple[str, ...]) -> bool:
    """A task of ``kinds``: built in or an entry point (an import path is no task name: names make file names)."""
    return isinstance(name, str) and not IMPORT_PATH.fullmatch(name) and name in TASKS and task_kind(name) in kinds


@dataclasses.dataclass(frozen=True)
class TaskNamed:
    """Validates a name in a list of tasks: a task of ``ddmrl.tasks.TASKS`` of ``kind``. A valid name imports its
    task's module only; an unknown one is refused with the choices."""

    kind: str

    def choices(self) -> tuple[str, ...]:
        return tasks_of(self.kind)

    def __call__(self, value: Any, handler: Any) -> Any:
        if isinstance(value, str) and IMPORT_PATH.fullmatch(value):
            why = "a task outside the package is named by an entry point of the ddmrl.tasks group, not an import path"
            raise PydanticCustomError(UNKNOWN, why + " (task names make file names)")
        if not _is_task(value, (self.kind,)):
            raise unknown(self.choices())
        return handler(value)


def TaskName(kind: str) -> Any:  # noqa: N802  (a type)
    """The type of a task's name in a list of tasks of ``kind``."""
    return Annotated[Str, WrapValidator(TaskNamed(kind))]


@dataclasses.dataclass(frozen=True)
class TaskParams:
    """Validates a ``task_params`` mapping, each entry by its task's model (the ``params`` of the task's class: the
    ``Params`` of its module), for tasks of ``kinds``; the mapping is kept as written (task.json holds it as given).
    A problem is described as the task's model describes it, below the entry's key."""

    kinds: tuple[str, ...]

    def __call__(self, value: Any, handler: Any) -> Any:
        value = handler(value)
        for name, params in value.items():
            if not _is_task(name, self.kinds):
                allowed = tasks_of(*self.kinds)
                guess = difflib.get_close_matches(name, allowed, n=1)
                hint = f" (did you mean {guess[0]}?)" if guess else ""
                raise described(f"{name}: unknown key{hint}; allowed: {', '.join(allowed)}")
            if params is not None:  # a task given as null takes its defaults
                model = TASKS[name].params
                try:
                    adapter(model).validate_python(params)
                except ValidationError as e:
                    raise described(describe(e, model, name)) from None
        return value


def reward_models() -> tuple[str, ...]:
    """The reward models a reward's entry may name (``ddmrl.rewards.REWARD_MODELS``; weighted_sum is their sum)."""
    return tuple(name for name in REWARD_MODELS if not reward_model(name).combines)


def is_reward_model(name: Any) -> bool:
    """Whether ``name`` names a reward model: built in (not their weighted sum), ``module:attribute`` or an entry
    point of ``ddmrl.rewards`` (nothing is imported)."""
    return isinstance(name, str) and name in REWARD_MODELS and not reward_model(name).combines


@dataclasses.dataclass(frozen=True)
class RewardName:
    """Validates a reward model's name: one of :func:`reward_models`, or one outside the package (``module:attribute``
    or an entry point of ``ddmrl.rewards``; imported when the task is built)."""

    def choices(self) -> tuple[str, ...]:
        return reward_models()

    def __call__(self, value: Any, handler: Any) -> Any:
        if not is_reward_model(value):
            raise unknown(self.choices())
        return handler(value)


@pdc.dataclass(frozen=True, config=ConfigDict(extra="allow"))
class RewardEntry:
    """One term of a weighted reward (``ddmrl.rewards.reward_from_params``); any other key is an option of the
    reward model, checked when the task is built."""

    model: Annotated[Str, WrapValidator(RewardName())] | None = Field(
        None, description="Reward model (default: the entry's name)."
    )
    weight: Annotated[Float, Field(allow_inf_nan=False)] = Field(1.0, description="Weight in the sum.")


#: the task parameters that are weighted rewards (``RewardEntry`` mappings): geneval's and geneval_mini's RL reward,
#: hps's score
REWARD_KEYS = ("reward_models", "scorer")


def named_reward_models(task_params: dict[str, Any] | None) -> tuple[str, ...]:
    """The reward models a task's raw parameters name in their weighted rewards (an entry's ``model``, by default
    its name)."""
    names = []
    for key in REWARD_KEYS:
        section = (task_params or {}).get(key) or {}
        names += [(term or {}).get("model") or entry for entry, term in section.items()]
    return tuple(dict.fromkeys(names))


def check_reward_entries(section: dict[str, RewardEntry] | None, key: str) -> None:
    """Refuse an entry of a weighted reward that names no reward model (its ``model`` defaults to its name)."""
    for entry, term in (section or {}).items():
        if term.model is None and not is_reward_model(entry):
            raise refuse(
                f"{key}.{entry}.model",
                entry,
                f"unknown reward model; choose one of {', '.join(reward_models())}",
            )
