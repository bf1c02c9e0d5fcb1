"""TraceRL with its diffusion value model as one module: its ``methods:`` section's model (``Params``) and its
training components (``METHOD``), registered in ``ddmrl.methods.METHODS``.

TraceRL (Wang et al. 2026, TraceRL / TraDo, ICLR 2026, arXiv 2509.06949, Sec. 3.2) trains, besides the policy, a
value model initialised from the policy (a zero-initialised linear value head in place of its output head) that
predicts a value per token from the state of the token's own trace step. The step-level returns and generalised
advantages it gives (``ddmrl.objectives.value.trace_gae``) replace the group's mean as the baseline: every token is
trained with its own advantage A_j (objective ``value_clip``), and the value model regresses onto the returns with
PPO's clipped loss, its own optimiser and learning rate, one step per policy step on the same views. It is saved
beside the policy (``<model>/value_model/``) and in the run's checkpoints (resume). Release (dLLM-RL
``configs/rl_trado_with_value.yaml``, ``train/train_trado_value.py``; SDAR/TraDo only there, dLLM-RL#28): gamma =
lambda = 1, value clip 0.2 (its ``training.eps``), value lr 5e-6 against the policy's 1e-6, the value model trained
first on each rollout batch, the group z-scored reward as the reward. Its deviations: docs/reproduction.md.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from ddmrl.config._base import Float, Str, section
from ddmrl.config.names import ViewSampler
from ddmrl.methods.base import Method
from ddmrl.methods.mixins import TraceSteps


@section
class Params(TraceSteps):
    """TraceRL with its value model (Wang et al. 2026, arXiv 2509.06949, Sec. 3.2): TraceRL's views, KL against the
    old policy and per-row means, each token's advantage the step-level GAE of a value model initialised from the
    policy (zero value head), trained by the clipped value loss with its own learning rate (dLLM-RL's
    train_trado_value.py)."""

    method: Str = "tracerl_value"
    remasking: ViewSampler = "tracerl"
    loss_type: Literal["token_mean", "seq_mean"] = "seq_mean"
    kl_target: Literal["ref", "old"] = "old"
    value_learning_rate: Float = Field(
        5e-6, gt=0, description="tracerl_value: AdamW learning rate of the value model (release: 5e-6, policy 1e-6)."
    )
    value_clip: Float = Field(
        0.2, gt=0, description="tracerl_value: V_old +- value_clip bounds the clipped value term (release: 0.2)."
    )
    value_gamma: Float = Field(1.0, ge=0, le=1, description="tracerl_value: discount over trace steps (release: 1).")
    value_lambda: Float = Field(
        1.0, ge=0, le=1, description="tracerl_value: GAE lambda (release: 1; the paper finds 0 alike)."
    )
    value_loss_norm: Literal["targets", "length"] = Field(
        "targets",
        description="tracerl_value: the value loss's mean over each row's step tokens (the paper), or length: the "
        "release's sum over them divided by the completion length.",
    )


class ValueMethod(Method):
    """A method whose baseline is a learned value model (the loop's ``value_model`` hook)."""

    def value_model(self, cfg: Any, policy: Any) -> Any:
        from ddmrl.objectives.value import ValueModel  # torch: only where a run trains one

        return ValueModel(policy)


# TraceRL's views and per-row means, per-token GAE advantages of the value model (objective value_clip)
METHOD = ValueMethod(
    name="tracerl_value",
    params=Params,
    display="TraceRL (value model)",
    weighting="masked_mean",
    objective="value_clip",
    paper="Wang et al. 2026, TraceRL / TraDo (ICLR 2026, arXiv 2509.06949), its diffusion value model",
)
