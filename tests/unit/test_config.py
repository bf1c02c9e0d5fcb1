"""params.yaml parsing and validation (ddmrl.config): one-line errors that name the key."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import pytest
import yaml

from ddmrl.config import ConfigError, GRPOConfig, SamplerConfig, TrainConfig, load
from ddmrl.methods import METHODS

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
    assert set(cfg.methods) == set(cfg.grpo.methods)
    for m in cfg.methods.values():
        assert isinstance(m, GRPOConfig) and m.method in METHODS
        assert isinstance(m.sampler, SamplerConfig)
    runs = cfg.run_names()
    text = len(cfg.grpo.methods) * len(cfg.tasks) * len(cfg.grpo.seeds)
    assert len(runs) == text + len(cfg.image.methods) * len(cfg.image.tasks) * len(cfg.grpo.seeds)
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
    assert (mask_text.remasking, mask_text.gamma) == ("", 0.6)
    assert (mask_image.remasking, mask_image.gamma) == ("maskgrpo_random", 0.8)
    assert mask_image.sampler.name == "maskgit" and mask_text.sampler.name == "llada"
    assert cfg.image_methods["rebrl"].num_iterations == 8 and cfg.methods["rebrl"].num_iterations == 4
    assert cfg.image_methods["diffu_grpo"].p_mask_prompt == cfg.methods["diffu_grpo"].p_mask_prompt
    assert cfg.image_methods["unigrpo"].learning_rate == cfg.grpo.defaults.learning_rate


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        ({"tasks": ["sudoku4"]}, "image.tasks = 'sudoku4': is not a image task"),
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


def test_minimal_file_takes_the_defaults(tmp_path):
    cfg = load(write(tmp_path, "seed: 3\n"))
    assert cfg.seed == 3 and cfg.tasks == ("sudoku4", "countdown3")
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
        ("grpo: {sampler: {factor: -1.0}}\n", "grpo.sampler.factor"),
        ("grpo: {coupling: crossed}\n", "grpo.coupling"),
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
