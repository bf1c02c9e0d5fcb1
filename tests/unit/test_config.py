"""params.yaml parsing and validation (ddmrl.config): one-line errors that name the key."""

from __future__ import annotations

import ast
import copy
import dataclasses
import inspect
import shutil
import subprocess
import sys
from pathlib import Path
from typing import get_args

import pytest
import yaml

from ddmrl.config import (
    ConfigError,
    GRPOConfig,
    HubItem,
    ModelSpec,
    SamplerConfig,
    TrainConfig,
    docs,
    load,
)
from ddmrl.config._base import fields_of
from ddmrl.config.root import Config
from ddmrl.config.tasks import reward_models, task_kind, tasks_of
from ddmrl.methods import METHODS
from ddmrl.pipeline.dag import code_files
from ddmrl.rewards import REWARD_MODELS
from ddmrl.rewards.geneval_bridge import GenEvalEnv
from ddmrl.rewards.interface import ImageRewardModel
from ddmrl.tasks import TASKS, make_task
from ddmrl.tasks.geneval import GenEvalEvaluator

REPO = Path(__file__).resolve().parents[2]


def write(tmp_path: Path, text: str, name: str = "params.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def refused(tmp_path: Path, text: str) -> str:
    """The ConfigError message of loading ``text``; it must be a single line."""
    with pytest.raises(ConfigError) as info:
        load(write(tmp_path, text))
    msg = str(info.value)
    assert "\n" not in msg, f"not one line: {msg!r}"
    return msg


def test_repo_params_load_and_resolve_every_method():
    cfg = load(REPO / "params.yaml")
    assert cfg.profile == "tiny"
    assert set(cfg.grpo.methods) | set(cfg.rebrl_ablation.methods) <= set(cfg.methods)  # sections may sit unused
    for m in cfg.methods.values():
        assert isinstance(m, GRPOConfig) and m.method in METHODS
        assert isinstance(m.sampler, SamplerConfig)
    runs = cfg.run_names()
    text = len(cfg.grpo.methods) * len(cfg.tasks) * len(cfg.grpo.seeds)
    image_seeds = cfg.image.seeds or cfg.grpo.seeds
    assert len(runs) == text + len(cfg.image.methods) * len(cfg.image.tasks) * len(image_seeds)
    hp, task, seed = cfg.run(runs[0])
    assert task in cfg.tasks and seed in cfg.grpo.seeds and hp is cfg.methods[runs[0].split(f"_{task}_")[0]]
    image = dataclasses.replace(cfg, image=dataclasses.replace(cfg.image, tasks=("geneval_mini",)))
    hp, task, seed = image.run(image.run_names()[-1])
    assert task == "geneval_mini" and hp is cfg.image_methods[image.run_names()[-1].split(f"_{task}_")[0]]
    with pytest.raises(ConfigError, match="unknown run"):
        cfg.run("nope")


def test_image_runs_layer_image_keys_over_the_text_sections():
    """grpo < image.grpo < methods.<name> < image.method_overrides.<name>; text runs keep their own values."""
    cfg = load(REPO / "params.yaml")
    mask_text, mask_image = cfg.methods["maskgrpo"], cfg.image_methods["maskgrpo"]
    assert (mask_text.remasking, mask_text.gamma) == ("maskgrpo_fading", 0.6)  # the method's own views
    assert (mask_image.remasking, mask_image.gamma) == ("maskgrpo_random", 0.8)
    assert mask_image.sampler.name == "maskgit" and mask_text.sampler.name == "llada"
    assert cfg.image_methods["rebrl"].num_iterations == cfg.methods["rebrl"].num_iterations == 4  # equal budgets
    assert cfg.image_methods["rebrl"].remasking == cfg.methods["rebrl"].remasking == "unigrpo"  # a plug-in
    assert cfg.image_methods["diffu_grpo"].p_mask_prompt == cfg.methods["diffu_grpo"].p_mask_prompt
    assert cfg.image_methods["unigrpo"].learning_rate == cfg.grpo.defaults.learning_rate


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        ({"tasks": ["sudoku4"]}, "image.tasks[0] = 'sudoku4': unknown value; choose one of geneval_mini, geneval"),
        ({"grpo": {"max_stepz": 3}}, "image.grpo.max_stepz: unknown key"),
        ({"method_overrides": {"rebrl": {"rebrl_mode": "x"}}}, "image.method_overrides.rebrl.rebrl_mode = 'x'"),
        ({"methods": ["nope"]}, "image.method_overrides.nope = 'nope': unknown method"),
        ({"evaluate": {"samples_per_prompt": 0}}, "image.evaluate.samples_per_prompt = 0"),
        ({"cond_dropout_prob": 1.0}, "image.cond_dropout_prob = 1.0"),
    ],
)
def test_bad_image_keys_are_refused_naming_them(tmp_path, edit, expected):
    raw = yaml.safe_load((REPO / "params.yaml").read_text())
    raw["image"] |= edit
    assert expected in refused(tmp_path, yaml.safe_dump(raw))


def test_a_profile_overlays_its_file(tmp_path):
    (tmp_path / "profiles").mkdir()
    shutil.copy(REPO / "profiles" / "smoke.yaml", tmp_path / "profiles" / "smoke.yaml")
    text = (REPO / "params.yaml").read_text().replace("profile: tiny", "profile: smoke")
    cfg = load(write(tmp_path, text))
    assert cfg.profile == "smoke"
    assert cfg.model.hidden_size == 32 and cfg.grpo.defaults.max_steps == 4
    assert cfg.methods["rebrl"].num_iterations == 2 and cfg.methods["rebrl"].beta == 0.01  # overlay + base


@pytest.mark.parametrize("profile", sorted(p.stem for p in (REPO / "profiles").glob("*.yaml")))
def test_every_profile_loads(tmp_path, profile):
    shutil.copytree(REPO / "profiles", tmp_path / "profiles")
    text = (REPO / "params.yaml").read_text().replace("profile: tiny", f"profile: {profile}")
    cfg = load(write(tmp_path, text))
    assert cfg.profile == profile and cfg.run_names()
    assert set(cfg.methods) >= set(cfg.grpo.methods) and list(cfg.image_methods) == list(cfg.image.methods)


def test_minimal_file_takes_the_defaults(tmp_path):
    cfg = load(write(tmp_path, "seed: 3\n"))
    assert cfg.seed == 3 and cfg.tasks == ("sudoku4", "chain")
    assert cfg.methods["maskgrpo"].gamma == 0.6 and cfg.methods["rebrl"].rebrl_mode == "token"
    assert cfg.methods["diffu_grpo"].method == "diffu_grpo"


def test_a_method_section_overrides_the_grpo_default(tmp_path):
    cfg = load(
        write(
            tmp_path,
            """
grpo:
  learning_rate: 0.1
  sampler: {block_length: 2, steps: 6, temperature: 1.0}
methods:
  unigrpo: {learning_rate: 0.5, sampler: {steps: 3}}
""",
        )
    )
    assert cfg.methods["unigrpo"].learning_rate == 0.5
    assert cfg.methods["rebrl"].learning_rate == 0.1
    assert cfg.methods["unigrpo"].sampler == SamplerConfig(block_length=2, steps=3, temperature=1.0)
    assert cfg.methods["rebrl"].sampler.steps == 6


def test_a_partial_sampler_section_keeps_the_sections_own_defaults(tmp_path):
    """`grpo: {sampler: {steps: 3}}` should mean GRPO's default sampler (temperature 1.0, for exploration) with
    steps 3; greedy rollouts make every group's G completions identical (zero advantages)."""
    cfg = load(write(tmp_path, "grpo: {sampler: {steps: 3}}\nrollout: {sampler: {steps: 3}}\n"))
    assert GRPOConfig().sampler.temperature == 1.0
    assert cfg.methods["rebrl"].sampler.steps == 3
    assert cfg.grpo.defaults.sampler.temperature == 1.0
    assert cfg.methods["rebrl"].sampler.temperature == 1.0
    assert cfg.rollout.sampler.temperature == 1.0


def test_a_section_may_run_a_method_under_another_name(tmp_path):
    cfg = load(
        write(
            tmp_path,
            """
grpo: {methods: [rebrl, rebrl_none]}
methods:
  rebrl_none: {method: rebrl, rebrl_mode: none, coupling: nested}
""",
        )
    )
    assert cfg.methods["rebrl_none"].method == "rebrl" and cfg.methods["rebrl_none"].rebrl_mode == "none"
    assert cfg.methods["rebrl"].rebrl_mode == "token"
    assert "rebrl_none_sudoku4_s0" in cfg.run_names()


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("grpo: {methods: [diffu_grpo, ppo]}\n", "grpo.methods"),
        ("grpo: {num_generations: 1}\n", "grpo.num_generations"),
        ("methods: {maskgrpo: {gamma: 1.0}}\n", "methods.maskgrpo.gamma"),
        ("methods: {maskgrpo: {gamma: -0.1}}\n", "methods.maskgrpo.gamma"),
        ("methods: {maskgrpo: {gamma: 0.3}}\n", "methods.maskgrpo.gamma"),
        ("bogus: {a: 1}\n", "bogus"),
        ("sft: {max_step: 10}\n", "sft.max_step"),
        ("grpo: {max_steps: ten}\n", "grpo.max_steps"),
        ('grpo: {max_steps: "10"}\n', "grpo.max_steps"),
        ("grpo: {beta: true}\n", "grpo.beta"),
        ("grpo: {sampler: {block_length: 0}}\n", "grpo.sampler.block_length"),
        ("grpo: {sampler: {kv_cache: triple}}\n", "grpo.sampler.kv_cache"),
        ("evaluate: {sampler: {name: maskgit, kv_cache: prefix}}\n", "evaluate.sampler.kv_cache"),
        ("grpo: {sampler: {parallel: eager}}\n", "grpo.sampler.parallel"),
        ("grpo: {sampler: {parallel: threshold, remasking: random}}\n", "grpo.sampler.parallel"),
        ("image: {grpo: {sampler: {name: emerge, parallel: factor}}}\n", "image.grpo.sampler.parallel"),
        ("grpo: {sampler: {threshold: 0.0}}\n", "grpo.sampler.threshold"),
        ("grpo: {sampler: {remasking: rcr, kv_cache: prefix}}\n", "grpo.sampler.remasking"),
        ("evaluate: {sampler: {name: maskgit, schedule: ass}}\n", "evaluate.sampler.schedule"),
        ("evaluate: {sampler: {schedule: ass, steps: 8}}\n", "evaluate.sampler.steps"),
        ("evaluate: {sampler: {ass_blocks: 2}}\n", "evaluate.sampler.ass_blocks"),
        ("evaluate: {sampler: {eoser: true, remasking: random}}\n", "evaluate.sampler.eoser"),
        ("evaluate: {sampler: {eoser: true, parallel: threshold}}\n", "evaluate.sampler.eoser"),
        (
            "evaluate: {sampler: {eoser: true, eos_min_gamma: 0.9, eos_max_gamma: 0.5}}\n",
            "evaluate.sampler.eos_min_gamma",
        ),
        ("grpo: {sampler: {factor: -1.0}}\n", "grpo.sampler.factor"),
        ("evaluate: {sampler: {confidence_dtype: float16}}\n", "evaluate.sampler.confidence_dtype"),
        (
            "image: {grpo: {sampler: {name: maskgit, confidence_dtype: float32}}}\n",
            "image.grpo.sampler.confidence_dtype",
        ),
        ("evaluate: {sampler: {parallel_floor: one}}\n", "evaluate.sampler.parallel_floor"),
        (
            "evaluate: {sampler: {parallel: threshold, factor_rule: fast_dllm_release}}\n",
            "evaluate.sampler.factor_rule",
        ),
        ("evaluate: {sampler: {rcr_scope: block}}\n", "evaluate.sampler.rcr_scope"),
        ("image: {grpo: {sampler: {name: maskgit, logits_eos_inf: true}}}\n", "image.grpo.sampler.logits_eos_inf"),
        ("grpo: {coupling: crossed}\n", "grpo.coupling"),
        ("grpo: {aux_policy: {speed_alpha: 1.0}}\n", "grpo.aux_policy.speed_alpha"),
        ("grpo: {aux_policy: {freeze_model: true}}\n", "grpo.aux_policy.freeze_model"),
        ("grpo: {logp_cfg: cond}\n", "grpo.logp_cfg"),
        ("methods: {rebrl: {remasking: full_completion}}\n", "methods.rebrl.remasking"),
        ("methods: {unigrpo: {epsilon: 1.5}}\n", "methods.unigrpo.epsilon"),
        ("methods: {unigrpo: {method: ppo}}\n", "methods.unigrpo.method"),
        ("tasks: [sudoku9]\n", "tasks"),
        ("model: {hidden_size: 30, num_heads: 4}\n", "model.hidden_size"),
        ("download: {pretrain: {batch_size: 0}}\n", "download.pretrain.batch_size"),
        ("grpo: {lora: {r: -1}}\n", "grpo.lora.r"),
        ("methods: {rebrl: {lora: {r: 8, alpha: 0}}}\n", "methods.rebrl.lora.alpha"),
        ("sft: {lora: {dropout: 1.0}}\n", "sft.lora.dropout"),
        ("grpo: {lora: {target_modules: []}}\n", "grpo.lora.target_modules"),
        ("sft: {mixed_precision: fp8}\n", "sft.mixed_precision"),
        ("grpo: {gradient_checkpointing: 1}\n", "grpo.gradient_checkpointing"),
        ("grpo: {launch: {launcher: srun}}\n", "grpo.launch.launcher"),
        ("sft: {launch: {num_processes: 2}}\n", "sft.launch.num_processes"),
        ("grpo: {launch: {launcher: accelerate, num_processes: 0}}\n", "grpo.launch.num_processes"),
        ("grpo: {launch: {launcher: accelerate, config_file: ''}}\n", "grpo.launch.config_file"),
        ("grpo: {launch: {num_machines: 2}}\n", "grpo.launch.num_machines"),
        ("grpo: {launch: {launcher: accelerate, num_processes: 3, num_machines: 2}}\n", "grpo.launch.num_processes"),
        ("sft: {launch: {launcher: accelerate, timeout_s: 0}}\n", "sft.launch.timeout_s"),
        ("model: {kind: gpt2, path_or_id: x}\n", "model.kind"),
        ("model: {kind: llada}\n", "model.path_or_id"),
        (
            "model: {kind: llada, path_or_id: GSAI-ML/LLaDA-8B-Instruct, trust_remote_code: true, revision: main}\n",
            "model.revision",
        ),
        ("download: {hub: [{name: a, repo_id: x/y, sha: 1}]}\n", "download.hub[0]"),
        ("download: {hub: [{name: ../a, repo_id: x/y}]}\n", "download.hub[0]"),
        ("download: {hub: [{name: a, repo_id: x/y}, {name: a, repo_id: x/z}]}\n", "download.hub"),
        ("task_params: {gsm8k: {train: ''}}\n", "task_params.gsm8k"),
        ("task_params: {sudoku4: {num_empty: 8, num_empty_max: 6}}\n", "task_params.sudoku4"),
    ],
)
def test_malformed_params_give_one_line_naming_the_key(tmp_path, text, key):
    msg = refused(tmp_path, text)
    assert msg.startswith("params.yaml: ")
    assert f" {key}" in msg, msg


def test_wrong_type_message_says_what_is_expected(tmp_path):
    assert "must be an integer" in refused(tmp_path, "grpo: {max_steps: ten}\n")
    assert "must be >= 2" in refused(tmp_path, "grpo: {num_generations: 1}\n")
    assert "must be in [0, 1)" in refused(tmp_path, "methods: {maskgrpo: {gamma: 1.0}}\n")
    assert "full_completion" in refused(tmp_path, "methods: {rebrl: {remasking: full_completion}}\n")


def test_invalid_yaml_names_the_line(tmp_path):
    msg = refused(tmp_path, "seed: 0\ngrpo:\n  beta: [0.1\n  epsilon: 0.2\n")
    assert "not valid YAML" in msg
    assert " line " in msg


def test_a_file_that_is_not_a_mapping_is_refused(tmp_path):
    assert "mapping" in refused(tmp_path, "- a\n- b\n")


def test_missing_profile_overlay_is_refused_naming_profile(tmp_path):
    msg = refused(tmp_path, "profile: huge\n")
    assert "profile" in msg and "huge" in msg and "overlay" in msg


def test_missing_params_file(tmp_path):
    with pytest.raises(ConfigError, match="file not found"):
        load(tmp_path / "absent.yaml")


def test_scale_keys_default_to_the_embedded_run_and_methods_may_override_them(tmp_path):
    """LoRA off, fp32, no checkpointing, plain python; a method section overrides one nested key only."""
    cfg = load(write(tmp_path, "seed: 0\n"))
    for section in (cfg.sft, cfg.methods["rebrl"]):
        assert section.lora.r == 0 and section.mixed_precision == "no" and not section.gradient_checkpointing
        assert section.launch.launcher == "python" and section.launch.num_processes == 1
    cfg = load(
        write(
            tmp_path,
            """
grpo:
  mixed_precision: bf16
  lora: {r: 128, alpha: 64, dropout: 0.05, target_modules: [q_proj, k_proj, v_proj]}
  launch: {launcher: accelerate, config_file: configs/accelerate/zero2.yaml, num_processes: 8}
methods:
  rebrl: {lora: {r: 16}}
sft: {gradient_checkpointing: true, launch: {launcher: accelerate, num_processes: 4}}
""",
        )
    )
    d1 = cfg.methods["diffu_grpo"]
    assert d1.mixed_precision == "bf16" and d1.lora.r == 128
    assert d1.lora.target_modules == ("q_proj", "k_proj", "v_proj")
    assert d1.launch.config_file == "configs/accelerate/zero2.yaml" and d1.launch.num_processes == 8
    assert cfg.methods["rebrl"].lora.r == 16 and cfg.methods["rebrl"].lora.alpha == 64
    assert cfg.sft.gradient_checkpointing and cfg.sft.launch.num_processes == 4
    assert cfg.sft.launch.config_file == "configs/accelerate/ddp.yaml"
    assert type(cfg.download.pretrain) is TrainConfig  # pre-training (download stage) has no scale keys


# ------------------------------------------------------------------------------------------------ defaults

# params.yaml keys whose value differs from the code default on purpose; a comment at the key (or at a section
# holding it) says so with the word "default"
DELIBERATE = {
    "download.base_per_seed",
    "download.pretrain.max_steps",
    "task_params.sudoku4.num_empty",
    "task_params.sudoku4.num_empty_max",
    "evaluate.sampled_temperature",
    "rebrl_ablation.methods",
    "grpo.sampler.kv_cache",
    "model.position_embedding",
    "grpo.methods",
    "grpo.seeds",
    "grpo.max_steps",
    "image.seeds",
    "image.task_params.geneval_mini.partial_credit",
    "image.grpo.max_steps",
    "image.grpo.sampler.name",
    "image.grpo.sampler.steps",
    "image.grpo.sampler.cfg_scale",
    "image.methods",
    "image.evaluate.min_images_per_tag",
    "image.method_overrides.maskgrpo.remasking",
    "image.method_overrides.maskgrpo.gamma",
}


def leaves(node, path=()):
    """(key path, value) of every value of nested mappings (an empty section has none)."""
    for k, v in node.items():
        yield from leaves(v, (*path, k)) if isinstance(v, dict) else [((*path, k), v)]


def code_default(defaults, path):
    """The value key ``path`` takes when params.yaml leaves it out (for image.grpo and image.method_overrides: the
    value a run takes without them)."""
    if path[:2] == ("image", "grpo"):
        node, path = GRPOConfig(), path[2:]
    elif path[:2] == ("image", "method_overrides"):
        node, path = METHODS[path[2]].params(), path[3:]
    elif path[0] == "methods" and path[1] not in defaults.methods:  # a section named for its row (rebrl_t1)
        node, path = METHODS[load(REPO / "params.yaml").methods[path[1]].method].params(), path[2:]
    elif "task_params" in path[:2]:
        at = path.index("task_params") + 1
        node, path = TASKS[path[at]].params(), path[at + 1 :]
    else:
        node = defaults
    for k in path:
        node = node[k] if isinstance(node, dict) else getattr(node, k)
    return list(node) if isinstance(node, tuple) else node


def comments_at(text, path):
    """The comment lines right above key ``path`` and above each section holding it, and its inline comment."""
    lines, node, out = text.splitlines(), yaml.compose(text), []
    for k in path:
        key, node = next((kn, vn) for kn, vn in node.value if kn.value == k)
        i = key.start_mark.line
        out.append(lines[i].partition("#")[2])
        while i > 0 and lines[i - 1].strip().startswith("#"):
            i -= 1
            out.append(lines[i])
    return " ".join(out)


def test_code_defaults_agree_with_params_yaml_or_the_difference_is_commented(tmp_path):
    """A key left out of params.yaml takes its code default (docs/params.md); params.yaml writes the same value,
    or says why not."""
    text = (REPO / "params.yaml").read_text()
    defaults = load(write(tmp_path, "{}\n"))
    rows = {m for m in yaml.safe_load(text)["methods"] if m not in defaults.methods}  # sections named for a change
    differ = {
        ".".join(p)
        for p, v in leaves(yaml.safe_load(text))
        if code_default(defaults, p) != v and not (p[0] == "methods" and p[1] in rows)
    }
    assert differ == DELIBERATE
    for key in DELIBERATE:
        assert "default" in comments_at(text, key.split(".")).lower(), key


# ------------------------------------------------------------------------------------------------ reference


def test_the_parameter_reference_is_up_to_date():
    """docs/params.md is generated from the schema: python -m ddmrl.config.docs."""
    assert (REPO / "docs" / "params.md").read_text() == docs.render(), "regenerate: python -m ddmrl.config.docs"
    assert docs.main(["--check", "--out", str(REPO / "docs" / "params.md")]) == 0


def test_every_key_users_write_is_described_once():
    """Each key of each documented section has a description (the method models only change defaults)."""
    used = {}
    docs._collect(Config, "", used)
    for cls in used:
        for name in fields_of(cls):
            assert cls.__pydantic_fields__[name].description, f"{cls.__name__}.{name}"
    text = (REPO / "docs" / "params.md").read_text()
    # grpo's (GRPOConfig), rollout's and the MAR runs' (MarRunConfig), not once per use
    assert text.count("| `num_generations` |") == 3


# ------------------------------------------------------------------------------------------------ leaves

CONFIG_FILES = ["__init__.py", "_base.py", "loader.py", "names.py", "model.py", "scale.py", "download.py",
                "sampler.py", "evaluate.py", "grpo.py", "tasks.py", "mar.py", "root.py"]  # fmt: skip
IMPORTED = "import {}, sys; print(sorted(m for m in sys.modules if m.startswith(('ddmrl', 'torch', 'transformers'))))"


@pytest.mark.parametrize(
    ("module", "modules"),
    [
        (
            "ddmrl.config",
            [
                *(f"ddmrl.config.{f[:-3]}" for f in CONFIG_FILES[1:]),
                *("ddmrl.config", "ddmrl.errors", "ddmrl.methods", "ddmrl.methods.base", "ddmrl.registry"),
                # the registries of the names the schema validates
                *("ddmrl.aux_policies", "ddmrl.masking", "ddmrl.models", "ddmrl.objectives", "ddmrl.rewards"),
                "ddmrl.samplers",
                "ddmrl.tasks",
            ],
        ),
        ("ddmrl.errors", ["ddmrl.errors"]),
        ("ddmrl.io", ["ddmrl.errors", "ddmrl.io"]),
        ("ddmrl.seeding", ["ddmrl.seeding"]),
        ("ddmrl.numerics", []),
    ],
)
def test_leaf_modules_import_nothing_heavy(module, modules):
    """The shared leaves load neither torch nor transformers nor any other ddmrl module than these (``ddmrl`` itself,
    and the numerics it pins on import, are always there)."""
    modules = ["ddmrl", "ddmrl.numerics", *modules]
    out = subprocess.run([sys.executable, "-c", IMPORTED.format(module)], capture_output=True, text=True, check=True)
    assert ast.literal_eval(out.stdout) == sorted(modules)


def test_the_code_deps_of_a_config_user_are_configs_own_files(tmp_path):
    """Every stage imports ddmrl.config: through it, a stage depends on the config package, ddmrl.errors, the
    numerics ddmrl pins, the method registry and its members' contract (ddmrl.methods.base), and
    the task, reward-model, model-family, sampler, view-sampler, advantage and auxiliary-policy registries only
    (ddmrl.pipeline.dag.code_files follows every ddmrl import, those inside functions included; a method's or a
    task's own module is a dep of the stages that run it only)."""
    for text in ("from ddmrl import config\n", "from ddmrl.config import ConfigError, load\n"):
        (tmp_path / "stage.py").write_text(text)
        assert code_files(tmp_path / "stage.py", REPO) == tuple(
            sorted(
                ["src/ddmrl/__init__.py", "src/ddmrl/errors.py", "src/ddmrl/numerics.py", "src/ddmrl/registry.py"]
                + ["src/ddmrl/methods/__init__.py", "src/ddmrl/methods/base.py"]
                + ["src/ddmrl/tasks/__init__.py", "src/ddmrl/rewards/__init__.py", "src/ddmrl/models/__init__.py"]
                + [
                    "src/ddmrl/samplers/__init__.py",
                    "src/ddmrl/masking/__init__.py",
                    "src/ddmrl/aux_policies/__init__.py",
                    "src/ddmrl/objectives/__init__.py",
                ]
                + [f"src/ddmrl/config/{f}" for f in CONFIG_FILES]
            )
        )


# ------------------------------------------------------------------------------------------------ registries

REQUIRED = {
    "train": "train.jsonl",
    "eval": "eval.jsonl",
    "questions": "q.csv",
    "vqa": {"model": "mplug", "model_dir": "m"},
}


def constructor_defaults(cls: type) -> dict:
    return {k: p.default for k, p in inspect.signature(cls.__init__).parameters.items() if k != "self"}


def accepted_by_schema(name: str, params: dict) -> bool:
    try:
        TASKS[name].params(**params)
    except ConfigError:
        return False
    return True


def accepted_by_task(name: str, params: dict) -> bool:
    try:
        make_task(name, **params)
    except (ValueError, ConfigError):
        return False
    return True


def probes(info) -> list:
    """Values at and just past a parameter's bounds, or its choices and one more."""
    lo = next((m.ge for m in info.metadata if hasattr(m, "ge")), None)
    hi = next((m.le for m in info.metadata if hasattr(m, "le")), None)
    if isinstance(lo, int) or isinstance(hi, int):
        return [v for b in (lo, hi) if b is not None for v in (b - 1, b, b + 1)]
    if get_args(info.annotation) and all(isinstance(a, str) for a in get_args(info.annotation)):
        return [*get_args(info.annotation), "nope"]
    if any(getattr(m, "min_length", None) == 1 for m in info.metadata):
        return ["", "x"]
    return []


@pytest.mark.parametrize("name", sorted(TASKS))
def test_every_task_declares_its_parameters_as_its_constructor_takes_them(name):
    """A task's module declares its section's model (``Params``, the class's ``params``): one field per constructor
    parameter with the constructor's default, and at each bound and choice it accepts what the task accepts. A
    parameter the model requires is one whose constructor default the task refuses. Its kind (text, image,
    benchmark) comes from its class, and a task is listed under its kind only."""
    assert TASKS[name].params.__module__ == TASKS.module(name)
    assert task_kind(name) == ("benchmark" if TASKS[name].evaluation_only else TASKS[name].modality)
    assert [kind for kind in ("text", "image", "benchmark") if name in tasks_of(kind)] == [task_kind(name)]
    fields, defaults = TASKS[name].params.__pydantic_fields__, constructor_defaults(TASKS[name])
    assert list(fields) == list(defaults)
    required = {k: REQUIRED[k] for k, info in fields.items() if info.is_required()}
    for key, info in fields.items():
        if info.is_required():
            assert not accepted_by_task(name, {**required, key: defaults[key]}), key
        else:
            assert info.default == defaults[key], key
        for value in probes(info):
            params = {**required, key: value}
            assert accepted_by_schema(name, params) == accepted_by_task(name, params), (key, value)


def test_image_benchmarks_need_mmada_and_a_vqa_models_own_options(tmp_path):
    """paper_mmada_geneval's image.eval_tasks (HPS, DPG-Bench) on another model kind, or DPG's VQA with another
    model's option, is refused naming the key."""
    (tmp_path / "profiles").mkdir()
    overlay = yaml.safe_load((REPO / "profiles" / "paper_mmada_geneval.yaml").read_text())
    text = (REPO / "params.yaml").read_text().replace("profile: tiny", "profile: edited")
    url = "http://127.0.0.1:1"
    for (*path, key), value, expected in (
        (("model", "kind"), "tiny", "image.eval_tasks = ['hps', 'dpg']: needs an image task on MMaDA"),
        (("task_params", "dpg", "vqa", "url"), url, f"vqa.url = '{url}': not an option of vqa model mplug"),
    ):
        raw = copy.deepcopy(overlay)
        node = raw["image"]
        for part in path:
            node = node[part]
        node[key] = value
        write(tmp_path / "profiles", yaml.safe_dump(raw), "edited.yaml")
        assert expected in refused(tmp_path, text)


def test_the_reward_models_and_the_geneval_evaluator_agree_with_their_classes():
    """Every reward model a reward entry may name is an ImageRewardModel; the evaluator's keys are GenEvalEnv's."""
    assert set(reward_models()) == set(REWARD_MODELS) - {"weighted_sum"}
    for name in reward_models():
        assert issubclass(REWARD_MODELS[name], ImageRewardModel), name
    missing = dataclasses.MISSING
    env = {f.name: f.default is missing and f.default_factory is missing for f in dataclasses.fields(GenEvalEnv)}
    evaluator = GenEvalEvaluator.__pydantic_fields__
    assert list(evaluator) == list(env)
    assert {key: info.is_required() for key, info in evaluator.items()} == env


def test_model_spec_and_hub_item_are_validated_by_the_schema_when_built_directly():
    """adapters.ModelSpec and hub.HubItem are the schema's (constructed in code too: one line naming the key)."""
    from ddmrl.hub import HubItem as HubsItem
    from ddmrl.models import FAMILIES
    from ddmrl.models.adapters import DTYPES
    from ddmrl.models.adapters import ModelSpec as AdaptersSpec

    assert HubsItem is HubItem and issubclass(AdaptersSpec, ModelSpec)
    spec = ModelSpec.__pydantic_fields__
    assert set(get_args(spec["dtype"].annotation)) == set(DTYPES)
    assert list(FAMILIES) == ["tiny", "tiny_block", "llada", "mmada", "hf_masked_lm", "dream", "sdar", "llada2"]
    with pytest.raises(
        ConfigError, match=r"^model.kind = 'draem': unknown value; choose one of tiny, tiny_block, llada,"
    ):
        AdaptersSpec(kind="draem", path_or_id="x")
    with pytest.raises(ConfigError, match=r"^model.dtype = 'fp8': unknown value; choose one of float32,"):
        AdaptersSpec(kind="llada", path_or_id="x", dtype="fp8")
    with pytest.raises(ConfigError, match=r"^repo_type = 'space': unknown value; choose one of model, dataset$"):
        HubItem("m", "a/b", None, "space")
    assert HubItem("m", "a/b", allow_patterns=["*.json"]).allow_patterns == ("*.json",)


# ------------------------------------------------------------------------------------------------ equal budgets


@pytest.mark.parametrize(
    ("section", "key"),
    [
        ("rebrl: {num_iterations: 8}", "methods.rebrl.num_iterations = 8"),
        ("unigrpo: {max_steps: 480}", "methods.unigrpo.max_steps = 480"),
        ("maskgrpo: {num_generations: 4}", "methods.maskgrpo.num_generations = 4"),
        ("diffu_grpo: {num_prompts: 16}", "methods.diffu_grpo.num_prompts = 16"),
    ],
)
def test_a_row_with_another_budget_is_refused_unless_its_name_says_so(tmp_path, section, key):
    """Equal budgets by default: a section differing in prompts, generations, mu or steps is refused, naming the key
    and the name that would flag it; the same keys under a name carrying them are accepted."""
    msg = refused(tmp_path, f"grpo: {{methods: [diffu_grpo, unigrpo, maskgrpo, rebrl]}}\nmethods: {{{section}}}\n")
    assert msg.startswith(f"params.yaml: {key}: differs from the comparison's") and "name the row" in msg
    name, keys = section.split(": ", 1)
    token = {"num_iterations": "mu", "max_steps": "steps", "num_generations": "g", "num_prompts": "p"}
    row = f"{name}_{token[key.split('.')[-1].split(' ')[0]]}{key.split(' = ')[1]}"
    text = f"grpo: {{methods: [unigrpo, {row}]}}\nmethods: {{{row}: {keys[:-1]}, method: {name}}}}}\n"
    cfg = load(write(tmp_path, text))
    assert row in cfg.text_methods


def test_image_rows_share_the_image_budget(tmp_path):
    text = "image: {tasks: [geneval_mini], methods: [unigrpo, rebrl], grpo: {max_steps: 8}, %s}\n"
    cfg = load(write(tmp_path, text % "method_overrides: {}"))
    assert {m.max_steps for m in cfg.image_methods.values()} == {8}
    msg = refused(tmp_path, text % "method_overrides: {rebrl: {num_iterations: 8}}")
    assert msg.startswith("params.yaml: image.method_overrides.rebrl.num_iterations = 8: differs")


def test_the_repo_comparisons_have_equal_budgets():
    cfg = load(REPO / "params.yaml")
    for runs in ({m: cfg.methods[m] for m in cfg.text_methods}, cfg.image_methods):
        budgets = {(r.max_steps, r.num_prompts, r.num_generations, r.num_iterations) for r in runs.values()}
        assert len(budgets) == 1, budgets


def test_the_rebrl_ablation_switch_adds_its_rows(tmp_path):
    text = (REPO / "params.yaml").read_text()
    off = load(write(tmp_path, text))
    assert off.text_methods == off.grpo.methods
    on = load(write(tmp_path, text.replace("rebrl_ablation:\n  enabled: false", "rebrl_ablation:\n  enabled: true")))
    rows = on.rebrl_ablation.methods
    assert on.text_methods == (*on.grpo.methods, *rows) and len(rows) == 8
    assert {r for r, *_ in on.runs()} == set(on.text_methods) | set(on.image.methods)
    views = {r: (on.methods[r].remasking, on.methods[r].coupling, on.methods[r].rebrl_mode) for r in ("rebrl", *rows)}
    assert views["rebrl"] == ("unigrpo", "independent", "token")  # RebRL: a plug-in on UniGRPO's views
    # every row changes one or two choices of `rebrl`, never the budget
    changed = {r: sum(a != b for a, b in zip(v, views["rebrl"], strict=True)) for r, v in views.items()}
    assert changed.pop("rebrl") == 0 and set(changed.values()) <= {1, 2}
    msg = refused(tmp_path, "rebrl_ablation: {enabled: true, methods: [nope]}\n")
    assert "rebrl_ablation.methods = 'nope': not a section of methods:" in msg
