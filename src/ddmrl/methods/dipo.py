"""DiPO as one module: its ``methods:`` section's model (``Params``: the defaults it changes, what its definition
fixes, its checks) and its training components (``METHOD``), registered in ``ddmrl.methods.METHODS``.

DiPO (Discrete Diffusion Policy Optimization; Zhu et al. 2025, DiRL, arXiv 2512.22234, Sec. 3.2; OpenMOSS/DiRL,
the method DiRL-8B-Instruct was trained with from SDAR-8B-Chat) is GRPO at the level of the sampler's steps: a
rollout of a blockwise sampler is a trajectory tau_i of decoding steps, and the tokens o_k revealed at step t are
scored at the very state the sampler took that step from, tau_i(1:t-1) (its "unbiased logits"):

    J = 1 / (sum_i |tau_i|) sum_i sum_t sum_{o_k in tau_i(t)} C_eps(pi_theta(o_k | tau_i(1:t-1)) / pi_old(...), A_i)
        - beta KL[pi_theta || pi_ref]                                                                 (Eq. 7)

with C_eps the PPO clip, A_i the group-normalised advantage and the KL against a fixed reference. Views
(``ddmrl.masking.views.dipo_views``): round rho packs the rho-th step of every block into one view (exact states
under block attention, one forward pass per round instead of per step); objective ``ddmrl.objectives.dipo`` (Eq. 7,
and DAPO's dynamic sampling: groups without reward spread leave the batch). Release recipe (scripts/grpo.sh,
examples/example-grpo.sh): SDAR-8B-Chat, 128 prompts x 8 rollouts per step, blocks of 4 decoded with a confidence
threshold of 0.9 (4 denoising steps per block), temperature 1.0, top-k 50, 8192 tokens, lr 1e-6 (constant after 10
warm-up steps), KL 0, epsilon 0.2 (upper clip 0.28), one optimiser step per rollout batch (num_iterations 1),
binary accuracy reward, population-std z-scored advantages. Its deviations from the release and their switches:
docs/reproduction.md.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from ddmrl.config._base import Bool, Float, Str, section
from ddmrl.config.grpo import GRPOConfig
from ddmrl.methods.base import Method


@section
class Params(GRPOConfig):
    """DiPO (Zhu et al. 2025, DiRL, arXiv 2512.22234): step-level GRPO on the sampler's own blockwise trajectory,
    the tokens of each step scored at that step's state (packed one round per view), summed per step and averaged
    over the sampler steps (Eq. 7); rows of groups without reward spread leave the batch (DAPO's dynamic sampling,
    without its resampling). Release: KL 0, epsilon 0.2 with upper clip 0.28 (epsilon_high), population-std
    advantages (scale_rewards population), threshold decoding 0.9 in blocks of 4. ``dipo_release_loss``: the
    release's per-(rollout, round) token means instead of Eq. 7. ``loss_type`` does not apply (the aggregation is
    Eq. 7's or the release's)."""

    method: Str = "dipo"
    remasking: Literal["dipo"] = "dipo"
    beta: Float = Field(0.0, ge=0, description="KL coefficient (k3) against kl_target; DiPO's release: 0.")
    dipo_release_loss: Bool = Field(
        False,
        description="DiPO: the released code's normalisation, each (rollout, round) view's token mean averaged over "
        "block_length rounds and the rollouts, instead of the paper's Eq. 7 (a sum per sampler step, averaged over "
        "the batch's steps).",
    )


# packed round views, masked_mean targets; Eq. 7: sum over each step's tokens / number of steps, A = 0 rows dropped
METHOD = Method(
    name="dipo",
    params=Params,
    display="DiPO",
    weighting="masked_mean",
    objective="dipo",
    paper="Zhu et al. 2025, DiRL: An Efficient Post-Training Framework for Diffusion Language Models (DiPO; "
    "arXiv 2512.22234)",
)
