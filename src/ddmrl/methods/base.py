"""The contract of a method: one module declares its section's model (``Params``) and a :class:`Method` naming its
components; ``ddmrl.methods.METHODS`` lists the built-in ones."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, get_args, get_origin

#: the group advantages' epsilon: TRL's (``ddmrl.objectives.advantages.group_advantages``)
ADVANTAGE_EPS = 1e-4


@dataclass(frozen=True)
class Method:
    """A GRPO-family method for masked diffusion models.

    The sampler (LLaDA semi-AR), the likelihood (one-step token log-probabilities of a view) and the loop are shared;
    a method chooses the rest by registry key. Shared knobs (epsilon, beta, learning rate, advantage scaling) come from
    ``grpo:`` so that methods are compared on equal terms; its ``Params`` changes the defaults its paper chooses and
    fixes (a ``Literal`` of one value) what its definition requires.

    Attributes:
        name: the name a ``methods:`` section gives as its ``method`` (its section name by default).
        params: its section's model, a subclass of ``ddmrl.config.GRPOConfig`` decorated with
            ``ddmrl.config.section``; its ``remasking`` default is the method's view sampler (``ddmrl.masking.VIEWS``).
        display: its row label in the tables.
        weighting: key in ``ddmrl.objectives.WEIGHTINGS``: per-(view, token) loss weights.
        paper: citation for the docs and tables.
        objective: key in ``ddmrl.objectives.OBJECTIVES``: the loss of one optimiser step.
        step_advantage: key in ``ddmrl.objectives.STEP_ADVANTAGES``: per-step advantages from the task
            reward of each step's prediction (MDPO), or "" (one advantage per rollout).
        view_advantage: key in ``ddmrl.objectives.VIEW_ADVANTAGES``: per-view advantages from the
            rollout batch's rewards and structure (d-TreeRPO's per-edge advantages of a tree), or "" (none).
        augmenter: key in ``ddmrl.augmenters.AUGMENTERS``: edits the scored groups before the advantages (IGPO's
            inpainting of all-wrong groups), or "" (none).
        switches: the keys of its ``Params`` that reproduce its release's quirks (e.g. ``loss_after_eos``, a mixin
            of ``ddmrl.methods.mixins``), for the docs; a method's section refuses keys its ``Params`` lacks.
    """

    name: str
    params: type
    display: str
    weighting: str
    paper: str
    objective: str = "token_clip"
    step_advantage: str = ""
    view_advantage: str = ""
    augmenter: str = ""
    switches: tuple[str, ...] = ()

    @property
    def remasking(self) -> str:
        """The view sampler its sections use unless they set ``remasking``."""
        return self.params.__pydantic_fields__["remasking"].default

    # ---------------------------------------------------------------- hooks into the loop (ddmrl.training.grpo)
    # A method that needs more than its components overrides these in a subclass (MaskGRPO's released-code mode,
    # MDPO's tempered confidence); ``cfg`` is the run's resolved section.

    def rollout_options(self, cfg: Any) -> dict[str, Any]:
        """Keyword arguments the method adds to the rollout sampler (``ddmrl.rollout.rollout``); default none."""
        return {}

    def advantage_eps(self, cfg: Any) -> float:
        """The epsilon added to the group reward's std in the advantages (TRL's)."""
        return ADVANTAGE_EPS

    def legacy_views(self, cfg: Any) -> bool:
        """Whether the views reproduce a released code's own draws (``ddmrl.masking.build_views``' ``legacy``)."""
        return False

    def broadcast_weighting(self, cfg: Any) -> bool:
        """Whether a view's token weights are the stack of every view's mask broadcast onto it (MaskGRPO's released
        loss mask); default no."""
        return False

    def view_index(self, cfg: Any, micro_step: int, num_views: int) -> tuple[int, ...] | None:
        """The views of micro-step ``micro_step`` when the method indexes them its own way; None: the schedule's."""
        return None

    def separable_views(self, cfg: Any) -> bool:
        """Whether the objective is a mean of one term per view of a step, so that the update takes each view's
        gradient on its own and frees its graph before the next (BGPO's constant memory in the views); default no:
        the step's views go through one backward pass."""
        return False

    def value_model(self, cfg: Any, policy: Any) -> Any:
        """A learned baseline built from a copy of ``policy`` (TraceRL's value model,
        ``ddmrl.objectives.value.ValueModel``): per-token advantages from its values replace the group's, and it
        trains beside the policy (``value_*`` keys of ``cfg``); default None (group advantages)."""
        return None

    def fixed(self) -> dict[str, Any]:
        """What its definition fixes: each field of ``params`` typed as a ``Literal`` of one value (SPG's beta 0)."""
        out = {}
        for name, info in self.params.__pydantic_fields__.items():
            values = get_args(info.annotation) if get_origin(info.annotation) is Literal else ()
            if name != "method" and len(values) == 1:
                out[name] = values[0]
        return out
