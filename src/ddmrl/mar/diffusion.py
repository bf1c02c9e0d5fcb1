"""The per-token Gaussian diffusion of MAR's diffusion head: schedule, training target, and the stochastic sampling
step with its exact transition log-probability.

As MAR (Li et al. 2024, section 3; its ``DiffLoss`` builds on improved DDPM's ``GaussianDiffusion``): a cosine noise
schedule of ``T`` training steps (Nichol & Dhariwal 2021, Eq. 17, betas clipped at 0.999), the head predicts the
noise eps of x_t = sqrt(abar_t) x_0 + sqrt(1 - abar_t) eps (Ho et al. 2020, Eq. 14), and sampling runs on ``K``
evenly respaced steps (improved DDPM's ``space_timesteps`` with one section: betas recomputed from abar at the kept
steps). One sampling step is DDPM's ancestral step (Ho et al. 2020, Algorithm 2):

    x_{k-1} = mu_theta(x_k, k, z) + tau * sigma_k * noise,   noise ~ N(0, I)

with mu_theta the posterior mean q(x_{k-1} | x_k, x_0) at x_0 predicted from eps (Ho et al. 2020, Eqs. 7, 15),
tau MAR's sampling temperature and sigma_k^2 one of DDPM's two fixed variances (Ho et al. 2020, section 3.2):
``large``, beta_k (the default), or ``small``, the posterior variance beta~_k. MAR learns a variance between the two
(improved DDPM's ``learn_sigma``); ddmrl fixes it. So a step is a Gaussian transition whose log-probability is exact
(:func:`gaussian_log_prob`), the quantity Flow-GRPO/DDPO-style RL puts in its ratios. The last step (k = 0)
outputs the mean, deterministically, and has no density: a trajectory has K - 1 stochastic steps.

Why ``large`` by default: with 10 of 1000 cosine steps, sigma at the last stochastic step (k = 1) is 0.0064 with
beta~ against 0.19 with beta, and a transition's score grad_mu log p = noise / sigma scales as 1 / sigma, so with
beta~ one step's log-probabilities dominate every ratio and gradient (measured on a tiny model: a KL of 650 per
transition after one plain GRPO step with beta~).

Index convention: schedule index k = 0..K-1 (k = 0 nearest to the data); a trajectory is stored as states
``traj[K] = x_K`` (the initial noise) down to ``traj[0] = x_0`` (the sample), step k going from ``traj[k + 1]`` to
``traj[k]``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch


def cosine_alphas_cumprod(num_steps: int, s: float = 0.008, max_beta: float = 0.999) -> torch.Tensor:
    """[T] abar_t of the cosine schedule (Nichol & Dhariwal 2021, Eq. 17), built from clipped betas as improved
    DDPM's ``betas_for_alpha_bar`` does (float64)."""

    def f(t: float) -> float:
        return math.cos((t + s) / (1 + s) * math.pi / 2) ** 2

    betas = torch.tensor(
        [min(1 - f((i + 1) / num_steps) / f(i / num_steps), max_beta) for i in range(num_steps)], dtype=torch.float64
    )
    return torch.cumprod(1 - betas, 0)


@dataclass(frozen=True)
class Schedule:
    """One diffusion schedule (the training one, or the respaced sampling one): per index k, the model timestep
    (index into the training schedule, what the head's time embedding sees) and the coefficients of q."""

    timesteps: torch.Tensor  # [K] long
    alphas_cumprod: torch.Tensor  # [K] abar_k
    alphas_cumprod_prev: torch.Tensor  # [K] abar_{k-1} (1 at k = 0)
    posterior_variance: torch.Tensor  # [K] beta~_k (0 at k = 0)
    posterior_mean_coef1: torch.Tensor  # [K] coefficient of x_0 in the posterior mean
    posterior_mean_coef2: torch.Tensor  # [K] coefficient of x_k
    step_variance: torch.Tensor  # [K] sigma_k^2 of the sampling step (0 at k = 0: the mean)

    @classmethod
    def from_alphas_cumprod(
        cls, alphas_cumprod: torch.Tensor, timesteps: torch.Tensor, variance: str = "large"
    ) -> Schedule:
        abar = alphas_cumprod.double()
        prev = torch.cat([abar.new_ones(1), abar[:-1]])
        betas = 1 - abar / prev
        alphas = 1 - betas
        posterior_variance = betas * (1 - prev) / (1 - abar)
        if variance not in ("large", "small"):
            raise ValueError(f"variance must be large or small, got {variance!r}")
        step = (betas if variance == "large" else posterior_variance).clone()
        step[0] = 0.0
        f64 = {
            "alphas_cumprod": abar,
            "alphas_cumprod_prev": prev,
            "posterior_variance": posterior_variance,
            "posterior_mean_coef1": betas * prev.sqrt() / (1 - abar),
            "posterior_mean_coef2": (1 - prev) * alphas.sqrt() / (1 - abar),
            "step_variance": step,
        }
        return cls(timesteps=timesteps.long(), **{k: v.float() for k, v in f64.items()})

    def __len__(self) -> int:
        return len(self.timesteps)


def training_schedule(num_steps: int) -> Schedule:
    """The ``T``-step schedule the head is trained on."""
    return Schedule.from_alphas_cumprod(cosine_alphas_cumprod(num_steps), torch.arange(num_steps))


def sampling_schedule(num_steps: int, sampling_steps: int, variance: str = "large") -> Schedule:
    """``K`` of the ``T`` training steps, evenly spaced with both ends kept (improved DDPM's ``space_timesteps(T,
    [K])``), betas recomputed from abar at the kept steps; ``K = T`` is the training schedule. ``variance``: the
    sampling steps' sigma_k^2, ``large`` (beta_k) or ``small`` (beta~_k)."""
    if not 2 <= sampling_steps <= num_steps:
        raise ValueError(f"sampling_steps must be in [2, {num_steps}], got {sampling_steps}")
    stride = (num_steps - 1) / (sampling_steps - 1)
    kept = torch.tensor(sorted({round(i * stride) for i in range(sampling_steps)}))
    return Schedule.from_alphas_cumprod(cosine_alphas_cumprod(num_steps)[kept], kept, variance)


def q_sample(schedule: Schedule, x0: torch.Tensor, k: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
    """x_k = sqrt(abar_k) x_0 + sqrt(1 - abar_k) noise; x0, noise [N, C], k [N] schedule indices."""
    abar = schedule.alphas_cumprod.to(x0.device)[k][:, None]  # [N, 1]
    return abar.sqrt() * x0 + (1 - abar).sqrt() * noise


def posterior_mean(schedule: Schedule, x_k: torch.Tensor, k: torch.Tensor, eps: torch.Tensor) -> torch.Tensor:
    """mu_theta(x_k, k): the mean of q(x_{k-1} | x_k, x_0) at x_0 = (x_k - sqrt(1 - abar_k) eps) / sqrt(abar_k)
    clipped to [-1, 1] (Ho et al. 2020, Eqs. 7 and 15; improved DDPM's ``clip_denoised``, as for pixels: the
    canvas's vectors lie in [-1, 1]). MAR's latents are unbounded and its sampler does not clip; here, unclipped, the
    noisiest of 10 respaced cosine steps (abar = 2.4e-9) would move the mean by 3.5e3 times any change of eps, and
    one RL step made that transition's KL to the reference reach hundreds (measured). x_k, eps [N, C]; k [N]."""
    abar = schedule.alphas_cumprod.to(x_k.device)[k][:, None]  # [N, 1]
    x0 = ((x_k - (1 - abar).sqrt() * eps) / abar.sqrt()).clamp(-1, 1)
    c1 = schedule.posterior_mean_coef1.to(x_k.device)[k][:, None]
    c2 = schedule.posterior_mean_coef2.to(x_k.device)[k][:, None]
    return c1 * x0 + c2 * x_k


def step_std(schedule: Schedule, k: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """[N] tau * sigma_k, the standard deviation of step k's noise (0 at k = 0)."""
    return temperature * schedule.step_variance.to(k.device)[k].sqrt()


def gaussian_log_prob(x: torch.Tensor, mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
    """log N(x; mean, std^2 I) of each row: x, mean [..., C]; std [...] (> 0) -> [...].

    sum_c [ -(x_c - mean_c)^2 / (2 std^2) - log std - log(2 pi) / 2 ]."""
    var = std.square()[..., None]
    return (-(x - mean).square() / (2 * var) - std.log()[..., None] - 0.5 * math.log(2 * math.pi)).sum(-1)


def gaussian_kl(mean: torch.Tensor, ref_mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
    """KL(N(mean, std^2 I) || N(ref_mean, std^2 I)) = |mean - ref_mean|^2 / (2 std^2): the exact KL between two
    transitions of one step (same variance). mean, ref_mean [..., C]; std [...] -> [...]."""
    return (mean - ref_mean).square().sum(-1) / (2 * std.square())
