"""The data tree: where each stage writes, ``data/<stage>/...``, in one place for the DAG and the tables stage.

The DAG (:mod:`ddmrl.pipeline.dag`) names every stage's outputs with these functions, and the tables stage finds
the files it aggregates with the same functions under the directories it is given, so that its command line does
not grow with the sweep (DVC expands the sweep at run time).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ddmrl.config import MAR_TASK, mar_run_name, run_name

if TYPE_CHECKING:
    from ddmrl.config import Config

TASKS_DIR = "data/download/tasks"
BASE_DIR = "data/download/base"
SFT_DIR = "data/sft/model"
IMAGE_TASKS_DIR = "data/download/image/tasks"
IMAGE_BASE_DIR = "data/download/image/base"
MAR_DIR = "data/download/mar"
MAR_TASKS_DIR = f"{MAR_DIR}/tasks"
MAR_BASE_DIR = f"{MAR_DIR}/base"
MAR_BASE = "mar_base"  # the MAR base model's name in data/evaluate/ and the image table
EVALUATE_DIR = "data/evaluate"
LM_EVAL_DIR = "data/lm_eval"
GRPO_DIR = "data/grpo"
CREDIT_DIR = "data/credit"
TABLES_DIR = "data/tables"
#: the columns of a GRPO run's ``curve.csv`` that the tables plot (and DVC's plots), with their labels
CURVES = {
    "reward": "mean reward of rollouts",
    "kl": "k3 KL to the reference",
    "loss": "loss",
    "clip_ratio": "clip ratio",
}


def per_seed_bases(cfg: Config) -> bool:
    """Whether each GRPO seed has its own base model (``download.base_per_seed``; embedded models only: a paper
    profile's base model is the one downloaded checkpoint)."""
    return cfg.download.base_per_seed and not cfg.model.pretrained


def base_seeds(cfg: Config) -> tuple[int | None, ...]:
    """The base models' seeds: each GRPO seed's with :func:`per_seed_bases`, else one base model (None)."""
    return tuple(cfg.grpo.seeds) if per_seed_bases(cfg) else (None,)


def model_name(model: str, seed: int | str | None) -> str:
    """A text base or SFT model's name in data/evaluate/ and the tables: ``base``, or ``base_s1`` when each GRPO
    seed has its own base model (``download.base_per_seed``)."""
    return model if seed is None else f"{model}_s{seed}"


def download_root(seed: int | str | None) -> str:
    """Where the text download stage writes its metrics, curve and resolved config (per base model)."""
    return "data/download" if seed is None else f"data/download/s{seed}"


def tasks_dir(seed: int | str | None) -> str:
    return TASKS_DIR if seed is None else f"{download_root(seed)}/tasks"


def base_dir(seed: int | str | None) -> str:
    return BASE_DIR if seed is None else f"{download_root(seed)}/base"


def sft_dir(seed: int | str | None) -> str:
    return SFT_DIR if seed is None else f"data/sft/s{seed}/model"


def start_model(cfg: Config, seed: int | str | None = None) -> tuple[str, str]:
    """(name, directory) of the model text RL starts from: the SFT model, or with ``sft.max_steps: 0`` (the paper
    profiles start from LLaDA-8B-Instruct, as MaskGRPO and d1's diffu-GRPO row do) the downloaded base model.
    ``seed``: the base model of that GRPO seed (``download.base_per_seed``; None: the only one)."""
    if cfg.sft.max_steps:
        return model_name("sft", seed), sft_dir(seed)
    return model_name("base", seed), base_dir(seed)


def first_start_model(cfg: Config) -> tuple[str, str]:
    """The start model of the rollout, reward and credit stages: the first GRPO seed's with one base model per seed
    (a measurement of the objectives, not of the base models), else the only one."""
    return start_model(cfg, base_seeds(cfg)[0])


def has_credit(cfg: Config) -> bool:
    """The credit diagnostic back-propagates per token through the whole model: embedded models only."""
    return bool(cfg.tasks) and not cfg.model.pretrained


def rollouts(model: str, task: str) -> str:
    return f"data/rollout/{model}/{task}.jsonl"


def reward_dir(model: str) -> str:
    return f"data/reward/{model}"


def scored(root: str, task: str) -> str:
    """Scored rollouts (JSONL) under ``reward_dir``; their summary metrics are :func:`reward_metrics`."""
    return f"{root}/{task}.jsonl"


def reward_metrics(root: str, task: str) -> str:
    return f"{root}/{task}.json"


def credit(root: str, section: str, task: str) -> str:
    return f"{root}/{section}/{task}.csv"


def run_dir(root: str, run: str) -> str:
    return f"{root}/{run}"


def curve(root: str, run: str) -> str:
    return f"{root}/{run}/curve.csv"


def evaluation(root: str, model: str, task: str) -> str:
    """Held-out metrics of ``model`` (base, sft or a run name) on ``task``; the generations are the ``.jsonl``."""
    return f"{root}/{model}/{task}.json"


def lm_eval_results(model: str, root: str = LM_EVAL_DIR) -> str:
    """lm-evaluation-harness's results JSON of ``model`` (base, sft or a run name): ``data/lm_eval/<model>/``
    mirrors ``data/evaluate/<model>/`` (its own tree, by the path convention: the tables read it only when
    ``lm_eval.tasks`` names tasks)."""
    return f"{root}/{model}/results.json"


def generations(root: str, model: str, task: str) -> str:
    """Held-out generations of ``model`` on ``task``, one scored item a line (the tables' intervals)."""
    return f"{root}/{model}/{task}.jsonl"


def image_results(root: str, model: str, task: str) -> str:
    """GenEval's results JSONL of the images in :func:`image_folder`."""
    return f"{root}/{model}/{task}_results.jsonl"


def image_folder(root: str, model: str, task: str) -> str:
    """GenEval's folder layout: ``<NNNNN>/metadata.jsonl`` and ``<NNNNN>/samples/<kkkk>.png``."""
    return f"{root}/{model}/{task}"


def tables_inputs(
    cfg: Config,
    evaluate: str = EVALUATE_DIR,
    grpo: str = GRPO_DIR,
    reward: str | None = None,
    credits: str = CREDIT_DIR,
    lm_eval: str = LM_EVAL_DIR,
) -> dict[str, list[str]]:
    """The files the tables stage aggregates, under the given directories (``reward``: the start model's).

    ``evals`` text metrics of base, the start model (of every base model) and every text run; ``curves`` every
    run's curve; ``rollouts`` the (first) start model's reward metrics per task; ``credit`` every method section's
    credit per text task; ``image_results`` and ``image_folders`` GenEval's results and folders of the image base
    model and runs, then of the MAR base model and runs (``mar:``); ``image_benchmarks`` the image base model's and
    runs' metrics on every benchmark of ``image.eval_tasks``; ``lm_eval`` lm-evaluation-harness's results of every
    text model (``lm_eval.tasks``)."""
    reward = reward or reward_dir(first_start_model(cfg)[0])
    runs = [(run_name(m, t, s), t) for m, t, s in cfg.runs()]
    mar = [(mar_run_name(m, MAR_TASK, s), MAR_TASK) for m, s in cfg.mar.runs()]
    text = list(dict.fromkeys(m for b in base_seeds(cfg) for m in (model_name("base", b), start_model(cfg, b)[0])))
    image = set(cfg.image.tasks)
    models = [(m, t) for t in cfg.tasks for m in text] + [(r, t) for r, t in runs if t not in image]
    image_models = [("base", t) for t in cfg.image.tasks] + [(r, t) for r, t in runs if t in image]
    benchmarks = [evaluation(evaluate, m, b) for m, _ in image_models for b in cfg.image.eval_tasks]
    image_models += [(MAR_BASE, MAR_TASK), *mar] if mar else []
    runs += mar
    return {
        "evals": [evaluation(evaluate, m, t) for m, t in models],
        "generations": [generations(evaluate, m, t) for m, t in models],
        "curves": [curve(grpo, r) for r, _ in runs],
        "rollouts": [reward_metrics(reward, t) for t in cfg.tasks],
        "credit": [credit(credits, m, t) for t in cfg.tasks for m in cfg.text_methods if cfg.runs_on(m, t)]
        if has_credit(cfg)
        else [],
        "image_results": [image_results(evaluate, m, t) for m, t in image_models],
        "image_folders": [image_folder(evaluate, m, t) for m, t in image_models],
        "image_benchmarks": benchmarks,
        "lm_eval": [lm_eval_results(m, lm_eval) for m in dict.fromkeys(m for m, _ in models)]
        if cfg.lm_eval.tasks
        else [],
    }
