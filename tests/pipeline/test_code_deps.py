"""The code deps of every stage are sound: they hold every library module the stage can import.

:func:`ddmrl.pipeline.dag.code_files` follows the imports at module level and leaves an import inside a function to
the stages that name its module in ``uses``. So every import inside a function of a file a stage runs is either of
a module the stage depends on anyway, or one of :data:`CONDITIONAL`, which says on which stages it runs; there the
module must be a dep. A new import inside a function that no stage's deps hold fails here until it moves to module
level, or a stage's ``uses`` names its module and it is added below. (The smoke test checks the same against the
modules each job really imported.)
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ddmrl import config
from ddmrl.augmenters import AUGMENTERS
from ddmrl.config.tasks import named_reward_models
from ddmrl.methods import METHODS
from ddmrl.objectives import OBJECTIVES
from ddmrl.pipeline import dag
from ddmrl.rewards import REWARD_MODELS

ROOT = Path(__file__).resolve().parents[2]
PROFILES = ("tiny", "smoke", "extended", "image", "rebrl_ablation", "paper_llada_math", "paper_mmada_geneval")
TRAINING_LOOP = ("grpo", "grpo_image")  # the stages that run ddmrl.training.grpo's loop


def _run(cfg, stage: dag.Stage):
    """The method section of a GRPO run or of its evaluation (None for other stages)."""
    runs = cfg.image_methods if "image" in stage.kind else cfg.methods
    return runs.get(dict(stage.wildcards).get("method", ""))


def _loads_a_real_model(cfg, stage: dag.Stage) -> bool:
    model = cfg.image.model if "image" in stage.kind else cfg.model
    return model.pretrained and stage.kind not in ("reward", "tables") and "mar" not in stage.kind


def _aux(cfg, stage: dag.Stage) -> str:
    run = _run(cfg, stage)
    return run.aux_policy.kind if run is not None else "none"


#: (file, module it imports inside a function) -> whether a stage may run that import (cfg, stage -> bool)
CONDITIONAL = {
    # a pointer to a real model (LLaDA, MMaDA, any HF masked LM), loaded by its adapter
    ("src/ddmrl/models/checkpoint.py", "ddmrl.models.adapters"): _loads_a_real_model,
    # the memory plan before a GRPO run books its GPUs (launch.gpu_memory_gib > 0)
    ("src/ddmrl/plan.py", "ddmrl.models.adapters"): lambda cfg, s: (
        s.kind in TRAINING_LOOP and bool(_run(cfg, s).launch.gpu_memory_gib)
    ),
    # and MMaDA's class from its checkout when the model planned is MMaDA's
    ("src/ddmrl/plan.py", "ddmrl.models.mmada"): lambda cfg, s: (
        s.kind in TRAINING_LOOP and bool(_run(cfg, s).launch.gpu_memory_gib)
    ),
    # LLaDA's sampler hands its steps to a learned unmasking policy (any but a schedule one); MaskGIT's asks a
    # schedule policy
    ("src/ddmrl/samplers/llada.py", "ddmrl.samplers.unmasking"): lambda cfg, s: (
        _aux(cfg, s) not in ("none", "schedule")
    ),
    ("src/ddmrl/samplers/maskgit.py", "ddmrl.aux_policies.schedule"): lambda cfg, s: _aux(cfg, s) == "schedule",
    # GenEval's summary of an image task's judged images (ddmrl.evaluation.evaluate_images, ddmrl.mar.evaluation)
    ("src/ddmrl/tasks/base.py", "ddmrl.geneval"): lambda cfg, s: s.kind.startswith(("evaluate_image", "evaluate_mar")),
    # a method's value model (Method.value_model: TraceRL's), its values, returns and loss in the loop: the method's
    # own objective module, a dep of its stages
    ("src/ddmrl/training/grpo.py", "ddmrl.objectives.value"): lambda cfg, s: (
        s.kind in TRAINING_LOOP and METHODS[_run(cfg, s).method].objective == "value_clip"
    ),
    ("src/ddmrl/methods/tracerl_value.py", "ddmrl.objectives.value"): lambda cfg, s: (
        s.kind in TRAINING_LOOP and METHODS[_run(cfg, s).method].objective == "value_clip"
    ),
    # a task's tokenizer helpers (Task.trace_tokens, for IGPO's hints): a text training stage, never the reward and
    # tables stages (they score texts) nor MAR's (its own image tokens)
    ("src/ddmrl/tasks/base.py", "ddmrl.models.tokenizer"): lambda cfg, s: (
        s.kind not in ("reward", "tables") and "mar" not in s.kind
    ),
}


def in_function_imports(file: str) -> set[str]:
    """The ddmrl modules (not names in them) ``file`` imports inside a function."""
    names = {m for m, inside in dag._ddmrl_imports(ROOT / file, ROOT) if inside}
    return {m for m in names if _is_module(m)}


def _is_module(name: str) -> bool:
    path = ROOT / "src" / Path(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def files_of(module: str) -> set[str]:
    return {f.relative_to(ROOT).as_posix() for f in dag._module_files(module, ROOT)}


@pytest.mark.parametrize("profile", PROFILES)
def test_every_module_a_stage_can_import_is_a_code_dep(profile):
    cfg = config.load(ROOT / "params.yaml", profile)
    for stage in dag.build(cfg):
        deps = set(dag.code(stage, ROOT))
        for file in sorted(f for f in deps if f.startswith("src/")):
            for module in sorted(in_function_imports(file)):
                if files_of(module) <= deps:
                    continue
                runs = CONDITIONAL.get((file, module))
                assert runs is not None, (
                    f"{stage.name}: {file} imports {module} inside a function, which is no code dep of the stage: "
                    "import it at module level, or name it in the uses of the stages that run it and in CONDITIONAL"
                )
                assert not runs(cfg, stage), f"{stage.name} runs {file}'s import of {module}: name it in its uses"


def test_every_conditional_import_is_in_the_code():
    for file, module in CONDITIONAL:
        assert module in in_function_imports(file), f"{file} no longer imports {module} inside a function"


@pytest.mark.parametrize("profile", PROFILES)
def test_the_members_a_stage_looks_up_are_code_deps_of_it(profile):
    """Registry members are imported by name when a stage looks them up, so no import of the stage's code names
    them: a GRPO run's method module, objective and augmenter (IGPO's inpainting), and the reward models its task's
    parameters name (GenEval's, HPS's scorer) must be deps of the stages that run them."""
    cfg = config.load(ROOT / "params.yaml", profile)
    for stage in dag.build(cfg):
        members = []
        wildcards = dict(stage.wildcards)
        run, task = _run(cfg, stage), wildcards.get("bench", wildcards.get("task"))  # the task it scores
        if stage.kind in TRAINING_LOOP and run is not None:
            method = METHODS[run.method]
            members += [METHODS.module(run.method), OBJECTIVES.module(method.objective)]
            members += [AUGMENTERS.module(method.augmenter)] if method.augmenter else []
        if task is not None and stage.kind.startswith(("grpo", "evaluate")):
            params = (cfg.image if "image" in stage.kind else cfg).task_params.get(task)
            members += [REWARD_MODELS.module(r) for r in named_reward_models(params)]
        deps = set(dag.code(stage, ROOT))
        for module in members:
            assert files_of(module) <= deps, f"{stage.name}: {module} is no code dep"
