"""MaskGIT's confidence sampler (Chang et al. 2022) as MMaDA's ``t2i_generate`` runs it (Gen-Verse/MMaDA
``models/modeling_mmada.py``).

The completion starts fully masked; the prompt is never changed. Each of the ``steps`` steps runs one bidirectional
forward pass (two with classifier-free guidance), draws a token at **every** still-masked position from
softmax(logits / temperature) over the allowed tokens, and scores it by its confidence, the untempered probability of
the drawn token. With ratio r = (s + 1) / T, the floor(L * mask_schedule(r)) positions with the lowest *noisy*
confidence log(conf) + tau_s * Gumbel stay masked (at least 1 and at most #masked - 1 before the last step; 0 at the
last step, which reveals everything); the rest are revealed with their drawn token and never re-masked.

The Gumbel noise is annealed as in MaskGIT: tau_s = noise_temperature * (1 - r). MMaDA multiplies its noise scale in
place every step (tau <- tau * (1 - r)), so its schedule compounds to noise_temperature * prod_k (1 - r_k);
``legacy_compound_noise=True`` reproduces that. See :func:`noise_scales`.

Classifier-free guidance uses the Muse convention of MMaDA, g = (1 + w) c - w u, where the unconditional branch has
every prompt position replaced by the mask token (and the current completion canvas).

Deviations from MMaDA: the keep-masked count is 0 at the last step (MMaDA clamps it to 1 but then returns all drawn
ids anyway, so the tokens are the same); ties in the noisy confidence are broken by position (MMaDA's strict ``<``
against the cut-off could keep fewer masked); floor(L * m(r)) carries a 1e-9 guard so that an exact integer product
such as 20 * (1 - 9/10) is not floored to one less by rounding; softmax, confidences and noise are computed in float64.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch

from ddmrl.aux_policies.base import AuxTrace, stack_steps
from ddmrl.samplers.base import SampleOutput, combine_guidance, guided_logits, init_canvas, with_unconditional
from ddmrl.samplers.parallel import PARALLEL_RULES, parallel_commits

if TYPE_CHECKING:
    from ddmrl.aux_policies.schedule import SchedulePolicy
    from ddmrl.config.sampler import SamplerConfig

SCHEDULES = ("cosine", "linear")


def mask_schedule(schedule: str, r: float) -> float:
    """Masked fraction at ratio ``r`` in [0, 1]: ``cosine`` cos(pi r / 2) (exactly 0 at r = 1), ``linear`` 1 - r.

    >>> mask_schedule("linear", 0.25), mask_schedule("cosine", 1.0)
    (0.75, 0.0)
    """
    if schedule == "cosine":
        return 0.0 if r >= 1 else math.cos(math.pi / 2 * r)
    if schedule == "linear":
        return 1.0 - r
    raise ValueError(f"unknown schedule '{schedule}'; choose one of {SCHEDULES}")


def noise_scales(noise_temperature: float, steps: int, legacy_compound_noise: bool = False) -> list[float]:
    """Gumbel scale of the confidence noise at each step, r_s = (s + 1) / T.

    MaskGIT: tau_s = noise_temperature * (1 - r_s). ``legacy_compound_noise``: MMaDA's in-place update
    tau <- tau * (1 - r_s), i.e. tau_s = noise_temperature * prod_{k <= s} (1 - r_k).

    >>> noise_scales(1.0, 4)
    [0.75, 0.5, 0.25, 0.0]
    >>> noise_scales(1.0, 4, legacy_compound_noise=True)
    [0.75, 0.375, 0.09375, 0.0]
    """
    taus, tau = [], noise_temperature
    for s in range(steps):
        r = (s + 1) / steps
        tau = tau * (1 - r) if legacy_compound_noise else noise_temperature * (1 - r)
        taus.append(tau)
    return taus


def keep_masked(
    num_masked: torch.Tensor, length: int, step: int, steps: int, schedule: str, shift: torch.Tensor | None = None
) -> torch.Tensor:
    """Positions to leave masked after ``step`` (0-based) of ``steps``, per row of ``num_masked`` [N] (the count
    masked before the step): 0 at the last step, otherwise floor(length * mask_schedule((step + 1) / steps)) clamped
    to [1, num_masked - 1] (MMaDA's ``max(1, min(#unknown - 1, mask_len))``). ``shift`` [N]: Co-GRPO's ratio action,
    the masked fraction moved to sigmoid(logit(m) + shift) (``ddmrl.aux_policies.schedule``).

    >>> keep_masked(torch.tensor([16, 2, 1]), 16, 0, 4, "cosine").tolist()
    [14, 1, 1]
    """
    if step == steps - 1:
        return torch.zeros_like(num_masked)
    fraction = mask_schedule(schedule, (step + 1) / steps)
    if shift is None:
        target = math.floor(length * fraction + 1e-9)
    else:
        from ddmrl.aux_policies.schedule import remasked_fraction

        target = (length * remasked_fraction(fraction, shift) + 1e-9).floor().long()
    return (num_masked - 1).clamp(max=target).clamp(min=1)


def allowed_vocab(allowed_tokens: torch.Tensor | None, vocab_size: int, mask_id: int, device) -> torch.Tensor:
    """Bool [V] of the tokens a sampler may propose: ``allowed_tokens`` (default: all) minus ``mask_id``."""
    if allowed_tokens is None:
        allowed = torch.ones(vocab_size, dtype=torch.bool, device=device)
    else:
        if allowed_tokens.dtype != torch.bool or allowed_tokens.shape != (vocab_size,):
            raise ValueError(f"allowed_tokens must be a bool tensor of shape [{vocab_size}] (the logits' vocabulary)")
        allowed = allowed_tokens.to(device).clone()
    allowed[mask_id] = False  # never propose the mask token itself
    if not bool(allowed.any()):
        raise ValueError("allowed_tokens leaves no token to propose besides the mask token")
    return allowed


def uniform(shape, device, generator: torch.Generator | None) -> torch.Tensor:
    """U[0, 1) in float64 on ``device``, drawn from ``generator`` (on its own device, then moved)."""
    where = generator.device if generator is not None else device
    return torch.rand(shape, dtype=torch.float64, device=where, generator=generator).to(device)


def gumbel(shape, device, generator: torch.Generator | None) -> torch.Tensor:
    """Standard Gumbel noise -log(-log U) in float64."""
    return -torch.log(-torch.log(uniform(shape, device, generator).clamp_min(1e-300)))


def sample_tokens(
    logits: torch.Tensor, temperature: float | torch.Tensor, generator: torch.Generator | None
) -> torch.Tensor:
    """Draw from softmax(logits / temperature) along the last axis by Gumbel-max in float64; 0 means argmax.
    ``temperature`` may be a tensor [N] (one per row of logits [N, ..., V]; all positive)."""
    if isinstance(temperature, torch.Tensor):
        temperature = temperature.double().view(-1, *([1] * (logits.dim() - 1)))
    elif temperature == 0:
        return logits.argmax(-1)
    return (logits.double() / temperature + gumbel(logits.shape, logits.device, generator)).argmax(-1)


def keywords(sampler: SamplerConfig, steps: int, completion_length: int) -> dict:
    """The keys of the shared ``sampler:`` section this sampler's ``generate`` takes (``ddmrl.rollout.sampler_kwargs``
    adds ``steps`` and ``temperature``)."""
    return {"cfg_scale": sampler.cfg_scale, "noise_temperature": sampler.noise_temperature,
            "parallel": sampler.parallel, "threshold": sampler.threshold, "factor": sampler.factor}  # fmt: skip


@torch.no_grad()
def generate(
    model,
    prompt_ids: torch.Tensor,
    completion_length: int,
    *,
    mask_id: int,
    steps: int,
    temperature: float = 1.0,
    noise_temperature: float = 1.0,
    cfg_scale: float = 0.0,
    schedule: str = "cosine",
    allowed_tokens: torch.Tensor | None = None,
    legacy_compound_noise: bool = False,
    parallel: str = "none",
    threshold: float = 0.9,
    factor: float = 1.0,
    generator: torch.Generator | None = None,
    aux_policy: SchedulePolicy | None = None,
) -> SampleOutput:
    """Sample completions of ``completion_length`` tokens for ``prompt_ids`` [N, P] with MaskGIT's schedule.

    ``allowed_tokens``: bool [V], the tokens that may be proposed (None: all but ``mask_id``; ``mask_id`` is never
    proposed). ``reveal_step[i, k]`` is the step at which completion position k was revealed; ``nfe`` counts forward
    passes (2 per step with CFG).

    ``parallel`` (threshold | factor; ``ddmrl.samplers.parallel``): a step also reveals the masked tokens the rule
    picks by their untempered confidence, on top of the schedule's; sampling stops once nothing is masked, which
    saves passes only when the rule reveals every remaining token (the schedule keeps one masked until the last
    step). With ``none`` (the default) the sampler is MaskGIT's, unchanged (bit for bit; tested).

    ``aux_policy``: Co-GRPO's schedule policy (``ddmrl.aux_policies.schedule.SchedulePolicy``) sets each step's masked
    fraction, temperature and guidance scale (the values above scaled by its action); the returned ``aux`` trace
    records its observations, actions and their log-probabilities. Without one (the default) nothing changes.
    """
    if steps < 1:
        raise ValueError("steps must be >= 1")
    if parallel not in PARALLEL_RULES:
        raise ValueError(f"unknown parallel rule {parallel!r}; choose one of {PARALLEL_RULES}")
    mask_schedule(schedule, 0.0)  # validate the name before any forward pass
    n, p = prompt_ids.shape
    length = completion_length
    x, reveal = init_canvas(prompt_ids, length, mask_id)
    taus = noise_scales(noise_temperature, steps, legacy_compound_noise)
    allowed, nfe = None, 0
    schedule_steps, previous_conf = [], torch.zeros(n, dtype=torch.float64, device=x.device)
    for s in range(steps):
        masked = x[:, p:] == mask_id
        if not bool(masked.any()):  # only with a parallel rule: the schedule keeps a mask until the last step
            break
        step_temperature, step_cfg, shift = temperature, cfg_scale, None
        if aux_policy is not None:
            obs = schedule_observation(s, steps, masked, previous_conf)  # [N, 4]
            action, logp = aux_policy.act(obs, generator)
            shift, temp_mult, cfg_mult = aux_policy.knobs(action)
            step_temperature = temperature * temp_mult.double() if "temperature" in aux_policy.actions else temperature
            step_cfg = cfg_scale * cfg_mult if "cfg" in aux_policy.actions else cfg_scale
            shift = shift if "ratio" in aux_policy.actions else None
            schedule_steps.append((obs, action, logp))
        # LLaDA's u + (w + 1)(c - u) in guided_logits is algebraically MMaDA's (1 + w) c - w u.
        if isinstance(step_cfg, torch.Tensor):  # a guidance scale per row
            guided = combine_guidance(model(with_unconditional(x, p, mask_id)).logits, step_cfg.view(-1, 1, 1))
            logits = guided[:, p:].double()
        else:
            logits = guided_logits(model, x, p, mask_id, step_cfg)[:, p:].double()  # [N, L, V]
        nfe += 2 if cfg_scale else 1
        if allowed is None:
            allowed = allowed_vocab(allowed_tokens, logits.shape[-1], mask_id, logits.device)
        logits = logits.masked_fill(~allowed, -torch.inf)
        proposal = sample_tokens(logits, step_temperature, generator)  # [N, L]
        log_conf = torch.log_softmax(logits, -1).gather(-1, proposal[..., None]).squeeze(-1)  # untempered
        drawn = torch.where(masked, proposal.to(x.dtype), x[:, p:])  # known positions keep their token
        clean = log_conf.exp().masked_fill(~masked, -torch.inf)  # [N, L] confidence, for a parallel rule
        if taus[s] > 0:
            log_conf = log_conf + taus[s] * gumbel(log_conf.shape, log_conf.device, generator)
        noisy = log_conf.masked_fill(~masked, torch.inf)  # revealed positions are never re-masked
        rank = noisy.argsort(dim=1, stable=True).argsort(dim=1)  # 0 = least confident
        remask = (rank < keep_masked(masked.sum(1), length, s, steps, schedule, shift)[:, None]) & masked
        remask &= ~parallel_commits(clean, parallel, threshold, factor)
        reveal[masked & ~remask] = s
        x[:, p:] = drawn.masked_fill(remask, mask_id)
        if aux_policy is not None:  # the mean confidence of the positions masked before the step
            previous_conf = clean.masked_fill(~masked, 0).sum(1) / masked.sum(1).clamp_min(1)
    if aux_policy is None:
        return SampleOutput(x[:, p:], reveal, nfe)
    obs, actions, logp = stack_steps(schedule_steps)
    active = torch.ones(logp.shape, dtype=torch.bool, device=logp.device)
    return SampleOutput(x[:, p:], reveal, nfe, aux=AuxTrace((obs,), actions, logp, active, torch.full((n,), nfe)))


def schedule_observation(step: int, steps: int, masked: torch.Tensor, previous_conf: torch.Tensor) -> torch.Tensor:
    """Co-GRPO's observation of a step [N, 4]: r = step / (steps - 1), the fraction of the completion still masked,
    the mean confidence of the positions that were masked at the previous step (0 at the first), and 1 if a later
    step follows (the masked fraction then matters) else 0."""
    n = masked.shape[0]
    r = step / (steps - 1) if steps > 1 else 0.0
    columns = [torch.full((n,), r), masked.float().mean(1).cpu(), previous_conf.float().cpu(),
               torch.full((n,), float(step < steps - 1))]  # fmt: skip
    return torch.stack(columns, 1).to(masked.device)
