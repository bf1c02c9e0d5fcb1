"""The paper profile's DAG, run end to end on a stand-in: ``paper_llada_math`` with its checkpoint replaced by a tiny
LLaDA-shaped model that ships its own ``modeling_llada.py`` (loaded through ``trust_remote_code``, as
LLaDA-8B-Instruct is) and its data by three GSM8K test items, both given as local paths. Every stage runs its own
command line from the DAG: download (fetch = use the local paths, manifests, pointer), rollout, reward, credit,
GRPO with LoRA on LLaDA's module names (diffu-GRPO and MaskGRPO), evaluation with d1's protocol, tables.
"""

from __future__ import annotations

import json
import os
import string
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import load_file, save_file
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from ddmrl.config import deep_merge, load
from ddmrl.pipeline import dag

REPO = Path(__file__).resolve().parents[2]
GSM8K = REPO / "tests" / "fixtures" / "benchmarks" / "gsm8k_test.jsonl"
pytestmark = pytest.mark.slow
LORA_TARGETS = {"q_proj", "k_proj", "v_proj", "attn_out", "ff_proj", "up_proj", "ff_out"}  # the profile's list

CONFIGURATION = """
from transformers import PretrainedConfig


class LLaDAConfig(PretrainedConfig):
    model_type = "llada_standin"

    def __init__(self, vocab_size=128, d_model=16, n_heads=2, mask_token_id=0, **kwargs):
        self.vocab_size, self.d_model, self.n_heads, self.mask_token_id = vocab_size, d_model, n_heads, mask_token_id
        kwargs.setdefault("tie_word_embeddings", False)
        super().__init__(**kwargs)
"""

#: one block under LLaDA's module names (attention q/k/v_proj and attn_out; SwiGLU ff_proj, up_proj, ff_out); the MMaDA
#: stand-in (test_paper_standin_mmada.py) has the same layers, as MMaDA-8B has LLaDA's
LAYERS = """
    def __init__(self, config):
        super().__init__(config)
        d = config.d_model
        self.wte = nn.Embedding(config.vocab_size, d)
        self.q_proj, self.k_proj, self.v_proj, self.attn_out = (nn.Linear(d, d) for _ in range(4))
        self.ff_proj, self.up_proj, self.ff_out = nn.Linear(d, 2 * d), nn.Linear(d, 2 * d), nn.Linear(2 * d, d)
        self.lm_head = nn.Linear(d, config.vocab_size)
        self.post_init()

    @property
    def qkv(self):
        return self.q_proj, self.k_proj, self.v_proj

    def get_input_embeddings(self):
        return self.wte
"""

MODELING = (
    """
import torch
from torch import nn
from transformers import PreTrainedModel
from transformers.modeling_outputs import CausalLMOutputWithPast

from .configuration_llada import LLaDAConfig


class LLaDAModelLM(PreTrainedModel):
    config_class = LLaDAConfig
"""
    + LAYERS
    + """
    def forward(self, input_ids, attention_mask=None, **kwargs):
        h = self.wte(input_ids)
        b, length, d = h.shape
        q, k, v = (p(h).view(b, length, self.config.n_heads, -1).transpose(1, 2) for p in self.qkv)
        a = nn.functional.scaled_dot_product_attention(q, k, v)  # bidirectional
        h = h + self.attn_out(a.transpose(1, 2).reshape(b, length, d))
        h = h + self.ff_out(nn.functional.silu(self.ff_proj(h)) * self.up_proj(h))
        return CausalLMOutputWithPast(logits=self.lm_head(h))
"""
)

TEMPLATE = (
    "{% for m in messages %}<|start_header_id|>{{ m['role'] }}<|end_header_id|>\n\n{{ m['content'] }}<|eot_id|>"
    "{% endfor %}{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}"
)
SPECIALS = ["<|mdm_mask|>", "<|endoftext|>", "<|eot_id|>", "<|start_header_id|>", "<|end_header_id|>", "[UNK]"]


def standin_llada(path: Path) -> None:
    """A checkpoint directory shaped like LLaDA-8B-Instruct's: remote code in auto_map, a chat template, mask id
    from config.json, EOS padding."""
    words = [*SPECIALS, "<reasoning>", "</reasoning>", "<answer>", "</answer>"]
    vocab = {t: i for i, t in enumerate([*words, *sorted(set(string.printable))])}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    core.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    core.decoder = decoders.Fuse()
    tok = PreTrainedTokenizerFast(tokenizer_object=core, eos_token="<|endoftext|>", unk_token="[UNK]")
    tok.add_tokens(words[6:])
    tok.add_special_tokens({"additional_special_tokens": SPECIALS[2:5]})
    tok.chat_template = TEMPLATE
    path.mkdir(parents=True)
    (path / "configuration_llada.py").write_text(CONFIGURATION)
    (path / "modeling_llada.py").write_text(MODELING)
    auto = {"AutoConfig": "configuration_llada.LLaDAConfig", "AutoModel": "modeling_llada.LLaDAModelLM"}
    config = {"model_type": "llada_standin", "auto_map": auto, "vocab_size": len(tok), "mask_token_id": 0}
    (path / "config.json").write_text(json.dumps({**config, "architectures": ["LLaDAModelLM"]}))
    tok.save_pretrained(path)
    weights = layer_weights(len(tok), scale=0.3)
    # digits, EOS and "x" likely: some completions are all digits (d1's int reward), so groups differ in reward
    weights["lm_head.bias"] = torch.zeros(len(tok))
    weights["lm_head.bias"][tok.convert_tokens_to_ids([*"0123456789x", "<|endoftext|>"])] = 6.0
    save_file(weights, str(path / "model.safetensors"), metadata={"format": "pt"})


def layer_weights(vocab: int, d: int = 16, scale: float = 0.5) -> dict[str, torch.Tensor]:
    """Random weights (seed 0) of :data:`LAYERS` over a vocabulary of ``vocab`` tokens."""
    g = torch.Generator().manual_seed(0)
    shapes = {"wte.weight": (vocab, d), "lm_head.weight": (vocab, d), "lm_head.bias": (vocab,)}
    shapes |= {f"{n}.weight": (d, d) for n in ("q_proj", "k_proj", "v_proj", "attn_out")}
    shapes |= {"ff_proj.weight": (2 * d, d), "up_proj.weight": (2 * d, d), "ff_out.weight": (d, 2 * d)}
    shapes |= {f"{n}.bias": (shapes[f"{n}.weight"][0],) for n in sorted(LORA_TARGETS)}  # a fixed draw order
    return {k: scale * torch.randn(s, generator=g) for k, s in shapes.items()}


def standin_profile(root: Path, model_dir: Path) -> None:
    """profiles/standin.yaml: paper_llada_math with local stand-ins and a few-second scale."""
    paper = yaml.safe_load((REPO / "profiles" / "paper_llada_math.yaml").read_text())
    sampler = {"block_length": 8, "steps": 8}
    small = {
        "tasks": ["gsm8k"],
        "task_params": {"gsm8k": {"train": str(GSM8K), "eval": str(GSM8K), "completion_length": 16}},
        "model": {"path_or_id": str(model_dir), "revision": None, "dtype": "float32"},
        "download": {
            "num_eval": 2,
            "hub": [
                {"name": "llada-8b-instruct", "repo_id": str(model_dir)},
                {"name": "gsm8k", "repo_id": str(GSM8K), "repo_type": "dataset"},
            ],
        },
        "rollout": {"num_prompts": 2, "num_generations": 2, "sampler": sampler},
        "evaluate": {"batch_size": 2, "sampler": sampler},
        "grpo": {
            "seeds": [0], "max_steps": 3, "num_prompts": 2, "num_generations": 4, "num_iterations": 1,
            "gradient_accumulation_steps": 1, "save_steps": 0, "mixed_precision": "no", "learning_rate": 1.0e-2,
            "lora": {"r": 4, "alpha": 8.0, "dropout": 0.0}, "sampler": sampler,
            "launch": {"launcher": "python", "num_processes": 1},
        },
        "methods": {"maskgrpo": {"sampler": sampler}},
    }  # fmt: skip
    (root / "profiles").mkdir()
    (root / "profiles" / "standin.yaml").write_text(yaml.safe_dump(deep_merge(paper, small), sort_keys=False))
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    (root / "params.yaml").write_text(yaml.safe_dump({**params, "profile": "standin"}, sort_keys=False))


@pytest.fixture
def standin_repo(tmp_path):
    model_dir = tmp_path / "hub" / "llada-standin"
    standin_llada(model_dir)
    root = tmp_path / "repo"
    root.mkdir()
    standin_profile(root, model_dir)
    for d in ("stages", "configs"):
        (root / d).symlink_to(REPO / d)
    return root, model_dir


def run(root: Path, stage: dag.Stage, env: dict) -> None:
    cmd = [sys.executable, *stage.cmd.split()[1:]]
    result = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, f"{stage.name}: {result.stderr[-3000:]}"


def test_paper_dag_runs_on_a_llada_shaped_standin(standin_repo, tmp_path):
    root, model_dir = standin_repo
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
           "HF_MODULES_CACHE": str(tmp_path / "hf_modules"), "OMP_NUM_THREADS": "1"}  # fmt: skip
    cfg = load(root / "params.yaml")
    stages = dag.build(cfg)
    assert "sft" not in {s.name for s in stages}, "the paper profile starts RL from the Instruct model"
    for stage in stages:
        run(root, stage, env)

    # download: manifests of both items, and a pointer (not a copy) pinned by their digests
    data = root / "data"
    manifests = sorted(p.name for p in (data / "download" / "manifests").iterdir())
    assert manifests == ["gsm8k.manifest.json", "llada-8b-instruct.manifest.json"]
    pointer = json.loads((data / "download" / "base" / "ddmrl_model.json").read_text())
    assert pointer["kind"] == "llada" and pointer["path_or_id"] == str(model_dir) and pointer["trust_remote_code"]
    assert set(pointer["manifests"]) == {"gsm8k", "llada-8b-instruct"}
    held_out = (data / "download" / "tasks" / "gsm8k" / "eval.jsonl").read_text().splitlines()
    assert len(held_out) == 2 and all(json.loads(r)["gold"]["split"] == "test" for r in held_out)

    # GRPO trained LoRA adapters on LLaDA's names and saved them merged, with the model's own code and a pointer
    before = load_file(model_dir / "model.safetensors")
    for run_name in ("diffu_grpo_gsm8k_s0", "maskgrpo_gsm8k_s0"):
        out = data / "grpo" / run_name / "model"
        assert (out / "modeling_llada.py").exists() and (out / "ddmrl_model.json").exists()
        after = load_file(out / "model.safetensors")
        assert set(after) == set(before), "adapters merged: the saved weights have the checkpoint's names"
        changed = [k for k in before if not torch.equal(before[k], after[k])]
        assert changed and {k.split(".")[0] for k in changed} <= LORA_TARGETS, changed
        metrics = json.loads((data / "evaluate" / run_name / "gsm8k.json").read_text())
        assert metrics["n"] == 2 and 0.0 <= metrics["accuracy"] <= 100.0
    table = (data / "tables").iterdir()
    assert any(p.suffix == ".md" for p in table)
