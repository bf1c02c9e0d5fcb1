"""credit: the gradient each token receives as a function of the sampler step that revealed it, for one method.

Measured on a real batch (the SFT model's scored rollouts) through the method's own objective (see
``ddmrl.diagnostics``): the empirical form of RebRL's Eq. 10. For a RebRL section, every rebalancing mode (none, t1,
t2, token) is also measured under every coupling of its views (independent, nested, trajectory: views that follow
the sampler's own order, where a token's reveal step decides in how many views it is masked, as in Eq. 10). Methods
that train on the sampler's stored states (MDPO, CJ-GRPO) sample the same rollouts again from their stored seed with
the states recorded (and MDPO rewards every step's prediction); MDPO's credit of a view is divided by the advantage
of its step. A method whose rollouts are trees (``Method.rollout_options``' ``branching``: d-TreeRPO) samples the
batch's prompts again as trees from the stored seed, and a method with per-view advantages (d-TreeRPO's per-edge
ones) has each view's credit divided by its view's advantage.

    python stages/credit.py --params params.yaml --tasks data/download/tasks --model data/sft/model \
        --task sudoku4 --method rebrl --rollouts data/reward/sft/sudoku4.jsonl --out data/credit/rebrl/sudoku4.csv
"""

import ddmrl  # noqa: F401, I001  (first: pins the CPU numerics before numpy loads its BLAS; ddmrl.numerics)
import argparse
import dataclasses

import pandas as pd
import torch

from ddmrl import config
from ddmrl.cli import run_stage, write_csv
from ddmrl.diagnostics import credit_by_reveal_step, credit_variants, token_credit
from ddmrl.io import read_jsonl
from ddmrl.masking import view_sampler
from ddmrl.methods import METHODS
from ddmrl.models.checkpoint import load_checkpoint
from ddmrl.objectives import STEP_ADVANTAGES, VIEW_ADVANTAGES
from ddmrl.objectives.advantages import group_advantages
from ddmrl.rollout import Rollouts, rollout, step_rewards
from ddmrl.rollout import rewards as rollout_rewards
from ddmrl.seeding import generator
from ddmrl.tasks.base import Example
from ddmrl.tasks.store import load_task
from ddmrl.tasks.encoding import completion_mask, encode_prompts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--params", required=True)
    ap.add_argument("--tasks", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--task", required=True)
    ap.add_argument("--method", required=True, help="a method section of params.yaml")
    ap.add_argument("--rollouts", required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    cfg = config.load(args.params)

    model, tok = load_checkpoint(args.model)
    task, _ = load_task(args.tasks, args.task)
    records = read_jsonl(
        args.rollouts, required=("example", "completion_ids", "reveal_step", "reward", "sample", "view_seed")
    )
    g = 1 + max(r["sample"] for r in records)
    ids = torch.tensor([r["completion_ids"] for r in records])
    batch = Rollouts(
        encode_prompts(tok, task, [Example.from_record(r["example"]) for r in records]),
        ids,
        completion_mask(ids, tok.eos_token_id),
        torch.tensor([r["reveal_step"] for r in records]),
        [r["completion"] for r in records],
        0,
    )
    rewards = torch.tensor([r["reward"] for r in records], dtype=torch.float32)

    if args.method not in cfg.methods:
        raise config.ConfigError(f"--method {args.method}: not a method section; sections: {', '.join(cfg.methods)}")
    section = cfg.methods[args.method]
    step_adv = view_adv = None
    method = METHODS[section.method]
    # rows sampled as trees (d-TreeRPO): the stored prompts are sampled again that way
    tree = method.rollout_options(dataclasses.replace(section, num_generations=g)).get("branching", ())
    states = view_sampler(section.remasking).states
    if states or tree:  # the same rollouts again, their states recorded (MDPO, CJ-GRPO)
        examples = [Example.from_record(r["example"]) for r in records[::g]]
        record = states
        batch = rollout(model, tok, task, examples, g, cfg.rollout.sampler, generator(records[0]["seed"]), record,
                        branching=tree)  # fmt: skip
        if batch.tree is None and not torch.equal(batch.completion_ids, ids):
            print("note: the regenerated rollouts differ from the stored ones (another device?); using them")
        rewards = rollout_rewards(task, examples, batch, g)
        if method.view_advantage:
            view_adv = VIEW_ADVANTAGES[method.view_advantage](rewards, batch)  # [V, N]
        if method.step_advantage:
            step_adv = STEP_ADVANTAGES[method.step_advantage](step_rewards(tok, task, examples, batch, g), g)
    variants = credit_variants(args.method, section)
    frames = []
    seed = records[0]["view_seed"]  # the views regenerate from the seed stored with the rollouts
    for name, vcfg in variants.items():
        adv, _ = group_advantages(rewards, g, vcfg.scale_rewards)
        if step_adv is not None:  # a rollout counts when any of its steps has an advantage
            adv = step_adv.abs().amax(1)
        if view_adv is not None:  # or any of its views
            adv = view_adv.abs().amax(0)
        credit = token_credit(
            model, dataclasses.replace(vcfg, num_generations=g), batch, adv, seed, tok.pad_token_id, tok.mask_token_id,
            step_adv, view_adv,
        )  # fmt: skip
        frames.append(credit_by_reveal_step(credit, batch, adv).assign(method=name, task=args.task))
    write_csv(args.out, pd.concat(frames))  # empty (header only) when no rollout had a non-zero advantage


if __name__ == "__main__":
    run_stage(main)
