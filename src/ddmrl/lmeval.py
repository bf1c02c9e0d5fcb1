"""lm-evaluation-harness's model ``ddmrl``: any checkpoint ddmrl saves or points to, evaluated by the harness
(``pip install -e ".[lmeval]"``; docs/lmeval.md).

    python -m ddmrl.lmeval --model ddmrl --model_args pretrained=data/sft/model,sampler.steps=64 \\
        --include_path my_tasks --tasks gsm8k_local

(``python -m ddmrl.lmeval`` is lm-eval's own command line with this module imported: lm-eval 0.4 finds a model
outside its package only once the module that registers it is imported.) ``--model_args``:

* ``pretrained``: a model directory (``ddmrl.models.checkpoint.load_checkpoint``: an embedded TinyDDM or
  TinyBlockDDM, or a pointer to a real checkpoint of any family); ``peft``: a LoRA adapter directory (peft's
  ``save_pretrained``) applied to it and merged. A GRPO run's saved model already has its adapters merged.
* ``sampler.<key>``: the ``sampler:`` keys of params.yaml (``ddmrl.config.SamplerConfig``: ``sampler.name``,
  ``sampler.steps``, ``sampler.block_length``, ...; ``sampler.options.<sampler>.<key>`` a sampler's own), on top of
  the ``evaluate.sampler`` of ``params=<params.yaml>`` (``profile=<name>``: with that profile's overlay) when given,
  else of the defaults. ``generate_until`` samples
  with it exactly as ddmrl's own evaluation does (``ddmrl.rollout``), in batches of ``batch_size`` prompts
  left-padded to the longest (``prompt_length=<P>``: to P tokens, the embedded tasks' fixed layout), then cuts each
  completion at its first ``until`` string. A task's ``max_gen_toks`` sets the completion length (else
  ``max_gen_toks``), its ``temperature`` (``do_sample: false``: 0) the sampler's temperature.
* ``loglikelihood``: ``mc`` (LLaDA's Monte Carlo ELBO, ``mc_num`` views, default 128), ``exact_elbo`` (every mask
  enumerated, short continuations), ``left_to_right`` (exact, one token per step; a block-diffusion model with
  block length 1: its exact likelihood); ``ddmrl.likelihood.sequence``. A block-diffusion model (``sampler.name:
  block``) reads blocks of ``sampler.block_length``; ``sampler.cfg_scale`` guides the likelihoods as the sampling
  (LLaDA's ``cfg``). ``is_greedy`` is exact with ``left_to_right``, computed that
  way with ``greedy_check=true``, else False.
* ``loglikelihood_rolling`` (perplexity tasks) is refused: a masked diffusion model has no exact likelihood of a
  whole text.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from lm_eval.api.model import LM
from lm_eval.api.registry import register_model

from ddmrl import config
from ddmrl.config import ConfigError, SamplerConfig
from ddmrl.io import DataError
from ddmrl.likelihood.sequence import exact_elbo, left_to_right, mc_elbo
from ddmrl.models.checkpoint import adapter_of, load_checkpoint
from ddmrl.models.tokenizer import decode_completion
from ddmrl.rollout import sample_ids
from ddmrl.seeding import generator

__all__ = [
    "ESTIMATORS", "DdmrlLM", "check_tasks", "cut_at", "encode_context", "evaluate_tasks", "left_pad", "sampler_config",
    "task_manager",
]  # fmt: skip

ESTIMATORS = ("mc", "exact_elbo", "left_to_right")
SAMPLER_PREFIX = "sampler."


def sampler_config(args: dict[str, Any], base: SamplerConfig | None = None) -> SamplerConfig:
    """``base`` (default: the schema's defaults) with the ``sampler.<key>`` entries of ``args`` on top
    (``sampler.options.<sampler>.<key>``: a sampler's own key); validated by the schema (one-line ``ConfigError``)."""
    values = dataclasses.asdict(base or SamplerConfig())
    for key, value in args.items():
        *path, last = key.removeprefix(SAMPLER_PREFIX).split(".")
        node = values
        for part in path:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"ddmrl model_args: {key} = {value!r}: sampler.{part} is not a section")
        node[last] = value
    return SamplerConfig(**values)


def encode_context(tok, text: str, bos: bool) -> list[int]:
    """Token ids of a harness context as ddmrl encodes a prompt (``ddmrl.tasks.encoding.encode_prompts``): a real
    checkpoint's with the tokenizer's defaults (``bos`` False), the embedded tokenizer's (which adds nothing) after
    BOS (``bos`` True)."""
    ids = tok(text)["input_ids"]
    return [tok.bos_token_id, *ids] if bos else ids


def left_pad(rows: Sequence[Sequence[int]], pad_id: int, length: int | None = None) -> torch.Tensor:
    """[N, P] the rows left-padded with ``pad_id`` to ``length`` (None: the longest row)."""
    p = length or max(map(len, rows))
    if any(len(r) > p for r in rows):
        raise ValueError(f"a prompt has {max(map(len, rows))} tokens > prompt_length {p}")
    return torch.tensor([[pad_id] * (p - len(r)) + list(r) for r in rows], dtype=torch.long)


def cut_at(text: str, until: Sequence[str]) -> str:
    """``text`` up to the first occurrence of any of ``until`` (lm-eval's stop sequences)."""
    cut = min((i for s in until if s and (i := text.find(s)) >= 0), default=len(text))
    return text[:cut]


def split_pair(tok, context: str, continuation: str, bos: bool) -> tuple[list[int], list[int]]:
    """(context ids, continuation ids) as lm-eval's HF model splits a pair: trailing spaces of the context move to
    the continuation, the whole is encoded once and split at the context's length."""
    spaces = len(context) - len(context.rstrip(" "))
    context, continuation = context[: len(context) - spaces], context[len(context) - spaces :] + continuation
    whole, ctx = encode_context(tok, context + continuation, bos), encode_context(tok, context, bos)
    return whole[: len(ctx)], whole[len(ctx) :]


def request_seed(seed: int, *parts: str) -> torch.Generator:
    """A generator seeded by ``seed`` and the request's text: an estimate does not depend on batching or order."""
    return generator(seed, "lmeval", hashlib.sha256("\x00".join(parts).encode()).hexdigest())


@register_model("ddmrl")
class DdmrlLM(LM):
    """A ddmrl model directory as an lm-eval ``LM`` (see the module docstring for the arguments)."""

    def __init__(
        self,
        pretrained: str,
        peft: str | None = None,
        params: str | None = None,
        profile: str | None = None,
        batch_size: int | str = 16,
        device: str | None = None,
        max_gen_toks: int = 256,
        prompt_length: int | None = None,
        loglikelihood: str = "mc",
        mc_num: int = 128,
        greedy_check: bool = False,
        seed: int = 0,
        skip_special_tokens: bool | None = None,
        max_batch_size: int | None = None,
        **sampler_args: Any,
    ) -> None:
        super().__init__()
        unknown = sorted(k for k in sampler_args if not k.startswith(SAMPLER_PREFIX))
        if unknown:
            raise ConfigError(f"ddmrl model_args: unknown {', '.join(unknown)} (sampler keys are sampler.<key>)")
        if loglikelihood not in ESTIMATORS:
            raise ConfigError(f"ddmrl model_args: loglikelihood = {loglikelihood!r}; choose one of {ESTIMATORS}")
        base = config.load(params, profile).evaluate.sampler if params else None
        self.sampler = sampler_config(sampler_args, base)
        cpu_only = str(device).startswith("cuda") and not torch.cuda.is_available()  # lm-eval's CLI default: cuda
        self.model, self.tok = load_model(pretrained, peft, "auto" if device is None or cpu_only else device)
        self._device = next(self.model.parameters()).device
        self.batch_size = int(batch_size) if str(batch_size).isdigit() else 16  # "auto": the default
        self.max_gen_toks, self.prompt_length = int(max_gen_toks), prompt_length
        self.estimator, self.mc_num, self.greedy_check = loglikelihood, int(mc_num), bool(greedy_check)
        self.seed = int(seed)
        self.skip_special_tokens = bool(self.tok.chat_template) if skip_special_tokens is None else skip_special_tokens
        if hasattr(self.model, "block_forward") != (self.sampler.name == "block"):
            kind = "a block-diffusion" if hasattr(self.model, "block_forward") else "not a block-diffusion"
            raise ConfigError(f"ddmrl model_args: {pretrained} is {kind} model: sampler.name = {self.sampler.name!r}")
        self.block_length = self.sampler.block_length if self.sampler.name == "block" else None
        self.max_length = getattr(self.model.config, "max_position_embeddings", None)
        self.bos = adapter_of(self.model) is None  # the embedded models: BOS + prompt (a pointer: a real checkpoint)

    # ------------------------------------------------------------------------------------------- generation

    def generate_until(self, requests, disable_tqdm: bool = False) -> list[str]:
        """Completions of each request's context, sampled in batches of requests with the same length and
        temperature (in their order), each cut at its ``until`` strings."""
        out: list[str] = [""] * len(requests)
        groups: dict[tuple[int, float], list[int]] = {}
        for i, req in enumerate(requests):
            groups.setdefault(self._gen_settings(req.args[1]), []).append(i)
        gen = torch.Generator().manual_seed(self.seed)  # as ddmrl.evaluation.evaluate: only temperature > 0 draws
        for (length, temperature), idx in groups.items():
            sampler = dataclasses.replace(self.sampler, temperature=temperature)
            for lo in range(0, len(idx), self.batch_size):
                chunk = idx[lo : lo + self.batch_size]
                prompts = left_pad([encode_context(self.tok, requests[i].args[0], self.bos) for i in chunk],
                                   self.tok.pad_token_id, self.prompt_length)  # fmt: skip
                ids = sample_ids(self.model, self.tok, prompts.to(self._device), length, sampler, gen)
                for i, row in zip(chunk, ids.cpu(), strict=True):
                    text = decode_completion(self.tok, row.tolist(), self.skip_special_tokens)
                    out[i] = cut_at(text, _until(requests[i].args[1]))
                    self.cache_hook.add_partial("generate_until", requests[i].args, out[i])
        return out

    def _gen_settings(self, gen_kwargs: dict[str, Any]) -> tuple[int, float]:
        """(completion length, temperature) of a request's ``gen_kwargs``."""
        length = int(gen_kwargs.get("max_gen_toks", self.max_gen_toks))
        temperature = float(gen_kwargs.get("temperature", self.sampler.temperature))
        if gen_kwargs.get("do_sample") is False:
            temperature = 0.0
        return length, temperature

    # ------------------------------------------------------------------------------------------- likelihood

    def loglikelihood(self, requests, disable_tqdm: bool = False) -> list[tuple[float, bool]]:
        """(log p(continuation | context), is_greedy) per request, by the ``loglikelihood`` estimator."""
        out = []
        for req in requests:
            context, continuation = req.args
            ctx, cont = split_pair(self.tok, context, continuation, self.bos)
            if not cont:
                raise ValueError(f"ddmrl loglikelihood: empty continuation after {context[-40:]!r}")
            if self.max_length and len(ctx) + len(cont) > self.max_length:
                ctx = ctx[len(ctx) + len(cont) - self.max_length :]  # the context's tail, as lm-eval's HF model
            out.append(self._score(torch.tensor(ctx), torch.tensor(cont), context, continuation))
            self.cache_hook.add_partial("loglikelihood", req.args, out[-1])
        return out

    def _score(self, ctx: torch.Tensor, cont: torch.Tensor, *text: str) -> tuple[float, bool]:
        """(estimate, is_greedy) of ``cont`` [L] after ``ctx`` [P]; ``text``: the request's (seeds the MC views)."""
        args = (self.model, ctx, cont, self.tok.mask_token_id)
        kw = {"batch_size": self.batch_size, "block_length": self.block_length, "cfg_scale": self.sampler.cfg_scale}
        if self.estimator == "left_to_right":
            return left_to_right(*args, **kw)
        if self.estimator == "exact_elbo":
            ll = exact_elbo(*args, **kw)
        else:
            ll = mc_elbo(*args, samples=self.mc_num, gen=request_seed(self.seed, *text), **kw)[0]
        return ll, self.greedy_check and left_to_right(*args, **kw)[1]

    def loglikelihood_rolling(self, requests, disable_tqdm: bool = False) -> list[float]:
        raise NotImplementedError(
            "ddmrl: loglikelihood_rolling (perplexity tasks) is not defined for a masked diffusion model, whose "
            "likelihood of a whole text is only bounded (ELBO); use loglikelihood or generate_until tasks"
        )

    # ------------------------------------------------------------------------------------------- chat

    @property
    def tokenizer_name(self) -> str:
        return str(getattr(self.tok, "name_or_path", "ddmrl")).replace("/", "__")

    def chat_template(self, chat_template: bool | str = False) -> str | None:
        return self.tok.chat_template if chat_template else None

    def apply_chat_template(self, chat_history: list[dict[str, str]], add_generation_prompt: bool = True) -> str:
        return self.tok.apply_chat_template(chat_history, tokenize=False, add_generation_prompt=add_generation_prompt)


def _until(gen_kwargs: dict[str, Any]) -> list[str]:
    until = gen_kwargs.get("until") or []
    return [until] if isinstance(until, str) else list(until)


def load_model(pretrained: str, peft: str | None, device: str):
    """(model, tokenizer) of a ddmrl model directory, with the LoRA adapter at ``peft`` merged in when given."""
    if not Path(pretrained).is_dir():
        raise FileNotFoundError(f"ddmrl model_args: pretrained = {pretrained!r} is not a model directory")
    model, tok = load_checkpoint(pretrained, device=device)
    if peft:
        from peft import PeftModel

        if not (Path(peft) / "adapter_config.json").is_file():
            raise FileNotFoundError(f"ddmrl model_args: peft = {peft!r} holds no adapter_config.json")
        model = PeftModel.from_pretrained(model, peft).merge_and_unload().eval()
    return model, tok


# ------------------------------------------------------------------------------------------------ tasks


def check_tasks(task_manager, names: Sequence[str]) -> None:
    """Refuse, in one line naming it, a task the harness does not know or whose dataset is not here: a local data
    file that is missing, or a hub dataset while hub access is off (``HF_DATASETS_OFFLINE`` / ``HF_HUB_OFFLINE``)."""
    for name in names:
        entry = task_manager.task_index.get(name)
        if entry is None:
            raise DataError(f"lm_eval task {name!r}: no such task (add its YAML under the include path)")
        cfg = entry.cfg or {}
        if "dataset_path" not in cfg:  # a group or tag: its own tasks are checked when named
            continue
        files = _data_files((cfg.get("dataset_kwargs") or {}).get("data_files"))
        missing = [f for f in files if not Path(f).exists()]
        if missing:
            raise DataError(f"lm_eval task {name!r}: dataset file {missing[0]} is missing")
        path = str(cfg["dataset_path"])
        if not files and not Path(path).exists() and datasets_offline():
            raise DataError(f"lm_eval task {name!r}: dataset {path!r} is not a local file and hub access is off")


def datasets_offline() -> bool:
    """True when ``datasets`` may not reach the hub: ``HF_DATASETS_OFFLINE`` or ``HF_HUB_OFFLINE`` set true now."""
    flags = (os.environ.get(v, "").strip().upper() for v in ("HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE"))
    return any(f in {"1", "ON", "YES", "TRUE"} for f in flags)


def _data_files(spec: Any) -> list[str]:
    """The paths of a ``data_files`` value (a path, a list, or a split -> path(s) mapping)."""
    if spec is None:
        return []
    if isinstance(spec, str):
        return [spec]
    if isinstance(spec, dict):
        return [f for v in spec.values() for f in _data_files(v)]
    return [f for v in spec for f in _data_files(v)]


def task_manager(include_path: str = "") -> Any:
    """lm-eval's ``TaskManager`` over the YAML tasks under ``include_path`` (lm-eval's own tasks are then not
    indexed: they read hub datasets), or over lm-eval's own tasks when it is empty."""
    from lm_eval.tasks import TaskManager

    return TaskManager(include_path=include_path or None, include_defaults=not include_path)


def evaluate_tasks(
    lm: LM, manager: Any, tasks: Sequence[str], num_fewshot: dict[str, int] | None = None, limit: int = 0,
    seed: int = 0,
) -> dict[str, Any]:  # fmt: skip
    """lm-eval's ``simple_evaluate`` of ``lm`` on ``tasks`` of ``manager`` (:func:`task_manager`), each task's
    few-shot count from ``num_fewshot`` (a group's: each of its tasks'), ``limit`` items per task (0: all), every
    seed ``seed``; the datasets checked first (:func:`check_tasks`). Returns lm-eval's results (``results``,
    ``groups``, ``n-shot``, ``n-samples``, ``configs``, ``versions``, ...) as plain JSON."""
    import json

    from lm_eval import simple_evaluate
    from lm_eval.utils import handle_non_serializable

    check_tasks(manager, tasks)
    specs: list[Any] = list(tasks)
    for i, name in enumerate(tasks):
        if name in (num_fewshot or {}):
            loaded = manager.load([name])
            top = loaded["groups"].get(name) or loaded["tasks"][name]
            for task in top.get_all_tasks() if name in loaded["groups"] else [top]:
                task.set_config(key="num_fewshot", value=num_fewshot[name])
            specs[i] = top
    out = simple_evaluate(
        model=lm, tasks=specs, task_manager=manager, limit=limit or None, log_samples=False, random_seed=seed,
        numpy_random_seed=seed, torch_random_seed=seed, fewshot_random_seed=seed,
    )  # fmt: skip
    keep = ("results", "groups", "group_subtasks", "n-shot", "n-samples", "configs", "versions", "higher_is_better")
    return json.loads(json.dumps({k: out[k] for k in keep if k in out}, default=handle_non_serializable))


def main(argv: list[str] | None = None) -> None:
    """lm-eval's command line with the ``ddmrl`` model registered. The tasks of ``--include_path`` named by
    ``--tasks`` are checked first (:func:`check_tasks`): a missing dataset ends it in one line (exit status 2)."""
    import argparse

    from lm_eval.__main__ import cli_evaluate

    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(add_help=False)
    ap.add_argument("--tasks")
    ap.add_argument("--include_path")
    known, _ = ap.parse_known_args(argv)
    if known.tasks and known.include_path:
        manager = task_manager(known.include_path)
        local = [t for t in known.tasks.split(",") if t in manager.task_index]  # lm-eval's own: lm-eval checks them
        try:
            check_tasks(manager, local)
        except DataError as e:
            print(f"error: {e}", file=sys.stderr)
            sys.exit(2)
    sys.argv = [sys.argv[0], *argv]
    cli_evaluate()


if __name__ == "__main__":
    main()
