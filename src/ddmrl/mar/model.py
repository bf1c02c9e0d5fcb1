"""TinyMAR: a masked autoregressive text-to-image model with continuous tokens and a per-token MLP diffusion head.

MAR (Li et al. 2024, "Autoregressive Image Generation without Vector Quantization"): a bidirectional transformer sees
the known tokens of an image (and the prompt) and proposes a condition z_i for every unknown token i; a small MLP,
the *diffusion head*, models p(x_i | z_i) by denoising (the diffusion loss, its Eq. 2, trains both through z). Here:

* tokens are geneval-mini's cells as continuous 3-vectors (``ddmrl.mar.encoding``), ``height * width`` of them;
* the transformer is one bidirectional encoder over [prompt words | image tokens], unknown tokens replaced by a
  learned mask embedding, known ones by a linear projection of their vector (ddmrl's reading at this size: MAR's
  MAE-style encoder-decoder, which drops the unknown tokens from the encoder, and its class token become one encoder
  and prompt tokens); positions are MAR's learned ones (``position_embedding="learned"``) or rotary
  (``"rope"``, RoFormer; LLaDA's and MMaDA's choice, and what geneval-mini's masked-diffusion base model uses), over
  the prompt's padded length then the image tokens in raster order;
* the head is MAR's ``SimpleMLPAdaLN``: residual MLP blocks whose LayerNorm is modulated (adaLN) by the sum of the
  time and condition embeddings, zero-initialised modulations and output; it predicts eps only (a fixed posterior
  variance, where MAR also learns it).

It is a transformers ``PreTrainedModel`` (``save_pretrained`` / ``from_pretrained``, safetensors). The prompt is
tokenised by words: the config holds the vocabulary (geneval-mini's prompt words).
"""

from __future__ import annotations

import math
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from transformers import PretrainedConfig, PreTrainedModel

from ddmrl.io import DataError, atomic_path, read_json
from ddmrl.mar.encoding import TOKEN_DIM
from ddmrl.models.tiny import rotary_angles, rotate


class TinyMARConfig(PretrainedConfig):
    model_type = "tiny_mar"

    def __init__(
        self,
        words: list[str] | None = None,
        prompt_length: int = 20,
        num_tokens: int = 64,
        token_dim: int = TOKEN_DIM,
        hidden_size: int = 128,
        num_layers: int = 4,
        num_heads: int = 4,
        intermediate_size: int = 512,
        head_width: int = 128,
        head_depth: int = 3,
        diffusion_steps: int = 1000,
        position_embedding: str = "learned",
        rope_theta: float = 10_000.0,
        **kwargs,
    ) -> None:
        if position_embedding not in ("learned", "rope"):
            raise ValueError(f"position_embedding = {position_embedding!r}: choose learned or rope")
        self.words = list(words or [])
        self.prompt_length = prompt_length
        self.num_tokens = num_tokens
        self.token_dim = token_dim
        self.hidden_size = hidden_size
        self.num_layers = num_layers
        self.num_heads = num_heads
        self.intermediate_size = intermediate_size
        self.head_width = head_width
        self.head_depth = head_depth
        self.diffusion_steps = diffusion_steps
        self.position_embedding = position_embedding
        self.rope_theta = rope_theta
        super().__init__(**kwargs)


def timestep_embedding(t: torch.Tensor, dim: int, max_period: float = 10000.0) -> torch.Tensor:
    """[N] timesteps -> [N, dim] sinusoidal embeddings (cos half, then sin half), as MAR's ``TimestepEmbedder``."""
    half = dim // 2
    freqs = torch.exp(-math.log(max_period) * torch.arange(half, dtype=torch.float32, device=t.device) / half)
    args = t.float()[:, None] * freqs[None]
    return torch.cat([torch.cos(args), torch.sin(args)], dim=-1)


class AdaLNBlock(nn.Module):
    """x + gate * MLP(LN(x) * (1 + scale) + shift), (shift, scale, gate) from the conditioning y (MAR's ResBlock)."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(width, eps=1e-6)
        self.mlp = nn.Sequential(nn.Linear(width, width), nn.SiLU(), nn.Linear(width, width))
        self.modulation = nn.Sequential(nn.SiLU(), nn.Linear(width, 3 * width))

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        shift, scale, gate = self.modulation(y).chunk(3, dim=-1)
        return x + gate * self.mlp(self.norm(x) * (1 + scale) + shift)


class DiffusionHead(nn.Module):
    """eps_theta(x_t, t, z): MAR's ``SimpleMLPAdaLN`` for one token at a time. x [N, C], t [N] (training-schedule
    timesteps), z [N, D] -> [N, C]."""

    def __init__(self, token_dim: int, cond_dim: int, width: int, depth: int) -> None:
        super().__init__()
        self.width = width
        self.time_mlp = nn.Sequential(nn.Linear(width, width), nn.SiLU(), nn.Linear(width, width))
        self.cond = nn.Linear(cond_dim, width)
        self.inp = nn.Linear(token_dim, width)
        self.blocks = nn.ModuleList(AdaLNBlock(width) for _ in range(depth))
        self.final_norm = nn.LayerNorm(width, elementwise_affine=False, eps=1e-6)
        self.final_modulation = nn.Sequential(nn.SiLU(), nn.Linear(width, 2 * width))
        self.out = nn.Linear(width, token_dim)

    def reset_parameters(self) -> None:
        """MAR's initialisation: xavier-uniform linears, N(0, 0.02) time MLP, zero adaLN modulations and output."""
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.xavier_uniform_(m.weight)
                nn.init.zeros_(m.bias)
        for layer in (self.time_mlp[0], self.time_mlp[2]):
            nn.init.normal_(layer.weight, std=0.02)
        for linear in [b.modulation[-1] for b in self.blocks] + [self.final_modulation[-1], self.out]:
            nn.init.zeros_(linear.weight)
            nn.init.zeros_(linear.bias)

    def forward(self, x: torch.Tensor, t: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        y = self.time_mlp(timestep_embedding(t, self.width)) + self.cond(z)  # [N, W]
        h = self.inp(x)
        for block in self.blocks:
            h = block(h, y)
        shift, scale = self.final_modulation(y).chunk(2, dim=-1)
        return self.out(self.final_norm(h) * (1 + scale) + shift)


class EncoderBlock(nn.Module):
    """Pre-LN bidirectional transformer block (GELU MLP), rotary positions optional, padded keys ignored."""

    def __init__(self, hidden: int, heads: int, intermediate: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(hidden)
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.proj = nn.Linear(hidden, hidden)
        self.norm2 = nn.LayerNorm(hidden)
        self.mlp = nn.Sequential(nn.Linear(hidden, intermediate), nn.GELU(), nn.Linear(intermediate, hidden))

    def forward(
        self, x: torch.Tensor, keep: torch.Tensor, rotary: tuple[torch.Tensor, torch.Tensor] | None = None
    ) -> torch.Tensor:
        """``x`` [B, T, D]; ``keep`` [B, T] bool, the keys attended to; ``rotary`` (cos, sin) [T, D / H / 2]."""
        b, n, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, n, 3, self.heads, d // self.heads).unbind(2)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))  # [B, H, T, D/H]
        if rotary is not None:
            q, k = rotate(q, *rotary), rotate(k, *rotary)
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=keep[:, None, None, :])
        x = x + self.proj(a.transpose(1, 2).reshape(b, n, d))
        return x + self.mlp(self.norm2(x))


class TinyMAR(PreTrainedModel):
    """The transformer (:meth:`conditions`) and the diffusion head (``head``). Prompts are [B, P] word ids (0 =
    padding); tokens [B, N, C]; ``mask`` [B, N] bool, True where the token is unknown."""

    config_class = TinyMARConfig
    base_model_prefix = "tiny_mar"

    def __init__(self, config: TinyMARConfig) -> None:
        super().__init__(config)
        h = config.hidden_size
        self.word_embed = nn.Embedding(len(config.words) + 1, h, padding_idx=0)
        self.token_proj = nn.Linear(config.token_dim, h)
        self.mask_embed = nn.Parameter(torch.zeros(h))
        if config.position_embedding == "learned":
            self.prompt_pos = nn.Parameter(torch.zeros(config.prompt_length, h))
            self.image_pos = nn.Parameter(torch.zeros(config.num_tokens, h))
        self.blocks = nn.ModuleList(
            EncoderBlock(h, config.num_heads, config.intermediate_size) for _ in range(config.num_layers)
        )
        self.norm = nn.LayerNorm(h)
        self.head = DiffusionHead(config.token_dim, h, config.head_width, config.head_depth)
        self.post_init()

    def _init_weights(self, module: nn.Module) -> None:
        """No-op: a fresh model is initialised by :meth:`reset_parameters` (``new_tiny_mar``), a loaded one is not."""

    def reset_parameters(self) -> None:
        """N(0, 0.02) embeddings and transformer linears, MAR's initialisation for the head."""
        for module in self.modules():
            if isinstance(module, nn.Linear) and not any(module is m for m in self.head.modules()):
                nn.init.normal_(module.weight, std=0.02)
                nn.init.zeros_(module.bias)
        positions = (self.prompt_pos, self.image_pos) if self.config.position_embedding == "learned" else ()
        for p in (self.word_embed.weight, self.mask_embed, *positions):
            nn.init.normal_(p, std=0.02)
        with torch.no_grad():
            self.word_embed.weight[0].zero_()
        self.head.reset_parameters()

    def encode_prompts(self, prompts: list[str]) -> torch.Tensor:
        """[B] prompt strings (space-separated words) -> [B, P] word ids, padded with 0; ValueError on an unknown
        word or a prompt longer than ``prompt_length`` words."""
        index = {w: i + 1 for i, w in enumerate(self.config.words)}
        out = torch.zeros(len(prompts), self.config.prompt_length, dtype=torch.long)
        for b, prompt in enumerate(prompts):
            words = prompt.split(" ")
            if len(words) > self.config.prompt_length:
                raise ValueError(f"prompt {prompt!r}: {len(words)} words, at most {self.config.prompt_length}")
            unknown = [w for w in words if w not in index]
            if unknown:
                raise ValueError(f"prompt {prompt!r}: unknown word(s) {unknown}")
            out[b, : len(words)] = torch.tensor([index[w] for w in words])
        return out.to(self.device)

    def conditions(self, prompt_ids: torch.Tensor, tokens: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """z [B, N, D]: the transformer's condition for every token, given the prompt and the known tokens."""
        known = self.token_proj(tokens)  # [B, N, D]
        image = torch.where(mask[..., None], self.mask_embed.expand_as(known), known)
        prompt = self.word_embed(prompt_ids)  # [B, P, D]
        rotary = None
        if self.config.position_embedding == "learned":
            image, prompt = image + self.image_pos, prompt + self.prompt_pos
        else:
            x_len, head_dim = prompt.shape[1] + image.shape[1], self.config.hidden_size // self.config.num_heads
            rotary = rotary_angles(x_len, head_dim, self.config.rope_theta, prompt.device)
        keep = torch.cat([prompt_ids != 0, torch.ones_like(mask)], dim=1)  # [B, P + N] keys attended to
        x = torch.cat([prompt, image], dim=1)
        for block in self.blocks:
            x = block(x, keep, rotary)
        return self.norm(x[:, prompt_ids.shape[1] :])

    def forward(self, prompt_ids: torch.Tensor, tokens: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return self.conditions(prompt_ids, tokens, mask)


def new_tiny_mar(words: list[str], prompt_length: int, num_tokens: int, **sizes: int | str) -> TinyMAR:
    """A freshly initialised TinyMAR (seed the global RNG first)."""
    model = TinyMAR(TinyMARConfig(words=words, prompt_length=prompt_length, num_tokens=num_tokens, **sizes))
    model.reset_parameters()
    return model.eval()


def save_mar(model: TinyMAR, path: str | Path) -> None:
    """``save_pretrained`` into ``path`` atomically (a killed save leaves the old directory or none)."""
    with atomic_path(path) as tmp:
        model.save_pretrained(tmp, safe_serialization=True)


def load_mar(path: str | Path) -> TinyMAR:
    """A TinyMAR saved by :func:`save_mar`, in eval mode; a clear error for anything else, including a checkpoint
    whose weights do not match the architecture its config names (transformers would initialise the missing ones)."""
    config = Path(path) / "config.json"
    if not config.is_file() or read_json(config).get("model_type") != TinyMARConfig.model_type:
        raise DataError(f"{path}: not a TinyMAR checkpoint (expected config.json with model_type tiny_mar)")
    model, info = TinyMAR.from_pretrained(path, use_safetensors=True, output_loading_info=True)
    if info["missing_keys"] or info["unexpected_keys"]:
        raise DataError(f"{path}: weights do not match TinyMAR (missing {sorted(info['missing_keys'])[:3]}, "
                        f"unexpected {sorted(info['unexpected_keys'])[:3]}); rerun download_mar")  # fmt: skip
    return model.eval()
