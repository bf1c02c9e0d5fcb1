"""The pipeline DAG as data: one :class:`Stage` per job, built once from params.yaml and run by two engines.

Snakemake (``workflow/rules/stages.smk``) makes one rule per stage; ``python -m ddmrl.pipeline.export`` writes
``dvc.yaml`` from the same list. Both engines run the identical command line, :attr:`Stage.cmd`.

Path convention: every artifact lives under ``data/<stage that wrote it>/...``; a path reaches its script only as
a CLI flag. Sweeps (methods x tasks x seeds) are expanded here into concretely named stages, so neither engine's
templating (DVC ``foreach``/``matrix``, Snakemake wildcards) is used.
"""

from __future__ import annotations

import ast
import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ddmrl.config import DEFAULT_PROFILE, Config, LaunchConfig, run_name

# grpo keys that choose which runs exist rather than how one run trains (only the tables stage reads them).
_GRPO_SWEEP_KEYS = ("methods", "seeds")

NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

ArgValue = str | tuple[str, ...]


@dataclass(frozen=True)
class Stage:
    """One job of the pipeline, as both engines see it."""

    name: str  # letters, digits, _ only (valid for DVC and as a Snakemake rule name)
    script: str  # e.g. "stages/grpo.py"
    args: tuple[tuple[str, ArgValue], ...]  # ordered CLI flags -> value(s); a tuple repeats the flag
    deps: tuple[str, ...]  # artifacts of earlier stages, then tracked inputs (the profile overlay)
    outs: tuple[str, ...] = ()  # output files
    dir_outs: tuple[str, ...] = ()  # output directories
    metrics: tuple[str, ...] = ()  # JSON metric files (outputs; DVC metrics, cache: false)
    plots: tuple[str, ...] = ()  # CSV curves (outputs; DVC plots, cache: false)
    params: tuple[str, ...] = ()  # dotted params.yaml keys this stage reads (DVC params; Snakemake params)
    threads: int = 1  # Snakemake threads (OMP_NUM_THREADS of the job; scaled down to --cores when fewer)
    launcher: tuple[str, ...] = ("python",)  # words before the script, e.g. accelerate launch --config_file F ...
    resources: tuple[tuple[str, int | str], ...] = ()  # Snakemake resources of the job, e.g. (("gpu", 8),)

    @property
    def cmd(self) -> str:
        """``python <script> --flag value ...`` (or ``accelerate launch ... <script> ...``), shell-quoted; a tuple
        value repeats its flag."""
        words = [*self.launcher, self.script]
        for flag, value in self.args:
            for v in value if isinstance(value, tuple) else (value,):
                words += [flag, v]
        return shlex.join(words)

    @property
    def outputs(self) -> tuple[str, ...]:
        """Every path the stage writes."""
        return self.outs + self.dir_outs + self.metrics + self.plots


# ------------------------------------------------------------------------------------------------ building

TASKS_DIR = "data/download/tasks"
BASE_DIR = "data/download/base"
SFT_DIR = "data/sft/model"
IMAGE_TASKS_DIR = "data/download/image/tasks"
IMAGE_BASE_DIR = "data/download/image/base"


def build(cfg: Config, params_file: str = "params.yaml") -> list[Stage]:
    """Every stage of the pipeline for ``cfg``, each after the stages whose outputs it reads.

    ``params_file`` is the name the commands pass as ``--params`` (relative to the repository root).
    """
    new = _StageFactory(cfg, params_file)
    stages = []
    if cfg.tasks:  # the text branch (a paper profile may be image-only)
        stages.append(download(new))
        if cfg.sft.max_steps:
            stages.append(sft(new))
    if cfg.image.tasks:
        stages.append(download(new, "image"))
    for task in cfg.tasks:
        stages += [rollout(new, task), reward(new, task)]
    if not cfg.model.pretrained:  # the credit diagnostic back-propagates per token: embedded models only
        stages += [credit(new, section, task) for task in cfg.tasks for section in cfg.grpo.methods]
    stages += [grpo(new, section, task, seed) for section, task, seed in cfg.runs()]
    starts = dict.fromkeys([("base", BASE_DIR), start_model(cfg)])  # the base model, and the SFT model if any
    models = [(m, t, d) for t in cfg.tasks for m, d in starts]
    models += [("base", t, IMAGE_BASE_DIR) for t in cfg.image.tasks]
    models += [(run_name(*r), r[1], grpo_dir(run_name(*r)) + "/model") for r in cfg.runs()]
    stages += [evaluate(new, name, task, model_dir) for name, task, model_dir in models]
    stages.append(tables(new, stages))
    return stages


def start_model(cfg: Config) -> tuple[str, str]:
    """(name, directory) of the model text RL starts from: the SFT model, or with ``sft.max_steps: 0`` (the paper
    profiles start from LLaDA-8B-Instruct, as MaskGRPO and d1's diffu-GRPO row do) the downloaded base model."""
    return ("sft", SFT_DIR) if cfg.sft.max_steps else ("base", BASE_DIR)


class _StageFactory:
    """Fills in what every stage shares: ``--params``, the profile overlay dep, the params present."""

    def __init__(self, cfg: Config, params_file: str) -> None:
        self.cfg, self.params_file = cfg, params_file
        self.overlay = (f"profiles/{cfg.profile}.yaml",) if cfg.profile != DEFAULT_PROFILE else ()

    def __call__(
        self,
        kind: str,
        name: str,
        args: dict[str, ArgValue],
        deps: tuple[str, ...],
        params: tuple[str, ...],
        **kw: Any,
    ) -> Stage:
        return Stage(
            name=name,
            script=f"stages/{kind}.py",
            args=(("--params", self.params_file), *args.items()),
            deps=deps + self.overlay,
            params=_present(self.cfg.raw, params),
            **kw,
        )


def log_dir(stage_name: str) -> str:
    """Where a training stage's experiment trackers write (TensorBoard, DVCLive): beside its log, git-ignored and,
    like the checkpoints, no output of either engine."""
    return f"logs/{stage_name}"


def checkpoints(stage_name: str) -> str:
    """Where a training stage keeps resumable checkpoints: deliberately NOT an output of either engine, so that
    Snakemake's removal of incomplete outputs and DVC's removal of outputs before a run leave it alone."""
    return f"data/checkpoints/{stage_name}"


#: threads of the text pre-training: fixed, not "all", because the thread count changes the order of float sums and
#: so the weights (measured: one thread instead of two moved the SFT weights by up to 2e-4, and SPG's run then
#: collapsed where it had not); with a fixed count the base model does not depend on --cores (given that many)
PRETRAIN_THREADS = 2


def download(new: _StageFactory, modality: str = "text") -> Stage:
    """The text base model and tasks, or (``image``) the text-to-image branch's own. The image pre-training runs on
    one thread, beside the text branch's jobs (on 2 cores that finishes sooner than two threads each in turn)."""
    if modality == "text":
        name, root, tasks, base = "download", "data/download", TASKS_DIR, BASE_DIR
        params = ("tasks", "task_params", "model", "download")
        extra, pretrained = {}, new.cfg.model.pretrained
    else:
        name, root, tasks, base = "download_image", "data/download/image", IMAGE_TASKS_DIR, IMAGE_BASE_DIR
        params = tuple(f"image.{k}" for k in ("tasks", "task_params", "model", "download", "cond_dropout_prob"))
        extra, pretrained = {"--modality": "image"}, new.cfg.image.model.pretrained
    metrics, curve = f"{root}/metrics.json", f"{root}/curve.csv"
    manifests = (f"{root}/manifests",) if pretrained else ()  # paper profiles: the downloads' checksums
    if manifests:
        extra["--manifests"] = manifests[0]
    configs = () if pretrained else (f"{root}/config.yaml",)  # the resolved configuration of the pre-training
    if configs:
        extra["--config-out"] = configs[0]
    return new(
        "download", name,
        {"--tasks-out": tasks, "--model-out": base, "--metrics": metrics, "--curve": curve,
         "--checkpoints": checkpoints(name), "--log-dir": log_dir(name), **extra},
        deps=(), params=("profile", "seed", *params), outs=configs,
        dir_outs=(tasks, base, *manifests), metrics=(metrics,), plots=(curve,),
        threads=PRETRAIN_THREADS if modality == "text" and not pretrained else 1,
    )  # fmt: skip


def launch(cfg: LaunchConfig) -> dict[str, Any]:
    """``launcher`` and ``resources`` of a training stage: ``python`` (the default, one process), or
    ``accelerate launch --config_file F --num_processes N`` with N GPUs requested from the scheduler."""
    if cfg.launcher == "python":
        return {}
    words = ("accelerate", "launch", "--config_file", cfg.config_file, "--num_processes", str(cfg.num_processes))
    return {"launcher": words, "resources": (("gpu", cfg.num_processes),)}


def sft(new: _StageFactory) -> Stage:
    """One thread: the embedded SFT is 30 short steps, and runs beside the image branch's pre-training."""
    metrics, curve, resolved = "data/sft/metrics.json", "data/sft/curve.csv", "data/sft/config.yaml"
    return new(
        "sft", "sft",
        {"--tasks": TASKS_DIR, "--model": BASE_DIR, "--model-out": SFT_DIR, "--metrics": metrics, "--curve": curve,
         "--config-out": resolved, "--checkpoints": checkpoints("sft"), "--log-dir": log_dir("sft")},
        deps=(TASKS_DIR, BASE_DIR), params=("profile", "seed", "tasks", "sft"), outs=(resolved,),
        dir_outs=(SFT_DIR,), metrics=(metrics,), plots=(curve,), threads=1, **launch(new.cfg.sft.launch),
    )  # fmt: skip


def rollout(new: _StageFactory, task: str) -> Stage:
    """G samples per prompt from the model RL starts from (``start_model``)."""
    start, model = start_model(new.cfg)
    out = f"data/rollout/{start}/{task}.jsonl"
    return new(
        "rollout", f"rollout_{start}_{task}",
        {"--tasks": TASKS_DIR, "--model": model, "--task": task, "--out": out},
        deps=(TASKS_DIR, model), params=("profile", "seed", "rollout"), outs=(out,),
    )  # fmt: skip


def reward(new: _StageFactory, task: str) -> Stage:
    start = start_model(new.cfg)[0]
    rollouts, out, metrics = (
        f"data/rollout/{start}/{task}.jsonl",
        f"data/reward/{start}/{task}.jsonl",
        f"data/reward/{start}/{task}.json",
    )
    return new(
        "reward", f"reward_{start}_{task}",
        {"--tasks": TASKS_DIR, "--task": task, "--rollouts": rollouts, "--out": out, "--metrics": metrics},
        deps=(TASKS_DIR, rollouts), params=("profile", "tasks"), outs=(out,), metrics=(metrics,),
    )  # fmt: skip


def credit(new: _StageFactory, section: str, task: str) -> Stage:
    """Per-token credit of one method section on the scored rollouts of the start model (RebRL's Eq. 10, measured)."""
    start, model = start_model(new.cfg)
    rollouts, out = f"data/reward/{start}/{task}.jsonl", f"data/credit/{section}/{task}.csv"
    return new(
        "credit", f"credit_{section}_{task}",
        {"--tasks": TASKS_DIR, "--model": model, "--task": task, "--method": section, "--rollouts": rollouts,
         "--out": out},
        deps=(TASKS_DIR, model, rollouts), params=("profile", "seed", *grpo_keys(new.cfg), f"methods.{section}"),
        plots=(out,),
    )  # fmt: skip


def grpo_dir(run: str) -> str:
    return f"data/grpo/{run}"


def grpo(new: _StageFactory, section: str, task: str, seed: int) -> Stage:
    """Text runs start from ``start_model`` (the SFT model in the embedded default); image runs from the image base
    model (as RebRL and MaskGRPO start from MMaDA-8B-Base)."""
    run = run_name(section, task, seed)
    model, metrics, curve = f"{grpo_dir(run)}/model", f"{grpo_dir(run)}/metrics.json", f"{grpo_dir(run)}/curve.csv"
    resolved = f"{grpo_dir(run)}/config.yaml"  # the run's hyperparameters after profile, method and overrides
    tasks, start = _task_inputs(new.cfg, task)
    image = ("image.grpo", f"image.method_overrides.{section}") if task in new.cfg.image.tasks else ()
    return new(
        "grpo", f"grpo_{run}",
        {"--run": run, "--tasks": tasks, "--model": start, "--model-out": model,
         "--metrics": metrics, "--curve": curve, "--config-out": resolved,
         "--checkpoints": checkpoints(f"grpo_{run}"), "--log-dir": log_dir(f"grpo_{run}")},
        deps=(tasks, start), params=("profile", "seed", *grpo_keys(new.cfg), f"methods.{section}", *image),
        outs=(resolved,), dir_outs=(model,), metrics=(metrics,), plots=(curve,), **launch(new.cfg.run(run)[0].launch),
    )  # fmt: skip


def _task_inputs(cfg: Config, task: str) -> tuple[str, str]:
    """(tasks directory, model a GRPO run of ``task`` starts from)."""
    return (IMAGE_TASKS_DIR, IMAGE_BASE_DIR) if task in cfg.image.tasks else (TASKS_DIR, start_model(cfg)[1])


def evaluate(new: _StageFactory, model_name: str, task: str, model_dir: str) -> Stage:
    """``model_name`` is ``base``, ``sft`` (evaluated on every task) or a run name (on its own task).

    Image tasks also write GenEval's folder layout (``<task>/<NNNNN>/metadata.jsonl``, ``samples/<k>.png``) and
    the evaluator's results JSONL (``<task>_results.jsonl``) judged from those PNGs."""
    root = f"data/evaluate/{model_name}"
    generations, metrics = f"{root}/{task}.jsonl", f"{root}/{task}.json"
    name = f"evaluate_{model_name}_{task}" if model_name in ("base", "sft") else f"evaluate_{model_name}"
    args = {"--tasks": TASKS_DIR, "--model": model_dir, "--task": task, "--name": model_name,
            "--generations": generations, "--metrics": metrics}  # fmt: skip
    if task not in new.cfg.image.tasks:
        return new(
            "evaluate", name, args, deps=(TASKS_DIR, model_dir), params=("profile", "evaluate"),
            outs=(generations,), metrics=(metrics,),
        )  # fmt: skip
    images, results = f"{root}/{task}", f"{root}/{task}_results.jsonl"
    args |= {"--tasks": IMAGE_TASKS_DIR, "--images": images, "--results": results}
    return new(
        "evaluate", name, args, deps=(IMAGE_TASKS_DIR, model_dir), params=("profile", "image.evaluate"),
        outs=(generations, results), dir_outs=(images,), metrics=(metrics,),
    )  # fmt: skip


def tables(new: _StageFactory, stages: list[Stage]) -> Stage:
    """Aggregates every evaluation, GRPO curve, SFT rollout score and credit measurement."""
    evaluations = [s for s in stages if s.script == "stages/evaluate.py"]
    evals = tuple(m for s in evaluations if not s.dir_outs for m in s.metrics)
    generations = tuple(o for s in evaluations if not s.dir_outs for o in s.outs)  # per-item scores: intervals
    curves = tuple(p for s in stages if s.script == "stages/grpo.py" for p in s.plots)
    rollouts = tuple(m for s in stages if s.script == "stages/reward.py" for m in s.metrics)
    credits = tuple(p for s in stages if s.script == "stages/credit.py" for p in s.plots)
    args = {"--evals": evals, "--generations": generations, "--curves": curves, "--rollouts": rollouts,
            "--credit": credits}  # fmt: skip
    image_results = tuple(o for s in evaluations if s.dir_outs for o in s.outs if o.endswith("_results.jsonl"))
    image_folders = tuple(d for s in evaluations for d in s.dir_outs)
    if image_results:
        args |= {"--image-results": image_results, "--image-folders": image_folders}
    deps = tuple(dict.fromkeys(p for v in args.values() for p in v))
    return new(
        "tables", "tables", {**args, "--out": "data/tables"}, deps=deps,
        params=("profile", "grpo.methods", "grpo.seeds", "tasks", "image.tasks", "image.methods", "image.seeds",
                "rebrl_ablation"),
        dir_outs=("data/tables",),
    )  # fmt: skip


def grpo_keys(cfg: Config) -> tuple[str, ...]:
    """The ``grpo.*`` keys one run reads: all but the sweep lists, so adding a seed or method retrains nothing."""
    section = cfg.raw.get("grpo") or {}
    return tuple(f"grpo.{k}" for k in sorted(section) if k not in _GRPO_SWEEP_KEYS)


# ------------------------------------------------------------------------------------------------ params


def lookup(mapping: Any, key: str) -> Any:
    """The value of dotted ``key`` (``methods.rebrl.gamma``) in nested mappings; ``KeyError`` when absent."""
    value = mapping
    for part in key.split("."):
        if not isinstance(value, dict) or part not in value:
            raise KeyError(key)
        value = value[part]
    return value


def has_key(mapping: Any, key: str) -> bool:
    try:
        lookup(mapping, key)
    except KeyError:
        return False
    return True


def _present(raw: dict[str, Any], keys: tuple[str, ...]) -> tuple[str, ...]:
    """``keys`` that params.yaml (after the overlay) sets; DVC refuses params deps that are missing."""
    return tuple(k for k in keys if has_key(raw, k))


def param_values(cfg: Config, stage: Stage) -> dict[str, Any]:
    """The values of the params a stage reads: what DVC records in dvc.lock and Snakemake in its params."""
    return {key: lookup(cfg.raw, key) for key in stage.params}


# ------------------------------------------------------------------------------------------------ files


def code_files(script: str | Path, root: str | Path = ".") -> tuple[str, ...]:
    """The library files (``src/ddmrl/**.py``) that ``script`` imports, directly or through other library modules.

    Found by parsing ``import ddmrl...`` / ``from ddmrl... import`` statements, so the deps follow the code and
    editing the tables code does not retrain a policy. A package import includes its ``__init__.py`` files.
    """
    root = Path(root)
    seen: set[Path] = set()
    todo = [root / script]
    while todo:
        path = todo.pop()
        for module in _ddmrl_imports(path):
            for file in _module_files(module, root):
                if file not in seen:
                    seen.add(file)
                    todo.append(file)
    return tuple(sorted(f.relative_to(root).as_posix() for f in seen))


def _ddmrl_imports(path: Path) -> set[str]:
    """Dotted names of the ddmrl modules a file imports (``from ddmrl.x import y`` gives ddmrl.x and ddmrl.x.y)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names if a.name.split(".")[0] == "ddmrl")
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "ddmrl":
            names.add(node.module)
            names.update(f"{node.module}.{a.name}" for a in node.names)
    return names


def _module_files(module: str, root: Path) -> list[Path]:
    """Files that importing ``module`` executes: each package's ``__init__.py`` on the way, then the module."""
    parts, files = module.split("."), []
    for i in range(1, len(parts) + 1):
        base = root / "src" / Path(*parts[:i])
        if (base / "__init__.py").is_file():
            files.append(base / "__init__.py")
        elif base.with_suffix(".py").is_file():
            files.append(base.with_suffix(".py"))
    return files


def inputs(stage: Stage, root: str | Path = ".") -> tuple[str, ...]:
    """Everything a stage depends on: its artifact deps, its script, then the library files it imports."""
    out: dict[str, None] = dict.fromkeys(stage.deps)
    out[stage.script] = None
    out.update(dict.fromkeys(code_files(stage.script, root)))
    return tuple(out)


def check_names(stages: list[Stage]) -> None:
    """Raise ``ValueError`` on a stage name neither engine accepts, or on a duplicate."""
    seen: set[str] = set()
    for s in stages:
        if not NAME_RE.match(s.name):
            raise ValueError(f"stage name {s.name!r}: use letters, digits and _ only")
        if s.name in seen:
            raise ValueError(f"stage name {s.name!r}: defined twice")
        seen.add(s.name)
