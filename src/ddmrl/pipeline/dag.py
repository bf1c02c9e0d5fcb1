"""The pipeline DAG as data: one :class:`Stage` per job, built from params.yaml and run by two engines.

Every stage is of a :class:`Kind` (download, sft, rollout, reward, credit, grpo, evaluate, tables and the image
ones) whose jobs differ only in the values of its wildcards (method section, task, seed), taken from params.yaml's
lists: the sweep. Snakemake has one rule per kind (``workflow/rules/*.smk``), its wildcards constrained to the
sweep; ``python -m ddmrl.pipeline.export`` writes ``dvc.yaml`` with one entry per kind (per method section, whose
code differs) and lets DVC's ``matrix`` expand tasks and seeds from params.yaml at run time. Both engines run the
identical command line, :attr:`Stage.cmd`.

Path convention (:mod:`ddmrl.pipeline.layout`): every artifact lives under ``data/<stage that wrote it>/...``; a
path reaches its script only as a CLI flag.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import itertools
import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ddmrl.augmenters import AUGMENTERS
from ddmrl.aux_policies import AUX_POLICIES
from ddmrl.config import DEFAULT_PROFILE, MAR_TASK, Config, LaunchConfig, mar_run_name, run_name
from ddmrl.config.tasks import named_reward_models
from ddmrl.masking import VIEWS, view_sampler
from ddmrl.methods import METHODS
from ddmrl.models import FAMILIES
from ddmrl.objectives import ADVANTAGES, OBJECTIVES, STEP_ADVANTAGES, VIEW_ADVANTAGES, WEIGHTINGS
from ddmrl.pipeline import layout
from ddmrl.pipeline.layout import (
    IMAGE_BASE_DIR,
    IMAGE_TASKS_DIR,
    MAR_BASE,
    MAR_BASE_DIR,
    MAR_DIR,
    MAR_TASKS_DIR,
    start_model,
)
from ddmrl.rewards import REWARD_MODELS
from ddmrl.samplers import SAMPLERS
from ddmrl.tasks import TASKS

# grpo keys that choose which runs exist rather than how one run trains (only the tables stage reads them).
_GRPO_SWEEP_KEYS = ("methods", "seeds")

#: the packaged base models' index (:mod:`ddmrl.embedded`), a dep of the text download stage
PACKAGED_BASES = "src/ddmrl/embedded/bases.json"

NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

ArgValue = str | tuple[str, ...]


@dataclass(frozen=True)
class Stage:
    """One job of the pipeline, as both engines see it."""

    name: str  # letters, digits, _ only: the job's log is logs/<name>.log
    kind: str  # the Snakemake rule; DVC's entry (per method section where the code differs)
    wildcards: tuple[tuple[str, str], ...]  # (name, value) in the kind's order, e.g. (("task", "sudoku4"),)
    script: str  # e.g. "stages/grpo.py"
    args: tuple[tuple[str, ArgValue], ...]  # ordered CLI flags -> value(s); a tuple repeats the flag
    deps: tuple[str, ...]  # artifacts of earlier stages, then tracked inputs (the profile overlay)
    outs: tuple[str, ...] = ()  # output files
    dir_outs: tuple[str, ...] = ()  # output directories
    metrics: tuple[str, ...] = ()  # JSON metric files (outputs; DVC metrics)
    params: tuple[str, ...] = ()  # dotted params.yaml keys this stage reads (DVC params; Snakemake params)
    launcher: tuple[str, ...] = ("python",)  # words before the script, e.g. accelerate launch --config_file F ...
    resources: tuple[tuple[str, int | str], ...] = ()  # Snakemake resources of the job, e.g. (("gpu", 8),)
    # DVC's deps when they are not ``deps``: the directories holding them, so that dvc.yaml does not list the
    # sweep (the tables stage, whose inputs are every run's files)
    dvc_deps: tuple[str, ...] = ()
    # library modules the stage runs that only a registry lookup or an import inside a function reaches: its tasks,
    # sampler, objective (:func:`code_files`)
    uses: tuple[str, ...] = ()
    # library data files the stage reads (``src/ddmrl/...``): deps, as its library modules, where the workspace
    # holds the library's source (:func:`code`)
    data: tuple[str, ...] = ()

    @property
    def words(self) -> list[str]:
        """The command line, one word per item: ``python <script> --flag value ...`` (or ``accelerate launch ...
        <script> ...``); a tuple value repeats its flag."""
        words = [*self.launcher, self.script]
        for flag, value in self.args:
            for v in value if isinstance(value, tuple) else (value,):
                words += [flag, v]
        return words

    @property
    def cmd(self) -> str:
        """:attr:`words`, shell-quoted."""
        return shlex.join(self.words)

    @property
    def outputs(self) -> tuple[str, ...]:
        """Every path the stage writes."""
        return self.outs + self.dir_outs + self.metrics

    @property
    def plots(self) -> tuple[str, ...]:
        """Its curves (CSV, one row per step or rollout batch), among :attr:`outs`."""
        return tuple(o for o in self.outs if o.endswith("curve.csv"))


@dataclass(frozen=True)
class Dim:
    """A wildcard of a kind and the params.yaml list its values come from."""

    name: str  # method | task | seed
    key: str  # e.g. grpo.seeds: DVC's matrix interpolates ${grpo.seeds}
    code: bool = False  # the values select code (method sections): dvc.yaml has one entry per value


@dataclass(frozen=True)
class Kind:
    """A family of stages: one Snakemake rule, one builder called once per combination of its wildcards."""

    name: str
    dims: tuple[Dim, ...]
    builder: Callable[..., Stage]  # (factory, **wildcards) -> Stage


# ------------------------------------------------------------------------------------------------ building


def kinds(cfg: Config) -> list[Kind]:
    """The kinds of stages ``cfg`` runs, each after the kinds whose outputs it reads."""
    present = {
        "download": bool(cfg.tasks),
        "sft": bool(cfg.tasks) and bool(cfg.sft.max_steps),
        "download_image": bool(cfg.image.tasks),
        "rollout": bool(cfg.tasks),
        "reward": bool(cfg.tasks),
        "credit": layout.has_credit(cfg),
        "grpo": bool(cfg.tasks),
        "grpo_image": bool(cfg.image.tasks),
        "evaluate_base": bool(cfg.tasks),
        "evaluate_sft": bool(cfg.tasks) and bool(cfg.sft.max_steps),
        "evaluate": bool(cfg.tasks),
        "evaluate_image_base": bool(cfg.image.tasks),
        "evaluate_image": bool(cfg.image.tasks),
        "download_mar": bool(cfg.mar.methods),
        "grpo_mar": bool(cfg.mar.methods),
        "evaluate_mar_base": bool(cfg.mar.methods),
        "evaluate_mar": bool(cfg.mar.methods),
        "evaluate_image_bench_base": bool(cfg.image.eval_tasks),
        "evaluate_image_bench": bool(cfg.image.eval_tasks),
        "lm_eval_base": bool(cfg.tasks) and bool(cfg.lm_eval.tasks),
        "lm_eval_sft": bool(cfg.tasks) and bool(cfg.sft.max_steps) and bool(cfg.lm_eval.tasks),
        "lm_eval": bool(cfg.tasks) and bool(cfg.lm_eval.tasks),
        "tables": True,
    }
    return [k for k in all_kinds(cfg) if present[k.name]]


def all_kinds(cfg: Config) -> list[Kind]:
    """Every kind of stage, whether ``cfg`` runs it or not (the Snakemake rules)."""
    task, image_task = Dim("task", "tasks"), Dim("task", "image.tasks")
    run = (Dim("method", "grpo.methods", code=True), task, Dim("seed", "grpo.seeds"))
    image_seeds = Dim("seed", "image.seeds" if cfg.image.seeds else "grpo.seeds")
    image_run = (Dim("method", "image.methods", code=True), image_task, image_seeds)
    # one task; a dvc.yaml entry per section (its params key mar.sections.<section>), DVC expanding the seeds
    mar_run = (Dim("method", "mar.methods", code=True), Dim("seed", "mar.seeds"))
    bench = Dim("bench", "image.eval_tasks")
    per_base = (Dim("seed", "grpo.seeds"),) if layout.per_seed_bases(cfg) else ()  # one base model per GRPO seed
    return [
        Kind("download", per_base, download),
        Kind("sft", per_base, sft),
        Kind("download_image", (), download_image),
        Kind("rollout", (task,), rollout),
        Kind("reward", (task,), reward),
        Kind("credit", run[:2], credit),
        Kind("grpo", run, grpo),
        Kind("grpo_image", image_run, grpo_image),
        Kind("evaluate_base", (task, *per_base), evaluate_base),
        Kind("evaluate_sft", (task, *per_base), evaluate_sft),
        Kind("evaluate", run, evaluate),
        Kind("evaluate_image_base", (image_task,), evaluate_image_base),
        Kind("evaluate_image", image_run, evaluate_image),
        Kind("download_mar", (), download_mar),
        Kind("grpo_mar", mar_run, grpo_mar),
        Kind("evaluate_mar_base", (), evaluate_mar_base),
        Kind("evaluate_mar", mar_run, evaluate_mar),
        Kind("evaluate_image_bench_base", (bench,), evaluate_image_bench_base),
        Kind("evaluate_image_bench", (*image_run, bench), evaluate_image_bench),
        Kind("lm_eval_base", per_base, lm_eval_base),
        Kind("lm_eval_sft", per_base, lm_eval_sft),
        Kind("lm_eval", run, lm_eval),
        Kind("tables", (), tables),
    ]


def values(cfg: Config, dim: Dim) -> tuple[str, ...]:
    """The sweep's values of ``dim`` (as the strings that fill the wildcard)."""
    lists = {
        "tasks": cfg.tasks,
        "grpo.methods": cfg.text_methods,  # with the RebRL ablation rows when rebrl_ablation.enabled
        "grpo.seeds": cfg.grpo.seeds,
        "image.tasks": cfg.image.tasks,
        "image.methods": tuple(cfg.image_methods),
        "image.seeds": cfg.image.seeds,
        "mar.methods": cfg.mar.methods,
        "mar.seeds": cfg.mar.seeds,
        "image.eval_tasks": cfg.image.eval_tasks,
    }
    return tuple(str(v) for v in lists[dim.key])


def build(cfg: Config, params_file: str = "params.yaml") -> list[Stage]:
    """Every stage of the pipeline for ``cfg``, each after the stages whose outputs it reads.

    ``params_file`` is the name the commands pass as ``--params`` (relative to the repository root).
    """
    new = StageFactory(cfg, params_file)
    stages = []
    for kind in kinds(cfg):
        text_run = kind.dims[:1] == (Dim("method", "grpo.methods", code=True),)
        for combo in itertools.product(*(values(cfg, d) for d in kind.dims)):
            wildcards = dict(zip((d.name for d in kind.dims), combo, strict=True))
            if not text_run or cfg.runs_on(wildcards["method"], wildcards["task"]):  # a section's own tasks
                stages.append(kind.builder(new, **wildcards))
    return stages


def pattern(cfg: Config, kind: str, params_file: str = "params.yaml") -> Stage:
    """The stage of ``kind`` with ``{wildcard}`` in place of every value: Snakemake's output and log patterns."""
    k = next(k for k in all_kinds(cfg) if k.name == kind)
    return k.builder(StageFactory(cfg, params_file), **{d.name: "{" + d.name + "}" for d in k.dims})


class StageFactory:
    """Fills in what every stage shares: ``--params``, the profile overlay dep, the params present."""

    def __init__(self, cfg: Config, params_file: str) -> None:
        self.cfg, self.params_file = cfg, params_file
        #: the held-out sets every text stage reads: the (first) download stage's
        self.tasks = layout.tasks_dir(layout.base_seeds(cfg)[0])
        self.overlay = (f"profiles/{cfg.profile}.yaml",) if cfg.profile != DEFAULT_PROFILE else ()

    def __call__(
        self,
        kind: str,
        name: str,
        args: dict[str, ArgValue],
        deps: tuple[str, ...],
        params: tuple[str, ...],
        wildcards: dict[str, str] | None = None,
        script: str = "",
        **kw: Any,
    ) -> Stage:
        return Stage(
            name=name,
            kind=kind,
            wildcards=tuple((wildcards or {}).items()),
            script=script or f"stages/{kind}.py",
            args=(("--params", self.params_file), *args.items()),
            deps=deps + self.overlay,
            params=_present(self.cfg.raw, params),
            **kw,
        )

    def uses(
        self,
        tasks: tuple[str, ...] = (),
        sampler: str = "",
        section: str = "",
        image: bool = False,
        aux: str = "",
        methods: tuple[str, ...] = (),
        training: bool = False,
    ) -> tuple[str, ...]:
        """The modules a stage runs that no static import names: its tasks', their reward models' and its sampler's
        (registry members), the module, objective and view sampler of method ``section`` (and its augmenter, for its
        ``training`` run) and the modules of ``methods``, the auxiliary policy of kind ``aux`` and the sampler that
        consults it, the hub, the model adapters and the family's module for a real model, GenEval's evaluator for an
        image task. (Validating params.yaml imports every section's method module and every named task's module,
        with what it imports; only a stage's own ones are its deps: another method's or task's module decides
        nothing a stage writes.)"""
        cfg, modules = self.cfg, []
        modules += [TASKS.module(t) for t in tasks if t in TASKS]  # not a pattern's {task}
        task_params = (cfg.image if image else cfg).task_params
        rewards = [r for t in tasks for r in named_reward_models(task_params.get(t))]  # the tasks' reward models
        modules += [REWARD_MODELS.module(r) for r in rewards if r in REWARD_MODELS]
        modules += [SAMPLERS.module(sampler)] if sampler else []
        run = (cfg.image_methods if image else cfg.methods).get(section)
        if run is not None:
            method = METHODS[run.method]
            modules += [METHODS.module(run.method), OBJECTIVES.module(method.objective)]
            modules += [AUGMENTERS.module(method.augmenter)] if training and method.augmenter else []
            modules += [VIEWS.module(run.remasking)] if run.remasking else []  # its view sampler (maybe its own)
            # and its weighting and advantages (maybe its own)
            modules += [WEIGHTINGS.module(method.weighting), ADVANTAGES.module(run.scale_rewards)]
            modules += [STEP_ADVANTAGES.module(method.step_advantage)] if method.step_advantage else []
            modules += [VIEW_ADVANTAGES.module(method.view_advantage)] if method.view_advantage else []
        modules += [METHODS.module(m) for m in methods]
        if aux and aux != "none":
            modules.append(AUX_POLICIES.module(aux))
            # LLaDA's sampler hands its steps to any policy but a schedule one (MaskGIT's), one outside the package too
            modules += ["ddmrl.samplers.unmasking"] if aux != "schedule" else []
        model = cfg.image.model if image else cfg.model
        if model.pretrained:
            modules += ["ddmrl.hub", "ddmrl.models.adapters", FAMILIES.module(model.kind)]
        if image:
            modules.append("ddmrl.geneval")
        return tuple(m for m in dict.fromkeys(modules) if m)

    def launch(self, section: str, image: bool = False) -> dict[str, Any]:
        """``launcher`` and ``resources`` of a GRPO run of ``section`` (see :func:`launch`)."""
        runs = self.cfg.image_methods if image else self.cfg.methods
        return launch(runs[section].launch) if section in runs else {}


def log_dir(stage_name: str) -> str:
    """Where a training stage's experiment trackers write (TensorBoard, DVCLive): beside its log, git-ignored and,
    like the checkpoints, no output of either engine."""
    return f"logs/{stage_name}"


def checkpoints(stage_name: str) -> str:
    """Where a training stage keeps resumable checkpoints: deliberately NOT an output of either engine, so that
    Snakemake's removal of incomplete outputs and DVC's removal of outputs before a run leave it alone."""
    return f"data/checkpoints/{stage_name}"


def download(new: StageFactory, seed: str | None = None) -> Stage:
    """The text base model and tasks: embedded profiles pre-train it (or take the package's, ``download.packaged``),
    paper profiles fetch it. With ``download.base_per_seed`` one per GRPO ``seed``, pre-trained with that seed, each
    with its own copy of the held-out sets (the same items: they follow the global seed)."""
    name = "download" if seed is None else f"download_s{seed}"
    root = layout.download_root(seed)
    stage = _download(new, name, root, layout.tasks_dir(seed), layout.base_dir(seed), kind="download")
    if seed is None:
        return stage
    return dataclasses.replace(stage, args=(*stage.args, ("--seed", seed)), wildcards=(("seed", seed),))


def download_image(new: StageFactory) -> Stage:
    """The text-to-image branch's own base model and tasks. Like every stage it computes on one thread
    (:mod:`ddmrl.numerics`), beside the text branch's jobs."""
    return _download(new, "download_image", "data/download/image", IMAGE_TASKS_DIR, IMAGE_BASE_DIR)


def _download(new: StageFactory, name: str, root: str, tasks: str, base: str, kind: str = "") -> Stage:
    image = name == "download_image"
    branch, prefix = (new.cfg.image, "image.") if image else (new.cfg, "")
    params = tuple(f"{prefix}{k}" for k in ("tasks", "task_params", "model", "download"))
    params += ("image.cond_dropout_prob", "image.eval_tasks") if image else ()
    task_names = (*branch.tasks, *new.cfg.image.eval_tasks) if image else branch.tasks
    metrics, curve = f"{root}/metrics.json", f"{root}/curve.csv"
    extra = {"--modality": "image"} if image else {}
    manifests = (f"{root}/manifests",) if branch.model.pretrained else ()  # paper profiles: the downloads' checksums
    if manifests:
        extra["--manifests"] = manifests[0]
    configs = () if branch.model.pretrained else (f"{root}/config.yaml",)  # the pre-training's resolved config
    # the packaged base models' index (their sha256): the text base model may come from it (ddmrl.embedded)
    packaged = () if image or branch.model.pretrained or not branch.download.packaged else (PACKAGED_BASES,)
    if configs:
        extra["--config-out"] = configs[0]
    return new(
        kind or name, name,
        {"--tasks-out": tasks, "--model-out": base, "--metrics": metrics, "--curve": curve,
         "--checkpoints": checkpoints(name), "--log-dir": log_dir(name), **extra},
        deps=(), params=("profile", "seed", *params), script="stages/download.py", data=packaged,
        outs=(curve, *configs), dir_outs=(tasks, base, *manifests), metrics=(metrics,),
        uses=new.uses(task_names, image=image),
    )  # fmt: skip


def launch(cfg: LaunchConfig) -> dict[str, Any]:
    """``launcher`` and ``resources`` of a training stage: ``python`` (the default, one process), or
    ``accelerate launch --config_file F --num_processes N`` with N GPUs requested from the scheduler, or on
    ``num_machines`` M > 1 nodes ``srun ... python -m ddmrl.training.nodes ...`` (one launcher per node) in a job of M
    nodes with N / M GPUs each."""
    if cfg.launcher == "python":
        return {}
    words = ("--config_file", cfg.config_file, "--num_processes", str(cfg.num_processes))
    if cfg.num_machines == 1:
        return {"launcher": ("accelerate", "launch", *words), "resources": (("gpu", cfg.num_processes),)}
    # several nodes: one launcher per node through srun (ddmrl.training.nodes), in one SLURM job of that many nodes
    # whose command runs srun itself (the SLURM executor plugin's mpi resource; tasks_per_gpu 0 keeps the plugin
    # from turning `tasks` into --ntasks-per-gpu), with num_processes / num_machines GPUs on each (--gres, per node)
    m = str(cfg.num_machines)
    srun = ("srun", "--nodes", m, "--ntasks", m, "--ntasks-per-node", "1", "--kill-on-bad-exit=1")
    per_node = cfg.num_processes // cfg.num_machines
    resources = (("nodes", cfg.num_machines), ("tasks", cfg.num_machines), ("mpi", "srun"), ("tasks_per_gpu", 0),
                 ("gres", f"gpu:{per_node}"))  # fmt: skip
    node = ("python", "-m", "ddmrl.training.nodes", *words, "--num_machines", m)
    return {"launcher": (*srun, *node), "resources": resources}


def sft(new: StageFactory, seed: str | None = None) -> Stage:
    """One thread: the embedded SFT is 30 short steps, and runs beside the image branch's pre-training. With
    ``download.base_per_seed`` one per GRPO ``seed``, from that seed's base model."""
    name = "sft" if seed is None else f"sft_s{seed}"
    model, base = layout.sft_dir(seed), layout.base_dir(seed)
    root = model.removesuffix("/model")
    metrics, curve, resolved = f"{root}/metrics.json", f"{root}/curve.csv", f"{root}/config.yaml"
    return new(
        "sft", name,
        {"--tasks": new.tasks, "--model": base, "--model-out": model, "--metrics": metrics, "--curve": curve,
         "--config-out": resolved, "--checkpoints": checkpoints(name), "--log-dir": log_dir(name)},
        deps=(new.tasks, base), params=("profile", "seed", "tasks", "sft"),
        outs=(curve, resolved), dir_outs=(model,), metrics=(metrics,), uses=new.uses(new.cfg.tasks),
        wildcards={} if seed is None else {"seed": seed}, **launch(new.cfg.sft.launch),
    )  # fmt: skip


def rollout(new: StageFactory, task: str) -> Stage:
    """G samples per prompt from the model RL starts from (the first GRPO seed's, when each has its own)."""
    start, model = layout.first_start_model(new.cfg)
    out = layout.rollouts(start, task)
    return new(
        "rollout", f"rollout_{start}_{task}",
        {"--tasks": new.tasks, "--model": model, "--task": task, "--out": out},
        deps=(new.tasks, model), params=("profile", "seed", "rollout"), outs=(out,), wildcards={"task": task},
        uses=new.uses((task,), new.cfg.rollout.sampler.name),
    )  # fmt: skip


def reward(new: StageFactory, task: str) -> Stage:
    start = layout.first_start_model(new.cfg)[0]
    root = layout.reward_dir(start)
    rollouts, out, metrics = layout.rollouts(start, task), layout.scored(root, task), layout.reward_metrics(root, task)
    return new(
        "reward", f"reward_{start}_{task}",
        {"--tasks": new.tasks, "--task": task, "--rollouts": rollouts, "--out": out, "--metrics": metrics},
        deps=(new.tasks, rollouts), params=("profile", "tasks"), outs=(out,), metrics=(metrics,),
        wildcards={"task": task}, uses=new.uses((task,)),
    )  # fmt: skip


def credit(new: StageFactory, method: str, task: str) -> Stage:
    """Per-token credit of one method section on the scored rollouts of the start model (RebRL's Eq. 10, measured)."""
    start, model = layout.first_start_model(new.cfg)
    rollouts, out = layout.scored(layout.reward_dir(start), task), layout.credit(layout.CREDIT_DIR, method, task)
    section = new.cfg.methods.get(method)  # None in a pattern ({method})
    # methods on stored states sample the rollouts again with their states recorded, with the rollout sampler
    resample = section is not None and view_sampler(section.remasking).states
    return new(
        "credit", f"credit_{method}_{task}",
        {"--tasks": new.tasks, "--model": model, "--task": task, "--method": method, "--rollouts": rollouts,
         "--out": out},
        deps=(new.tasks, model, rollouts),
        params=("profile", "seed", *grpo_keys(new.cfg), f"methods.{method}", *(("rollout",) if resample else ())),
        outs=(out,), wildcards={"method": method, "task": task},
        uses=new.uses((task,), new.cfg.rollout.sampler.name if resample else "", section=method),
    )  # fmt: skip


def grpo(new: StageFactory, method: str, task: str, seed: str) -> Stage:
    """Text runs start from ``start_model`` (the SFT model in the embedded default; with ``download.base_per_seed``
    the one of the run's seed)."""
    start = start_model(new.cfg, seed if layout.per_seed_bases(new.cfg) else None)[1]
    return _grpo(new, method, task, seed, new.tasks, start, image=False)


def grpo_image(new: StageFactory, method: str, task: str, seed: str) -> Stage:
    """Image runs start from the image base model (as RebRL and MaskGRPO start from MMaDA-8B-Base)."""
    return _grpo(new, method, task, seed, IMAGE_TASKS_DIR, IMAGE_BASE_DIR, image=True)


def _grpo(new, method, task, seed, tasks, start, image) -> Stage:
    run = run_name(method, task, seed)
    root = layout.run_dir(layout.GRPO_DIR, run)
    model, metrics, curve = f"{root}/model", f"{root}/metrics.json", layout.curve(layout.GRPO_DIR, run)
    overrides = ("image.grpo", f"image.method_overrides.{method}") if image else ()
    section = (new.cfg.image_methods if image else new.cfg.methods).get(method)  # None in a pattern ({method})
    sampler, aux = (section.sampler.name, section.aux_policy.kind) if section is not None else ("", "")
    resolved = f"{root}/config.yaml"  # the run's hyperparameters after profile, method and overrides
    return new(
        "grpo_image" if image else "grpo", f"grpo_{run}",
        {"--run": run, "--tasks": tasks, "--model": start, "--model-out": model,
         "--metrics": metrics, "--curve": curve, "--config-out": resolved,
         "--checkpoints": checkpoints(f"grpo_{run}"), "--log-dir": log_dir(f"grpo_{run}")},
        deps=(tasks, start), params=("profile", "seed", *grpo_keys(new.cfg), f"methods.{method}", *overrides),
        outs=(curve, resolved), dir_outs=(model,), metrics=(metrics,),
        wildcards={"method": method, "task": task, "seed": seed}, script="stages/grpo.py",
        uses=new.uses((task,), sampler, method, image, aux, training=True), **new.launch(method, image),
    )  # fmt: skip


def evaluate_base(new: StageFactory, task: str, seed: str | None = None) -> Stage:
    """The base model (of GRPO seed ``seed``, with ``download.base_per_seed``) on a task."""
    wildcards = {"task": task} | ({} if seed is None else {"seed": seed})
    return _evaluate(new, "evaluate_base", layout.model_name("base", seed), layout.base_dir(seed), wildcards)


def evaluate_sft(new: StageFactory, task: str, seed: str | None = None) -> Stage:
    wildcards = {"task": task} | ({} if seed is None else {"seed": seed})
    return _evaluate(new, "evaluate_sft", layout.model_name("sft", seed), layout.sft_dir(seed), wildcards)


def evaluate(new: StageFactory, method: str, task: str, seed: str) -> Stage:
    """A GRPO run's policy on the run's own task."""
    run = run_name(method, task, seed)
    model = layout.run_dir(layout.GRPO_DIR, run) + "/model"
    return _evaluate(new, "evaluate", run, model, {"method": method, "task": task, "seed": seed})


def evaluate_image_base(new: StageFactory, task: str) -> Stage:
    return _evaluate(new, "evaluate_image_base", "base", IMAGE_BASE_DIR, {"task": task})


def evaluate_image(new: StageFactory, method: str, task: str, seed: str) -> Stage:
    run = run_name(method, task, seed)
    model = layout.run_dir(layout.GRPO_DIR, run) + "/model"
    return _evaluate(new, "evaluate_image", run, model, {"method": method, "task": task, "seed": seed})


def evaluate_image_bench_base(new: StageFactory, bench: str) -> Stage:
    """The image base model on a benchmark of ``image.eval_tasks`` (HPS, DPG-Bench)."""
    return _evaluate(new, "evaluate_image_bench_base", "base", IMAGE_BASE_DIR, {"bench": bench})


def evaluate_image_bench(new: StageFactory, method: str, task: str, seed: str, bench: str) -> Stage:
    """A text-to-image run's policy on a benchmark of ``image.eval_tasks``."""
    run = run_name(method, task, seed)
    model = layout.run_dir(layout.GRPO_DIR, run) + "/model"
    wildcards = {"method": method, "task": task, "seed": seed, "bench": bench}
    return _evaluate(new, "evaluate_image_bench", run, model, wildcards)


def _evaluate(new: StageFactory, kind: str, model: str, model_dir: str, wildcards: dict[str, str]) -> Stage:
    """``model`` is ``base``, ``sft`` or a run name, evaluated on its ``task`` (or on the ``bench`` wildcard's
    benchmark). Image tasks also write their images (GenEval's folder layout, ``<task>/<NNNNN>/metadata.jsonl``,
    ``samples/<k>.png``; a benchmark's own) and the judge's results JSONL."""
    task, root = wildcards.get("bench", wildcards.get("task")), layout.EVALUATE_DIR
    image = kind.startswith("evaluate_image")
    run = (new.cfg.image_methods if image else new.cfg.methods).get(wildcards.get("method", ""))
    aux = run.aux_policy.kind if run is not None else ""  # a policy saved with the model samples with it
    metrics = layout.evaluation(root, model, task)
    generations = metrics.removesuffix(".json") + ".jsonl"
    named_by_task = kind in ("evaluate_base", "evaluate_sft", "evaluate_image_base") or "bench" in wildcards
    name = f"evaluate_{model}_{task}" if named_by_task else f"evaluate_{model}"
    args = {"--tasks": new.tasks, "--model": model_dir, "--task": task, "--name": model,
            "--generations": generations, "--metrics": metrics}  # fmt: skip
    if not image:
        return new(
            kind, name, args, deps=(new.tasks, model_dir), params=("profile", "evaluate"), outs=(generations,),
            metrics=(metrics,), wildcards=wildcards, script="stages/evaluate.py",
            uses=new.uses((task,), new.cfg.evaluate.sampler.name, aux=aux),
        )  # fmt: skip
    images, results = layout.image_folder(root, model, task), layout.image_results(root, model, task)
    args |= {"--tasks": IMAGE_TASKS_DIR, "--images": images, "--results": results}
    return new(
        kind, name, args, deps=(IMAGE_TASKS_DIR, model_dir), params=("profile", "image.evaluate"),
        outs=(generations, results), dir_outs=(images,), metrics=(metrics,), wildcards=wildcards,
        script="stages/evaluate.py", uses=new.uses((task,), new.cfg.image.evaluate.sampler.name, image=True, aux=aux),
    )  # fmt: skip


def lm_eval_base(new: StageFactory, seed: str | None = None) -> Stage:
    """lm-evaluation-harness on the base model (of GRPO seed ``seed``, with ``download.base_per_seed``)."""
    wildcards = {} if seed is None else {"seed": seed}
    return _lm_eval(new, "lm_eval_base", layout.model_name("base", seed), layout.base_dir(seed), wildcards)


def lm_eval_sft(new: StageFactory, seed: str | None = None) -> Stage:
    wildcards = {} if seed is None else {"seed": seed}
    return _lm_eval(new, "lm_eval_sft", layout.model_name("sft", seed), layout.sft_dir(seed), wildcards)


def lm_eval(new: StageFactory, method: str, task: str, seed: str) -> Stage:
    """lm-evaluation-harness on a GRPO run's policy (its adapters merged when it trained LoRA)."""
    run = run_name(method, task, seed)
    model = layout.run_dir(layout.GRPO_DIR, run) + "/model"
    return _lm_eval(new, "lm_eval", run, model, {"method": method, "task": task, "seed": seed})


def _lm_eval(new: StageFactory, kind: str, model: str, model_dir: str, wildcards: dict[str, str]) -> Stage:
    """``lm_eval.tasks`` of lm-evaluation-harness on ``model`` (``ddmrl.lmeval``); lm-eval's results JSON in
    ``data/lm_eval/<model>/results.json``, the tree beside ddmrl's ``data/evaluate/<model>/``. The folder of its YAML
    tasks is a dep."""
    out = layout.lm_eval_results(model)
    include = new.cfg.lm_eval.include_path
    return new(
        kind, f"lm_eval_{model}", {"--model": model_dir, "--name": model, "--out": out},
        deps=(model_dir, *((include,) if include else ())), params=("profile", "seed", "lm_eval", "evaluate.sampler"),
        metrics=(out,), wildcards=wildcards, script="stages/lm_eval.py",
        uses=new.uses(sampler=new.cfg.evaluate.sampler.name),
    )  # fmt: skip


def download_mar(new: StageFactory) -> Stage:
    """The MAR branch's base model (TinyMAR pre-trained on geneval-mini) and the image branch's held-out prompts."""
    metrics, curve, config = f"{MAR_DIR}/metrics.json", f"{MAR_DIR}/curve.csv", f"{MAR_DIR}/config.yaml"
    return new(
        "download_mar", "download_mar",
        {"--tasks-out": MAR_TASKS_DIR, "--model-out": MAR_BASE_DIR, "--metrics": metrics, "--curve": curve,
         "--config-out": config, "--checkpoints": checkpoints("download_mar"), "--log-dir": log_dir("download_mar")},
        deps=(), params=("profile", "seed", "image.task_params", "image.download", "mar.model", "mar.pretrain"),
        outs=(curve, config), dir_outs=(MAR_TASKS_DIR, MAR_BASE_DIR), metrics=(metrics,),
        uses=new.uses((MAR_TASK,)),
    )  # fmt: skip


def grpo_mar(new: StageFactory, method: str, seed: str) -> Stage:
    """A MAR GRPO run (plain or MAR-GRPO, as its section of ``mar.sections`` says) from the MAR base model."""
    run = mar_run_name(method, MAR_TASK, seed)
    root = layout.run_dir(layout.GRPO_DIR, run)
    model, metrics, curve = f"{root}/model", f"{root}/metrics.json", layout.curve(layout.GRPO_DIR, run)
    resolved = f"{root}/config.yaml"
    return new(
        "grpo_mar", f"grpo_{run}",
        {"--run": run, "--tasks": MAR_TASKS_DIR, "--model": MAR_BASE_DIR, "--model-out": model,
         "--metrics": metrics, "--curve": curve, "--config-out": resolved,
         "--checkpoints": checkpoints(f"grpo_{run}"), "--log-dir": log_dir(f"grpo_{run}")},
        deps=(MAR_TASKS_DIR, MAR_BASE_DIR), params=("profile", "seed", "mar.grpo", f"mar.sections.{method}"),
        outs=(curve, resolved), dir_outs=(model,), metrics=(metrics,), wildcards={"method": method, "seed": seed},
        uses=new.uses((MAR_TASK,)),
    )  # fmt: skip


def evaluate_mar_base(new: StageFactory) -> Stage:
    return _evaluate_mar(new, "evaluate_mar_base", MAR_BASE, MAR_BASE_DIR, {})


def evaluate_mar(new: StageFactory, method: str, seed: str) -> Stage:
    run = mar_run_name(method, MAR_TASK, seed)
    model = layout.run_dir(layout.GRPO_DIR, run) + "/model"
    return _evaluate_mar(new, "evaluate_mar", run, model, {"method": method, "seed": seed})


def _evaluate_mar(new: StageFactory, kind: str, model: str, model_dir: str, wildcards: dict[str, str]) -> Stage:
    """GenEval's protocol on geneval-mini for a MAR model, in the image rows' layout (:func:`_evaluate`)."""
    root = layout.EVALUATE_DIR
    metrics = layout.evaluation(root, model, MAR_TASK)
    generations = metrics.removesuffix(".json") + ".jsonl"
    images, results = layout.image_folder(root, model, MAR_TASK), layout.image_results(root, model, MAR_TASK)
    return new(
        kind, f"evaluate_{model}",
        {"--tasks": MAR_TASKS_DIR, "--model": model_dir, "--name": model, "--generations": generations,
         "--metrics": metrics, "--images": images, "--results": results},
        deps=(MAR_TASKS_DIR, model_dir), params=("profile", "seed", "image.evaluate", "mar.evaluate"),
        outs=(generations, results), dir_outs=(images,), metrics=(metrics,), wildcards=wildcards,
        script="stages/evaluate_mar.py", uses=new.uses((MAR_TASK,)),
    )  # fmt: skip


#: what the tables stage writes (``data/tables/<name>``), by branch; the stage's own outputs
TABLES_TEXT = (
    "text_table.md", "text_table.csv", "text_table.html", "results_long.csv", "sft_rollouts.md", "sft_rollouts.csv",
    "reward_curves.png", "kl_curves.png", "loss_curves.png", "clip_ratio_curves.png", "levels.md",
)  # fmt: skip
TABLES_CREDIT = ("credit.csv", "credit_by_reveal_step.png", "credit_summary.csv", "credit_summary.md")
TABLES_PASS_AT_K = ("pass_at_k.md", "pass_at_k.csv")  # with evaluate.pass_at_k.n > 0
TABLES_LM_EVAL = ("lm_eval.md", "lm_eval.csv")  # with lm_eval.tasks
TABLES_IMAGE = (
    "image_table.md", "image_table.csv", "image_table.html", "image_results_long.csv", "image_reward_curves.png",
    "image_kl_curves.png", "image_loss_curves.png", "image_clip_ratio_curves.png",
)  # fmt: skip
#: written whatever the branches: intervals of every table cell, RebRL minus UniGRPO, samples to UniGRPO's reward
TABLES_COMPARISONS = ("intervals.csv", "rebrl_vs_unigrpo.md", "samples_to_reward.csv", "samples_to_reward.md")
TABLES_METRICS, TABLES_CURVES, CONTACT_SHEETS = "metrics.json", "curves.csv", "contact_sheets"


def tables(new: StageFactory) -> Stage:
    """Aggregates every evaluation, GRPO curve, rollout score and credit measurement. Its flags name directories
    and it finds the files by :func:`ddmrl.pipeline.layout.tables_inputs`, so its command does not change with the
    sweep; Snakemake's inputs are those files, DVC's deps the directories."""
    cfg, out = new.cfg, layout.TABLES_DIR
    reads = layout.tables_inputs(cfg)
    args = {"--evaluate": layout.EVALUATE_DIR, "--grpo": layout.GRPO_DIR}
    if cfg.tasks:
        args["--reward"] = layout.reward_dir(layout.first_start_model(cfg)[0])
    if layout.has_credit(cfg):
        args["--credit"] = layout.CREDIT_DIR
    if reads["lm_eval"]:
        args["--lm-eval"] = layout.LM_EVAL_DIR
    names = (*TABLES_TEXT,) if cfg.tasks else ()
    names += ("base_models.md",) if cfg.tasks and layout.per_seed_bases(cfg) else ()
    names += TABLES_CREDIT if layout.has_credit(cfg) else ()
    names += TABLES_PASS_AT_K if cfg.tasks and cfg.evaluate.pass_at_k.n else ()
    names += TABLES_LM_EVAL if reads["lm_eval"] else ()
    names += (*TABLES_IMAGE,) if cfg.image.tasks else ()
    return new(
        "tables", "tables", {**args, "--out": out}, deps=tuple(p for v in reads.values() for p in v),
        dvc_deps=tuple(args.values()),
        params=("profile", "grpo.methods", "grpo.seeds", "tasks", "image.tasks", "image.methods", "image.seeds",
                "mar.methods", "mar.seeds", "rebrl_ablation", "image.eval_tasks", "evaluate.pass_at_k",
                "evaluate.sampled_temperature"),
        outs=tuple(f"{out}/{n}" for n in (*names, *TABLES_COMPARISONS, TABLES_CURVES)),
        dir_outs=(f"{out}/{CONTACT_SHEETS}",) if cfg.image.tasks else (), metrics=(f"{out}/{TABLES_METRICS}",),
        # the per-item scores of the intervals come from each text task's scorer; row labels from the methods
        uses=new.uses(cfg.tasks, methods=row_methods(cfg)),
    )  # fmt: skip


def row_methods(cfg: Config) -> tuple[str, ...]:
    """The methods of the tables' rows (their labels): every run section's."""
    sections = [*(cfg.methods[m] for m in cfg.text_methods if m in cfg.methods), *cfg.image_methods.values()]
    return tuple(dict.fromkeys(run.method for run in sections))


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


def code_files(script: str | Path, root: str | Path = ".", uses: tuple[str, ...] = ()) -> tuple[str, ...]:
    """The library files (``src/ddmrl/**.py``) a stage runs: the modules ``script`` and the modules it ``uses``
    import, directly or through other library modules. Found by parsing ``import`` statements, so the deps follow
    the code: editing the tables code does not retrain a policy, nor one objective the runs of another.

    An import at module level always runs, so its module is always a dep; an import inside a function runs only on
    some paths (a pointer to a real model, an image task, an auxiliary policy), so its module is a dep only of the
    stages that name it in ``uses`` (as they name their registry members: tasks, sampler, objective). A package
    import includes its ``__init__.py`` files.
    """
    root = Path(root)
    seen: set[Path] = set()
    todo = [root / script, *(f for m in uses for f in _module_files(m, root))]
    seen.update(todo[1:])
    while todo:
        for module, in_function in _ddmrl_imports(todo.pop(), root):
            if in_function and module not in uses:
                continue
            for file in _module_files(module, root):
                if file not in seen:
                    seen.add(file)
                    todo.append(file)
    return tuple(sorted(f.relative_to(root).as_posix() for f in seen))


def _ddmrl_imports(path: Path, root: Path) -> frozenset[tuple[str, bool]]:
    """(dotted name, inside a function) of the ddmrl modules a file imports: ``from ddmrl.x import y`` gives
    ddmrl.x and ddmrl.x.y (a module when y is one)."""
    return _parse_imports(str(path), path.stat().st_mtime_ns)


@functools.lru_cache(maxsize=1024)
def _parse_imports(path: str, _mtime_ns: int) -> frozenset[tuple[str, bool]]:
    names: set[tuple[str, bool]] = set()

    def visit(node: ast.AST, in_function: bool) -> None:
        if isinstance(node, ast.Import):
            names.update((a.name, in_function) for a in node.names if a.name.split(".")[0] == "ddmrl")
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "ddmrl":
            names.add((node.module, in_function))
            names.update((f"{node.module}.{a.name}", in_function) for a in node.names)
        if isinstance(node, ast.If) and ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING"):
            for child in node.orelse:  # imports for type checkers only never run
                visit(child, in_function)
            return
        inner = in_function or isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
        for child in ast.iter_child_nodes(node):
            visit(child, inner)

    visit(ast.parse(Path(path).read_text(), filename=path), False)
    return frozenset(names)


@functools.lru_cache(maxsize=4096)
def _module_files(module: str, root: Path) -> tuple[Path, ...]:
    """Files that importing ``module`` executes: each package's ``__init__.py`` on the way, then the module."""
    parts, files = module.split("."), []
    where = root / "src" if parts[0] == "ddmrl" else root  # a researcher's own member: a module in the workspace
    for i in range(1, len(parts) + 1):
        base = where / Path(*parts[:i])
        if (base / "__init__.py").is_file():
            files.append(base / "__init__.py")
        elif base.with_suffix(".py").is_file():
            files.append(base.with_suffix(".py"))
    return tuple(files)


def inputs(stage: Stage, root: str | Path = ".") -> tuple[str, ...]:
    """Everything a stage depends on: its artifact deps, its script, then the library files it runs."""
    return (*stage.deps, *code(stage, root))


def code(stage: Stage, root: str | Path = ".") -> tuple[str, ...]:
    """The stage's script, then the library files it runs (:func:`code_files`) and the library data it reads
    (present where the workspace holds the library's source, as its modules are)."""
    data = tuple(f for f in stage.data if (Path(root) / f).is_file())
    return (stage.script, *code_files(stage.script, root, stage.uses), *data)


def check_names(stages: list[Stage]) -> None:
    """Raise ``ValueError`` on a stage name neither engine accepts, or on a duplicate."""
    seen: set[str] = set()
    for s in stages:
        if not NAME_RE.match(s.name):
            raise ValueError(f"stage name {s.name!r}: use letters, digits and _ only")
        if s.name in seen:
            raise ValueError(f"stage name {s.name!r}: defined twice")
        seen.add(s.name)
