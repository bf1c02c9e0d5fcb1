"""Dream's sampler (Ye et al. 2025; Dream-org's ``generation_utils.py``, ``diffusion_generate`` and ``_sample``).

The completion starts fully masked. ``steps`` forward passes run over the whole sequence, each on Dream's shifted
logits (position i read from the logits at i - 1: the model is ``ddmrl.models.dream.Aligned``, as ddmrl loads
Dream), at the times
``t_i = linspace(1, eps, steps + 1)``. What a step commits depends on ``alg``:

* ``origin``: each masked position is revealed with probability ``1 - t_{i+1} / t_i`` (every remaining one at the
  last step), by one uniform draw per masked position; the revealed ones take a token sampled from the
  proposal distribution;
* ``maskgit_plus``, ``topk_margin``, ``entropy``: a token is proposed at every masked position and the ``k`` with
  the highest confidence are committed, ``k = int(m * (1 - t_{i+1} / t_i))`` (every remaining one at the last step)
  where ``m`` is the batch's mean count of masked positions; the confidence is the proposal's probability
  (maskgit_plus), the top-1 minus top-2 probability (topk_margin) or the negative entropy (entropy). With
  ``alg_temp > 0`` the ``k`` positions are drawn without replacement from ``softmax(confidence / alg_temp)``
  instead of taken as the top ``k``.

The proposal distribution is ``softmax(logits / temperature)`` restricted by ``top_p`` (nucleus, the first token
above the threshold kept) and ``top_k``, both also applied at ``temperature = 0``, where the proposal is its argmax
(and the confidences are computed on the restricted, untempered distribution), as in Dream's ``sample_tokens``.

Equal to Dream's ``diffusion_generate`` token for token on the real ``DreamModel`` (tests/unit/samplers/
test_dream_sampler.py): for the same seed, ``generator`` gives the draws Dream takes from the global generator
(one ``rand`` per masked position for ``origin``, a ``multinomial`` per sampled proposal and per ``alg_temp`` draw,
in Dream's order), on a CPU generator. Deviations, all outside what Dream's own code can run:

* left padding: ``attention_mask`` [N, P] (0 at pads; by default :class:`~ddmrl.models.dream.Aligned` finds the
  leading pads itself) gives Dream's positions and attention (``ddmrl.models.dream.padding_inputs``); the dLLM-RL
  copy of Dream's code cannot take its own sampler's padding mask (it passes the position ids as ``is_causal`` and
  adds the boolean mask to the scores), so the padded case is checked against Dream's loop driven with the intended
  forward, and against each row sampled alone;
* a proposal distribution that ``torch.distributions.Categorical`` refuses (NaN or infinite probabilities) falls
  back to the argmax, as Dream's ``except`` does, for the rows concerned only (Dream: the whole step's proposals).

``reveal_step`` is the step whose pass revealed each completion token (-1 if none did: Dream may sample the mask
token itself, which then stays masked, as in its code); ``nfe = steps``. No KV cache: every step is a full pass.
"""

from __future__ import annotations

from typing import Literal, get_args

import torch
import torch.nn.functional as F
from pydantic import Field

from ddmrl.config._base import Float, Int, Section, section
from ddmrl.samplers.llada import SampleOutput, init_canvas

Alg = Literal["origin", "maskgit_plus", "topk_margin", "entropy"]
ALGS: tuple[str, ...] = get_args(Alg)

__all__ = ["ALGS", "Params", "generate", "propose"]


@section
class Params(Section):
    """Dream's own keys (``sampler.options.dream``, used with ``sampler.name: dream``), named and defaulted as
    Dream-v0's ``generation_config.json``; ``steps`` and ``temperature`` are the sampler's shared keys."""

    alg: Alg = Field("origin", description="Remasking rule: origin, maskgit_plus, topk_margin or entropy.")
    top_p: Float | None = Field(None, gt=0, le=1, description="Nucleus of the proposal distribution (null: off).")
    top_k: Int | None = Field(None, ge=1, description="Top-k of the proposal distribution (null: off).")
    alg_temp: Float | None = Field(
        None, ge=0, description="Draw the committed positions from softmax(confidence / alg_temp) (null or 0: top k)."
    )
    eps: Float = Field(1e-3, gt=0, lt=1, description="The last time of the schedule linspace(1, eps, steps + 1).")


def _nucleus(logits: torch.Tensor, top_p: float) -> torch.Tensor:
    """``logits`` [T, V] with the tokens outside the top-``top_p`` nucleus set to the dtype's minimum (the most
    likely token always kept, and the first one that crosses the threshold)."""
    ordered, order = torch.sort(logits, descending=True)
    beyond = torch.cumsum(torch.softmax(ordered, -1), -1) > top_p  # [T, V] in sorted order
    drop = torch.zeros_like(beyond)
    drop[..., 1:] = beyond[..., :-1]  # shifted right: the token crossing the threshold stays
    remove = torch.zeros_like(logits, dtype=torch.bool).scatter_(-1, order, drop)
    return logits.masked_fill(remove, torch.finfo(logits.dtype).min)


def _top_k(logits: torch.Tensor, top_k: int) -> torch.Tensor:
    kth = torch.topk(logits, min(top_k, logits.shape[-1]))[0][..., -1:]
    return logits.masked_fill(logits < kth, torch.finfo(logits.dtype).min)


def propose(
    logits: torch.Tensor,
    temperature: float = 0.0,
    top_p: float | None = None,
    top_k: int | None = None,
    confidence: str = "probability",
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(confidence [T], token [T])`` for ``logits`` [T, V] at masked positions, as Dream's ``sample_tokens``.

    The distribution is ``softmax(logits / temperature)`` (untempered at 0), cut by ``top_p`` and ``top_k``; the
    token is sampled from it (one ``multinomial`` draw per row from ``generator``) at ``temperature > 0``, else its
    argmax. ``confidence``: ``probability`` (of the token), ``margin`` (top-1 minus top-2 probability) or
    ``neg_entropy`` (sum p log(p + 1e-10)).
    """
    if temperature > 0:
        logits = logits / temperature
    if top_p is not None and top_p < 1:
        logits = _nucleus(logits, top_p)
    if top_k is not None:
        logits = _top_k(logits, top_k)
    probs = torch.softmax(logits, -1)  # [T, V]
    best, token = probs.max(-1)
    if temperature > 0 and probs.shape[0] > 0:
        normed = probs / probs.sum(-1, keepdim=True)  # what torch.distributions.Categorical samples from
        ok = torch.isfinite(normed).all(-1) & (normed >= 0).all(-1)
        if bool(ok.all()):
            token = _multinomial(normed, 1, True, generator).squeeze(-1)
        elif bool(ok.any()):
            token = token.clone()
            token[ok] = _multinomial(normed[ok], 1, True, generator).squeeze(-1)
        best = probs.gather(-1, token[:, None]).squeeze(-1)
    if confidence == "margin":
        top2 = torch.sort(probs, -1, descending=True)[0][:, :2]
        return top2[:, 0] - top2[:, 1], token
    if confidence == "neg_entropy":
        return (probs * torch.log(probs + 1e-10)).sum(-1), token
    return best, token


_CONFIDENCE = {"maskgit_plus": "probability", "topk_margin": "margin", "entropy": "neg_entropy"}


def generate(
    model,
    prompt_ids: torch.Tensor,
    completion_length: int,
    *,
    mask_id: int,
    steps: int,
    alg: str = "origin",
    temperature: float = 0.0,
    top_p: float | None = None,
    top_k: int | None = None,
    alg_temp: float | None = None,
    eps: float = 1e-3,
    attention_mask: torch.Tensor | None = None,
    generator: torch.Generator | None = None,
) -> SampleOutput:
    """Sample completions of ``completion_length`` tokens for ``prompt_ids`` [N, P] with Dream's sampler (see the
    module docstring); ``model`` is a ``DreamModel`` seen through :class:`ddmrl.models.dream.Aligned` (logits at i
    predicting the token at i). ``attention_mask`` [N, P]: 0 at left pads (None: the model finds them). Dream's
    ``generation_config`` keys keep their names: ``steps``, ``alg``, ``temperature``, ``top_p``, ``top_k``,
    ``alg_temp``, ``eps``."""
    if alg not in ALGS:
        raise ValueError(f"sampler.options.alg = {alg!r}: Dream's remasking rules are {', '.join(ALGS)}")
    if steps < 1:
        raise ValueError(f"sampler.steps = {steps}: at least one step")
    x, reveal = init_canvas(prompt_ids, completion_length, mask_id)  # [N, P + L], [N, L]
    prompt_len = prompt_ids.shape[1]
    forward = {}
    if attention_mask is not None:
        forward["attention_mask"] = F.pad(attention_mask, (0, completion_length), value=1)  # [N, P + L]
    times = torch.linspace(1, eps, steps + 1, device=x.device)
    rows = torch.arange(x.shape[0], device=x.device)[:, None]
    for i in range(steps):
        masked = x == mask_id  # [N, P + L]
        logits = model(x, **forward).logits  # [N, P + L, V], position i predicting token i
        at_masks = logits[masked]  # [M, V] in row-major order, as Dream indexes them
        t, s = times[i], times[i + 1]
        last = i == steps - 1
        if alg == "origin":
            p_reveal = 1 if last else 1 - s / t
            proposal = torch.full_like(x[masked], mask_id)  # [M]
            reveal_now = _rand(proposal.shape, x.device, generator) < p_reveal  # [M]
            if bool(reveal_now.any()):
                _, proposal[reveal_now] = propose(at_masks[reveal_now], temperature, top_p, top_k, generator=generator)
            x[masked] = proposal
        else:
            score, proposal = propose(at_masks, temperature, top_p, top_k, _CONFIDENCE[alg], generator)
            mean_masked = masked.sum() / masked.shape[0]  # float, as Dream's count
            k = int(mean_masked) if last else int(mean_masked * (1 - s / t))
            if k > 0:
                full_score = torch.full_like(x, -torch.inf, dtype=logits.dtype)
                full_score[masked] = score
                if alg_temp is None or alg_temp == 0:
                    chosen = torch.topk(full_score, k).indices  # [N, k]
                else:
                    weights = torch.softmax(full_score / alg_temp, -1)
                    chosen = _multinomial(weights, k, False, generator)
                proposed = torch.full_like(x, mask_id)
                proposed[masked] = proposal
                x[rows, chosen] = proposed[rows, chosen]
        newly = masked[:, prompt_len:] & (x[:, prompt_len:] != mask_id)  # [N, L]
        reveal[newly] = i
    return SampleOutput(x[:, prompt_len:], reveal, steps)


def _rand(shape, device: torch.device, generator: torch.Generator | None) -> torch.Tensor:
    """U[0, 1) float32 (Dream's ``torch.rand``) from ``generator`` on its own device, moved to ``device``."""
    where = generator.device if generator is not None else device
    return torch.rand(shape, device=where, generator=generator).to(device)


def _multinomial(probs: torch.Tensor, n: int, replacement: bool, generator: torch.Generator | None) -> torch.Tensor:
    """``torch.multinomial`` drawn from ``generator`` on its own device, the indices moved back to ``probs``'."""
    if generator is None or generator.device == probs.device:
        return torch.multinomial(probs, n, replacement, generator=generator)
    return torch.multinomial(probs.to(generator.device), n, replacement, generator=generator).to(probs.device)
