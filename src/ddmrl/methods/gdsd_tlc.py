"""GDSD-TLC as one module (``Params``, ``METHOD``): GDSD (``ddmrl.methods.gdsd``) with the release's second trainer,
GaryBall/GDSD ``gdsd/trainers/gdsd_trainer_tlc.py`` (``rl_loss_type: gdsd_tlc``; every checkpoint the authors
released). It differs from GDSD in its denoising log-likelihood only: each token's log-prob weighted by 1 / t_v, its
view's masked ratio (``ddmrl.objectives.gdsd.tlc_weights``: a pair's value is the mean of two one-view ELBO
estimates), and its token logit centralisation, logits - mean(logits) with the mean detached before the
log-softmax: softmax is invariant to a shift and autograd treats the detached mean as a constant, so the log-probs
and their gradients are the uncentred ones (tested; only bfloat16 rounding differs), and ddmrl computes them as
they are.
"""

from __future__ import annotations

from ddmrl.config._base import Str, section
from ddmrl.methods.gdsd import GDSD
from ddmrl.methods.gdsd import Params as GDSDParams


@section
class Params(GDSDParams):
    """GDSD-TLC (Tang et al. 2026, arXiv 2605.29398; GaryBall/GDSD ``gdsd_trainer_tlc.py``): GDSD with each
    token's log-prob weighted by 1 / t of its view (the pair's mean of two one-view ELBO estimates) and the token
    logit centralisation (an identity of the log-probs). The release's Countdown and Sudoku recipes use its base
    settings (scripts/train_gdsd.yaml; GDSD's)."""

    method: Str = "gdsd_tlc"


# GDSD's views, loss and advantages; l = the pair's mean of two one-view ELBO estimates (weights 1 / (2 t))
METHOD = GDSD(
    name="gdsd_tlc",
    params=Params,
    display="GDSD-TLC",
    weighting="gdsd_tlc",
    objective="gdsd",
    paper="Tang et al. 2026, GDSD: Reinforcement Learning as Guided Denoiser Self-Distillation for Diffusion "
    "Language Models (arXiv 2605.29398), its token-logit-centralised variant",
    switches=("loss_after_eos",),
)
