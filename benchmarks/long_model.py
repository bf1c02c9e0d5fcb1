"""A LLaDA-shaped tiny model for long completions (64, 128, 256 tokens), trained by the benchmark itself.

The embedded tasks have short completions (sudoku4 20 tokens, countdown3 10), and TinyDDM's checkpoints use
learned positions sized to them. For the long-completion measurements the benchmark trains its own model: TinyDDM
with rotary positions (LLaDA's), bidirectional attention, sampled with LLaDA's blocks of 32, on **echo**, a task whose
answer spans every block and depends on the blocks before it: the prompt is 16 random digits, the answer those digits
repeated to fill the completion (L - 1 tokens, then EOS). Token k of the answer equals token k - 16, a fixed relative
offset that rotary attention learns in a few hundred steps; a block of 32 can only be right if the blocks before it
are. Accuracy is the fraction of answer tokens right (pooled, like sudoku's cell accuracy).

The model is trained once per configuration and cached under ``--work`` (a few minutes on 2 CPU cores).
"""

from __future__ import annotations

import json
import random
import time
from pathlib import Path
from typing import Any

import torch

from ddmrl.models.checkpoint import load_checkpoint, save_checkpoint
from ddmrl.models.tiny import TinyDDMConfig, TinyDDMForMaskedLM
from ddmrl.models.tokenizer import build_tokenizer
from ddmrl.tasks.base import Example, Task
from ddmrl.tasks.encoding import encode_examples, prompt_length
from ddmrl.training.mdm import lr_lambda, mdm_loss, sequences

PERIOD = 16


class Echo(Task):
    """Repeat the prompt's 16 digits to fill the completion."""

    name = "echo"
    alphabet = "0123456789"
    special_tokens = ("<echo>",)
    prompt_length = 1 + PERIOD

    def __init__(self, completion_length: int) -> None:
        self.completion_length = completion_length

    def sample(self, rng: random.Random) -> Example:
        digits = "".join(rng.choice(self.alphabet) for _ in range(PERIOD))
        answer = (digits * (self.completion_length // PERIOD + 1))[: self.completion_length - 1]
        return Example(id=digits, prompt="<echo>" + digits, answer=answer, gold={"answer": answer})

    def reward(self, completion: str, example: Example) -> float:
        s = self.score(completion, example)
        return s["right"] / s["total"]

    def score(self, completion: str, example: Example) -> dict[str, Any]:
        answer = example.gold["answer"]
        right = sum(a == b for a, b in zip(completion, answer, strict=False))
        return {
            "correct": right == len(answer) and len(completion) == len(answer),
            "right": right,
            "total": len(answer),
        }

    def accuracy(self, scores: list[dict[str, Any]]) -> float:
        return 100.0 * sum(s["right"] for s in scores) / max(sum(s["total"] for s in scores), 1)


HELD_OUT_SEED = 4242  # training draws use other seeds, and exclude the held-out ids


def train_echo_model(
    work: Path, lengths: tuple[int, ...], steps: int, batch: int, hidden: int, layers: int, seed: int = 0
) -> tuple[TinyDDMForMaskedLM, Any, dict]:
    """Train (or load from ``work``) a rope TinyDDM on echo at completion lengths ``lengths`` (cycled per step)."""
    tag = f"echo_h{hidden}_l{layers}_s{steps}_b{batch}_" + "-".join(map(str, lengths))
    path = work / tag
    if (path / "train.json").exists():
        model, tok = load_checkpoint(path)
        return model, tok, json.loads((path / "train.json").read_text())
    task = Echo(max(lengths))
    tok = build_tokenizer(task.alphabet, task.special_tokens)
    torch.manual_seed(seed)
    model = TinyDDMForMaskedLM(
        TinyDDMConfig(
            vocab_size=len(tok), hidden_size=hidden, num_layers=layers, num_heads=4, intermediate_size=4 * hidden,
            max_position_embeddings=prompt_length(task) + max(lengths), position_embedding="rope",
            mask_token_id=tok.mask_token_id, pad_token_id=tok.pad_token_id, bos_token_id=tok.bos_token_id,
            eos_token_id=tok.eos_token_id,
        )
    )  # fmt: skip
    held = {ex.id for ex in Echo(64).generate(256, HELD_OUT_SEED)}
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda(max(1, steps // 20), steps))
    gen = torch.Generator().manual_seed(seed)
    start, losses = time.time(), []
    model.train()
    for step in range(steps):
        t = Echo(lengths[step % len(lengths)])
        x, maskable = sequences(
            encode_examples(tok, t, t.generate(batch, 10_000 + step, held)), "sft", tok.pad_token_id
        )
        loss = mdm_loss(model, x, maskable, tok.mask_token_id, gen)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        losses.append(loss.item())
    model.eval()
    info = {"steps": steps, "batch": batch, "lengths": list(lengths), "seconds": time.time() - start,
            "final_loss": sum(losses[-20:]) / len(losses[-20:]), "hidden": hidden, "layers": layers}  # fmt: skip
    save_checkpoint(model, tok, path)
    (path / "train.json").write_text(json.dumps(info))
    return model, tok, info


def held_out(length: int, n: int) -> tuple[Echo, list[Example]]:
    """The echo task at ``length`` and its held-out prompts (the same digits at every length)."""
    return Echo(length), Echo(length).generate(n, HELD_OUT_SEED)
