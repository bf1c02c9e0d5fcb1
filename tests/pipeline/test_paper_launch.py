"""Every paper profile launches on its family as shipped. Against a tiny random instance of the family's real class
(built from ``../shared/reference`` as the real-class tests build them, at the directory the profile's download
fills), each profile's first GRPO run resolves its launch through the planner, ``python -m ddmrl.plan``, with no edit
to any tracked file: the engine of its accelerate config, FSDP's block classes taken from the model (and accelerate's
own wrap policy built from them wraps every layer), the gradient checkpointing the profile asks for, the modules
LoRA adapts (the family's declared targets, never the output head) and a plan. A profile whose family's reference
code is absent is skipped, with the reason (tests/real_*.py). And ``snakemake --profile workflow/profiles/slurm
--config profile=<it> -n`` plans every profile's jobs in an unedited copy of the repository, with only the
environment variables docs/cluster.md exports (no SLURM needed: a dry run submits nothing)."""

from __future__ import annotations

import importlib
import json
import re
from pathlib import Path

import pytest
import real_dream
import real_models
import torch
import yaml
from accelerate.utils import DistributedType, FullyShardedDataParallelPlugin
from accelerate.utils.fsdp_utils import fsdp2_prepare_auto_wrap_policy
from doc_commands import Dry, base_env, job_counts, run_dry, workspace
from helpers import REPO
from real_families import BUILDERS, place_model

from ddmrl import plan
from ddmrl.config import ConfigError, load
from ddmrl.models import FAMILIES
from ddmrl.models.lora import lora_targets, peft_target_modules
from ddmrl.training import distributed as dist

PROFILES = {  # the five paper profiles and their families
    "paper_llada_math": "llada",
    "paper_mmada_geneval": "mmada",
    "paper_dream_math": "dream",
    "paper_sdar_math": "sdar",
    "paper_llada2_math": "llada2",
}


def first_run(cfg):
    """(hyperparameters, model spec) of the profile's first GRPO run, the one ``python -m ddmrl.plan`` plans."""
    run, task, _ = cfg.run(cfg.run_names()[0])
    return run, (cfg.image.model if task in cfg.image.tasks else cfg.model)


def downloaded(tmp_path: Path, profile: str) -> tuple[Path, object, object]:
    """A workspace as a clone after the download: the tracked params, profiles and accelerate configs (linked, not
    edited), the family's tiny checkpoint where the profile's download puts it (and MMaDA's checkout where the
    profile names it). Returns (workspace, the run's hyperparameters, its model spec)."""
    for name in ("params.yaml", "profiles", "configs"):
        (tmp_path / name).symlink_to(REPO / name)
    run, spec = first_run(load(tmp_path / "params.yaml", profile))
    place_model(tmp_path, spec)
    return tmp_path, run, spec


def family_targets(kind: str) -> str:
    """The LoRA targets the family's module declares (``LORA_TARGETS``)."""
    return importlib.import_module(FAMILIES.module(kind)).LORA_TARGETS


def layers(model: torch.nn.Module) -> int:
    config = model.config
    return getattr(config, "num_hidden_layers", None) or config.n_layers


def wrapped(model: torch.nn.Module, classes: list[str]) -> int:
    """How many modules accelerate's own FSDP2 wrap policy, built from ``classes``, wraps one by one."""
    plugin = FullyShardedDataParallelPlugin(
        fsdp_version=2, auto_wrap_policy="transformer_based_wrap", transformer_cls_names_to_wrap=classes
    )
    policy = fsdp2_prepare_auto_wrap_policy(plugin, model)
    return sum(policy(m) for m in model.modules())


@pytest.mark.parametrize(
    "profile", [pytest.param(p, marks=BUILDERS[kind][1]) for p, kind in PROFILES.items()], ids=list(PROFILES)
)
def test_the_launch_of_every_paper_profile_resolves_on_its_familys_real_class(tmp_path, monkeypatch, profile):
    ws, run, spec = downloaded(tmp_path, profile)
    assert spec.kind == PROFILES[profile]
    monkeypatch.chdir(ws)
    args = ["--profile", profile, "--prompt-length", "16", "--completion-length", "16", "--json", "plan.json"]
    assert plan.main(args) == 0  # the model from the profile's own path_or_id: the download's directory
    planned = json.loads((ws / "plan.json").read_text())
    assert planned["engine"] == plan.engine_of(run.launch.config_file)
    assert planned["processes"] == run.launch.num_processes == 8 and planned["peak"] > 0

    build, _ = plan.model_builder(spec)
    model = plan.on_meta(build)  # the class as the stages see it (Dream: its aligned view)
    # FSDP: the model's own blocks, one wrapped unit per layer, whatever the family; accelerate's old default
    # (TinyDDM's _Block in configs/accelerate/fsdp.yaml) finds none
    blocks = dist.fsdp_wrap_classes(model)
    assert wrapped(model, blocks) == layers(model)
    with pytest.raises(ValueError, match="Could not find the transformer layer class _Block"):
        wrapped(model, ["_Block"])
    assert planned["wrap_classes"] == (blocks if planned["engine"] == "fsdp" else [])
    # gradient checkpointing: on where the profile asks for it, through the model's own mechanism
    assert bool(planned["checkpointing"]) == run.gradient_checkpointing
    # LoRA: the family's declared targets, which are also what peft's default all-linear selects, never the head
    declared = lora_targets(model, family_targets(spec.kind))
    assert declared and sorted(lora_targets(model, ("all-linear",))) == sorted(declared)
    assert peft_target_modules(model, family_targets(spec.kind)) == family_targets(spec.kind)
    head = [n for n, m in model.named_modules() if m is model.get_output_embeddings()]
    assert head and not set(head) & set(declared)
    assert sorted(planned["lora_targets"]) == (sorted(declared) if run.lora.r else [])


def test_the_shipped_fsdp_config_names_no_block_class():
    """configs/accelerate/fsdp.yaml leaves the class to the model (ddmrl.training.distributed.configure_fsdp)."""
    config = yaml.safe_load((REPO / "configs" / "accelerate" / "fsdp.yaml").read_text())
    assert config["fsdp_config"]["fsdp_auto_wrap_policy"] == "TRANSFORMER_BASED_WRAP"
    assert "fsdp_transformer_layer_cls_to_wrap" not in config["fsdp_config"]


@real_dream.needs_dream
def test_fsdp_wraps_the_models_blocks_and_refuses_a_class_it_lacks(tmp_path):
    """What the GRPO and SFT stages do before ``accelerate.prepare`` under FSDP, on Dream's real class."""
    from types import SimpleNamespace

    ws, _, spec = downloaded(tmp_path, "paper_dream_math")
    model = plan.on_meta(plan.model_builder(spec, ws / spec.path_or_id)[0])

    def accelerator(names):
        plugin = SimpleNamespace(transformer_cls_names_to_wrap=names)
        return SimpleNamespace(distributed_type=DistributedType.FSDP, state=SimpleNamespace(fsdp_plugin=plugin))

    acc = accelerator(None)  # the shipped config: no class named
    assert dist.configure_fsdp(acc, model) == ("DreamDecoderLayer",)
    assert acc.state.fsdp_plugin.transformer_cls_names_to_wrap == ["DreamDecoderLayer"]
    with pytest.raises(ConfigError) as refused:
        dist.configure_fsdp(accelerator(["_Block"]), model)
    assert str(refused.value) == (
        "accelerate config: fsdp_transformer_layer_cls_to_wrap = _Block: Aligned has no _Block (its blocks: "
        "DreamDecoderLayer); remove the key, the stage wraps the model's own blocks"
    )
    assert dist.configure_fsdp(SimpleNamespace(distributed_type=DistributedType.DEEPSPEED), model) == ()


@pytest.mark.parametrize("kind", [pytest.param(k, marks=BUILDERS[k][1]) for k in ("dream", "sdar", "llada2")])
def test_checkpointing_recomputes_the_real_classes_blocks(tmp_path, kind):
    """``gradient_checkpointing: true`` keeps fewer tensors for backward on each family's real class (the transformers
    API of its remote code), with the same gradients."""
    model = BUILDERS[kind][0](tmp_path / "model").float().train()
    if kind == "sdar":
        model.config.fuse_cross_entropy = False  # as its loader sets it: logits in training mode too
    ids = torch.randint(3, 40, (2, 8))

    def backward() -> tuple[int, list[torch.Tensor]]:
        saved = []
        model.zero_grad(set_to_none=True)
        with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t.numel()) or t, lambda t: t):
            model(ids).logits.float().logsumexp(-1).mean().backward()
        return sum(saved), [p.grad.clone() for p in model.parameters() if p.grad is not None]

    kept, grads = backward()
    assert dist.enable_checkpointing(model) and dist.checkpointing_of(model) == "transformers"
    kept_checkpointed, grads_checkpointed = backward()
    assert kept_checkpointed < kept
    assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(grads, grads_checkpointed, strict=True))


@real_models.needs_reference
def test_the_lora_example_of_the_docs_selects_llada_blocks_only(tmp_path):
    """docs/distributed.md's params example, on LLaDA's real class: accepted, every block's projections and no
    output head (a bare ``ff_out`` would select LLaDA's head as well, and be refused)."""
    text = (REPO / "docs" / "distributed.md").read_text()
    example = yaml.safe_load(re.search(r"## 2\. Params keys\n\n.*?```yaml\n(.*?)```", text, re.S)[1])
    targets = example["grpo"]["lora"]["target_modules"]
    model = real_models.llada_checkpoint(tmp_path / "llada", real_models.tokenizer())
    assert peft_target_modules(model, targets) == targets
    assert lora_targets(model, targets) == lora_targets(model, family_targets("llada"))
    with pytest.raises(ConfigError, match="also selects the output head model.transformer.ff_out"):
        peft_target_modules(model, ["q_proj", "ff_out"])


def test_every_paper_profile_plans_its_jobs_on_slurm_with_the_documented_variables(tmp_path):
    """The account and partitions come from the variables docs/cluster.md exports (the shipped SLURM profile reads
    them), into every job's resources; nothing tracked is edited, and no other ddmrl variable is set."""
    doc = (REPO / "docs" / "cluster.md").read_text()
    exported = dict(w.split("=", 1) for w in re.search(r"export (DDMRL_SLURM_\S+=.*)", doc)[1].split())
    assert set(exported) == {"DDMRL_SLURM_ACCOUNT", "DDMRL_SLURM_CPU_PARTITION", "DDMRL_SLURM_GPU_PARTITION"}
    ws = workspace(tmp_path / "ws")
    env = tuple(sorted((base_env() | exported).items()))
    profiles = list(PROFILES)
    argv = ("--profile", "workflow/profiles/slurm", "--config")
    results = run_dry([Dry(ws, (*argv, f"profile={p}", "-n"), env) for p in profiles], tmp_path / "logs")
    for profile, (code, output) in zip(profiles, results, strict=True):
        assert code == 0, f"{profile}: {output[-2000:]}"
        cfg = load(ws / "params.yaml", profile)
        kind = "grpo_image" if cfg.image.tasks and not cfg.tasks else "grpo"
        assert job_counts(output)[kind] == len(cfg.runs()), profile
        account = f"slurm_account={exported['DDMRL_SLURM_ACCOUNT']}"
        gpu = f"slurm_partition={exported['DDMRL_SLURM_GPU_PARTITION']}"
        grpo = [block for block in output.split("\nrule ")[1:] if block.startswith(f"{kind}:")]
        assert grpo and all(account in b and gpu in b and "gpu=8" in b for b in grpo), f"{profile}: {grpo[:1]}"
    for tracked in ("params.yaml", "profiles", "workflow", "configs"):  # nothing tracked edited in the copy
        files = [tracked] if (REPO / tracked).is_file() else [p.relative_to(REPO) for p in (REPO / tracked).rglob("*")]
        files = [f for f in files if (REPO / f).is_file() and not {"__pycache__", ".snakemake"} & set(Path(f).parts)]
        changed = [f for f in files if (REPO / f).read_bytes() != (ws / f).read_bytes()]
        assert not changed, changed
