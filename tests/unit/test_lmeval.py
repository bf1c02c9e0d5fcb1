"""lm-evaluation-harness's model ``ddmrl`` (ddmrl.lmeval) through the harness's own Python API (simple_evaluate) on
local YAML tasks over local JSONL: a GSM8K-format generation task and a multiple-choice task, on a tiny TinyDDM."""

from __future__ import annotations

import json

import pytest
import torch

pytest.importorskip("lm_eval")

from lm_eval import simple_evaluate  # noqa: E402
from lm_eval.tasks import TaskManager  # noqa: E402
from lmeval_tasks import UNTIL, write_tasks  # noqa: E402

from ddmrl.config import SamplerConfig  # noqa: E402
from ddmrl.evaluation import evaluate  # noqa: E402
from ddmrl.io import DataError  # noqa: E402
from ddmrl.likelihood.sequence import mc_elbo  # noqa: E402
from ddmrl.lmeval import DdmrlLM, check_tasks, cut_at, request_seed, sampler_config, split_pair  # noqa: E402
from ddmrl.models.checkpoint import save_checkpoint  # noqa: E402
from ddmrl.models.tokenizer import build_tokenizer  # noqa: E402
from ddmrl.tasks import make_task  # noqa: E402
from ddmrl.tasks.encoding import prompt_length  # noqa: E402

SAMPLER = {"sampler.block_length": 10, "sampler.steps": 15}  # arith: 30 completion tokens, 3 blocks, 2 per step


@pytest.fixture(scope="module")
def arith():
    return make_task("arith")


@pytest.fixture(scope="module")
def items(arith):
    return arith.held_out(6, seed=0)


def sharpen(model: torch.nn.Module) -> torch.nn.Module:
    """Weights drawn wider than the init, so that the tiny model's confidences spread and its texts differ."""
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() > 1:
                p.normal_(0, 0.5, generator=torch.Generator().manual_seed(p.numel()))
    return model


@pytest.fixture
def checkpoint(arith, make_model, tmp_path):
    """A sharp tiny random TinyDDM over arith's tokenizer, saved as ddmrl saves models."""
    tok = build_tokenizer([arith.alphabet], arith.special_tokens)
    model = make_model(max_positions=prompt_length(arith) + arith.completion_length, seed=3, tokenizer=tok)
    save_checkpoint(sharpen(model), tok, tmp_path / "model")
    return tmp_path / "model"


@pytest.fixture
def block_checkpoint(arith, tmp_path):
    """A sharp tiny random TinyBlockDDM (blocks of 10) over arith's tokenizer, saved as ddmrl saves models."""
    from ddmrl.models.tiny_block import TinyBlockDDMConfig, TinyBlockDDMForMaskedLM

    tok = build_tokenizer([arith.alphabet], arith.special_tokens)
    torch.manual_seed(0)
    cfg = TinyBlockDDMConfig(block_size=10, vocab_size=len(tok), hidden_size=16, num_layers=1, num_heads=2,
                             intermediate_size=32, max_position_embeddings=40, mask_token_id=tok.mask_token_id,
                             pad_token_id=tok.pad_token_id)  # fmt: skip
    save_checkpoint(sharpen(TinyBlockDDMForMaskedLM(cfg).eval()), tok, tmp_path / "block")
    return tmp_path / "block"


@pytest.mark.parametrize("family", ["tiny", "tiny_block"])
def test_generations_equal_ddmrls_own_evaluation_token_for_token(family, arith, items, request, tmp_path):
    """The same items, prompts (BOS, left-padded to the task's P) and sampler (LLaDA's; the block sampler for
    TinyBlockDDM): the harness's completions are ddmrl.evaluation.evaluate's, cut at ``until``; the harness scores
    them with the task's regex filter."""
    checkpoint = request.getfixturevalue("checkpoint" if family == "tiny" else "block_checkpoint")
    name = {"sampler.name": "llada" if family == "tiny" else "block"}
    lm = DdmrlLM(pretrained=str(checkpoint), batch_size=4, prompt_length=prompt_length(arith), **SAMPLER, **name)
    tm = write_tasks(tmp_path, arith, items)
    out = simple_evaluate(model=lm, tasks=["arith_gsm8k"], task_manager=tm, bootstrap_iters=0, log_samples=True)
    got = {s["doc_id"]: s["resps"][0][0] for s in out["samples"]["arith_gsm8k"]}

    sampler = SamplerConfig(name=name["sampler.name"], block_length=10, steps=15)
    _, records = evaluate(lm.model, lm.tok, arith, items, sampler, batch_size=4)
    want = [cut_at(r["generation"], [UNTIL]) for r in records]
    assert [got[i] for i in range(len(items))] == want
    assert len(set(want)) > 1  # the model generates different texts for different prompts
    assert "exact_match,strict-match" in out["results"]["arith_gsm8k"]


def test_multiple_choice_scores_are_llada_monte_carlo_elbos(arith, items, checkpoint, tmp_path):
    """loglikelihood: per (context, choice) LLaDA's MC estimate with the request's own seed; accuracy from them."""
    lm = DdmrlLM(pretrained=str(checkpoint), mc_num=8, batch_size=8)
    tm = write_tasks(tmp_path, arith, items)
    out = simple_evaluate(model=lm, tasks=["arith_choice"], task_manager=tm, bootstrap_iters=0, log_samples=True)
    sample = min(out["samples"]["arith_choice"], key=lambda s: s["doc_id"])
    ex = items[sample["doc_id"]]
    for (ll, greedy), choice in zip((r[0] for r in sample["resps"]), sample["doc"]["choices"], strict=True):
        ctx, cont = split_pair(lm.tok, ex.prompt, choice, bos=True)
        gen = request_seed(0, ex.prompt, choice)
        assert ll == mc_elbo(lm.model, torch.tensor(ctx), torch.tensor(cont), lm.tok.mask_token_id, samples=8,
                             batch_size=8, gen=gen)[0]  # fmt: skip
        assert greedy is False
    assert 0 <= out["results"]["arith_choice"]["acc,none"] <= 1


def test_left_to_right_and_rolling_refusal(checkpoint):
    lm = DdmrlLM(pretrained=str(checkpoint), loglikelihood="left_to_right")
    from lm_eval.api.instance import Instance

    req = Instance("loglikelihood", {}, ("<arith>1+2", "<answer>03"), 0)
    (ll, greedy), = lm.loglikelihood([req])  # fmt: skip
    assert ll < 0 and isinstance(greedy, bool)
    with pytest.raises(NotImplementedError, match="loglikelihood_rolling"):
        lm.loglikelihood_rolling([req])


def test_model_args_are_sampler_keys_validated_by_the_schema(checkpoint):
    """sampler.<key> on top of the defaults or of a profile's evaluate.sampler (sampler.options.<sampler>.<key>: a
    sampler's own keys), refused in one line when the schema refuses them."""
    from pathlib import Path

    from ddmrl import config

    assert sampler_config({"sampler.steps": 8, "sampler.name": "maskgit"}).steps == 8
    params = Path(__file__).resolve().parents[2] / "params.yaml"
    dream = sampler_config({"sampler.options.dream.alg": "maskgit_plus", "sampler.steps": 64},
                           config.load(params, "paper_dream_math").evaluate.sampler)  # fmt: skip
    assert (dream.name, dream.steps, dream.temperature) == ("dream", 64, 0.2)
    assert dream.options["dream"] == {"alg": "maskgit_plus", "top_p": 0.95, "alg_temp": 0.0}
    lm = DdmrlLM(pretrained=str(checkpoint), params=str(params), profile="paper_llada_math", **{"sampler.steps": 4})
    assert (lm.sampler.block_length, lm.sampler.steps) == (32, 4)
    with pytest.raises(Exception, match="stepz: unknown key"):
        sampler_config({"sampler.stepz": 8})
    with pytest.raises(Exception, match="unknown mc_nums"):
        DdmrlLM(pretrained=str(checkpoint), mc_nums=3)
    with pytest.raises(Exception, match="is not a block-diffusion model: sampler.name = 'block'"):
        DdmrlLM(pretrained=str(checkpoint), **{"sampler.name": "block"})


def test_a_missing_dataset_is_refused_in_one_line_naming_it(arith, items, tmp_path, monkeypatch):
    tm = write_tasks(tmp_path, arith, items)
    check_tasks(tm, ["arith_gsm8k", "arith_choice"])
    (tmp_path / "mc.jsonl").unlink()
    with pytest.raises(DataError, match=r"^lm_eval task 'arith_choice': dataset file .*mc\.jsonl is missing$"):
        check_tasks(tm, ["arith_choice"])
    with pytest.raises(DataError, match="'nope': no such task"):
        check_tasks(tm, ["nope"])
    (tmp_path / "hub.yaml").write_text("task: hub_task\ndataset_path: org/data\noutput_type: generate_until\n"
                                       "doc_to_text: q\ndoc_to_target: a\ntest_split: test\n")  # fmt: skip
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    with pytest.raises(DataError, match="'hub_task': dataset 'org/data' is not a local file and hub access is off"):
        check_tasks(TaskManager(include_path=str(tmp_path), include_defaults=False), ["hub_task"])


def test_a_lora_adapter_is_applied_and_merged(checkpoint, tmp_path):
    """peft=<adapter dir>: the model the harness evaluates is the base with the adapter merged, as a GRPO run with
    lora.r > 0 saves it (``ddmrl.training.distributed.save_policy``)."""
    from peft import LoraConfig, PeftModel, get_peft_model

    base = DdmrlLM(pretrained=str(checkpoint)).model
    lora = get_peft_model(base, LoraConfig(r=2, target_modules=["qkv", "proj"], init_lora_weights=False))
    lora.save_pretrained(tmp_path / "adapter")
    merged = PeftModel.from_pretrained(DdmrlLM(pretrained=str(checkpoint)).model, tmp_path / "adapter")
    merged = merged.merge_and_unload()
    lm = DdmrlLM(pretrained=str(checkpoint), peft=str(tmp_path / "adapter"))
    x = torch.tensor([[2, 5, 6, 0, 0]])
    with torch.no_grad():
        plain = DdmrlLM(pretrained=str(checkpoint)).model(x).logits
        assert torch.equal(lm.model(x).logits, merged(x).logits) and not torch.allclose(lm.model(x).logits, plain)
    with pytest.raises(FileNotFoundError, match="holds no adapter_config.json"):
        DdmrlLM(pretrained=str(checkpoint), peft=str(tmp_path))


def test_lm_evals_command_line_runs_the_ddmrl_model(arith, items, checkpoint, tmp_path, monkeypatch):
    """``python -m ddmrl.lmeval`` is lm-eval's command line with ``--model ddmrl`` registered (sampler keys in
    ``--model_args``); it writes lm-eval's results JSON. (Slow part: lm-eval indexes its own ~15k tasks, ~8 s.)"""
    from ddmrl.lmeval import main

    write_tasks(tmp_path, arith, items)
    monkeypatch.chdir(tmp_path)
    args = f"pretrained={checkpoint},sampler.block_length=10,sampler.steps=15,mc_num=4,prompt_length=7"
    main(["--model", "ddmrl", "--model_args", args, "--include_path", str(tmp_path), "--tasks",
          "arith_gsm8k,arith_choice", "--limit", "2", "--output_path", "out"])  # fmt: skip
    (results,) = (tmp_path / "out").rglob("results_*.json")
    out = json.loads(results.read_text())
    assert out["config"]["model"] == "ddmrl" and set(out["results"]) == {"arith_gsm8k", "arith_choice"}


def test_the_command_line_refuses_a_missing_dataset_in_one_line(arith, items, checkpoint, tmp_path, capsys):
    from ddmrl.lmeval import main

    write_tasks(tmp_path, arith, items)
    (tmp_path / "gsm.jsonl").unlink()
    with pytest.raises(SystemExit) as exit_:
        main(["--model", "ddmrl", "--model_args", f"pretrained={checkpoint}", "--include_path", str(tmp_path),
              "--tasks", "arith_choice,arith_gsm8k"])  # fmt: skip
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith("error: lm_eval task 'arith_gsm8k': dataset file ") and "gsm" in err
