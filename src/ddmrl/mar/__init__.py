"""Masked autoregressive image generation with continuous tokens (MAR) and GRPO for it (MAR-GRPO), on geneval-mini.

A model family beside the masked (discrete) diffusion models of the rest of ddmrl, self-contained:

* ``encoding``: geneval-mini's cells as continuous 3-vectors (their colour's RGB in [-1, 1]), decoded to the nearest
  colour for the exact GenEval-style judge;
* ``diffusion``: the per-token Gaussian diffusion of MAR's head (cosine schedule, respaced DDPM steps) with the exact
  transition log-probability and KL;
* ``model``: TinyMAR, a bidirectional transformer proposing a condition per token and MAR's MLP diffusion head;
* ``sampler``: MAR's random-order, cosine-schedule sampler, recording every state, trajectory and draft;
* ``pretrain``: MAR's diffusion loss on masked tokens;
* ``objective`` and ``grpo``: GRPO over the head's denoising transitions, and MAR-GRPO's stabilisers (a frozen head,
  multi-trajectory expectation on the top-k % most uncertain tokens, consistency-aware token selection);
* ``evaluation``: GenEval's protocol and folder layout, as for the other image rows.

It reuses the task (prompts, judge, partial-credit reward), group advantages (``ddmrl.objectives``), seeding,
resumable checkpoints and curves (``ddmrl.training``), GenEval's layout and summary (``ddmrl.geneval``). What is the
papers' and what is ddmrl's reading: ``docs/mar_grpo.md``.
"""
