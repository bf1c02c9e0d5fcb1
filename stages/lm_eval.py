"""lm_eval: lm-evaluation-harness on one text model (``lm_eval.tasks``; off by default, docs/lmeval.md).

The model is lm-eval's ``ddmrl`` model (``ddmrl.lmeval``): ``generate_until`` samples with ``evaluate.sampler`` as
ddmrl's own evaluation does, ``loglikelihood`` is ``lm_eval.loglikelihood``'s estimate (LLaDA's Monte Carlo ELBO by
default). Tasks come from ``lm_eval.include_path`` (YAML tasks over local data files); a task whose dataset is not
here is refused before any work, in one line naming it. lm-eval's results JSON (``results``, ``n-shot``,
``configs``, ``versions``, plus the model's name) goes to ``data/lm_eval/<model>/results.json``, beside ddmrl's
``data/evaluate/<model>/``.

    python stages/lm_eval.py --params params.yaml --model data/sft/model --name sft \
        --out data/lm_eval/sft/results.json
"""

import argparse

from ddmrl import config
from ddmrl.cli import run_stage
from ddmrl.io import write_json
from ddmrl.lmeval import DdmrlLM, check_tasks, evaluate_tasks, task_manager


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--params", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--name", required=True, help="model name in the tables: base, sft or a GRPO run")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    cfg = config.load(args.params)
    lcfg = cfg.lm_eval

    manager = task_manager(lcfg.include_path)
    check_tasks(manager, lcfg.tasks)  # before the model loads: a missing dataset ends the stage at once
    lm = DdmrlLM(
        pretrained=args.model, params=args.params, batch_size=lcfg.batch_size, loglikelihood=lcfg.loglikelihood,
        mc_num=lcfg.mc_num, seed=cfg.seed,
    )  # fmt: skip
    results = evaluate_tasks(lm, manager, lcfg.tasks, dict(lcfg.num_fewshot), lcfg.limit, cfg.seed)
    write_json(args.out, {"model": args.name, **results})


if __name__ == "__main__":
    run_stage(main)
