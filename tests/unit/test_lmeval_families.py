"""lm-eval's ``ddmrl`` model (ddmrl.lmeval) on every real family's tiny random instance behind a pointer (as the
download stage writes one), with the family's sampler as docs/lmeval.md gives it: generate_until (batched, prompts
of two lengths left-padded) and loglikelihood (Monte Carlo and left-to-right) run and give finite values."""

from __future__ import annotations

import math

import pytest
import torch

pytest.importorskip("lm_eval")

from lm_eval.api.instance import Instance  # noqa: E402
from real_families import BUILDERS, missing  # noqa: E402

from ddmrl.lmeval import DdmrlLM  # noqa: E402
from ddmrl.models.checkpoint import write_pointer  # noqa: E402

#: model.kind -> the sampler keys of its command in docs/lmeval.md
SAMPLERS = {
    "llada": {"sampler.name": "llada", "sampler.block_length": 4},
    "dream": {"sampler.name": "dream"},
    "sdar": {"sampler.name": "block", "sampler.block_length": 4},
    "llada2": {"sampler.name": "block", "sampler.block_length": 4},
}


@pytest.mark.parametrize("kind", sorted(SAMPLERS))
def test_the_family_generates_and_scores_through_the_harness(kind, tmp_path, monkeypatch):
    if why := missing(kind):
        pytest.skip(why)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    path = tmp_path / kind
    BUILDERS[kind][0](path)
    write_pointer(path, {"kind": kind, "path_or_id": str(path), "trust_remote_code": True, "dtype": "float32"})
    lm = DdmrlLM(pretrained=str(path), batch_size=2, max_gen_toks=8, mc_num=4, **SAMPLERS[kind])
    assert not lm.bos  # a real checkpoint: the tokenizer's own special tokens
    gen = [Instance("generate_until", {}, (ctx, {"until": ["\n\n"]}), i) for i, ctx in enumerate(["ab", "abcabc"])]
    texts = lm.generate_until(gen)
    assert len(texts) == 2 and all(isinstance(t, str) for t in texts)
    req = Instance("loglikelihood", {}, ("abc", "ab"), 0)
    ((mc, _),) = lm.loglikelihood([req])
    lm.estimator = "left_to_right"
    ((l2r, greedy),) = lm.loglikelihood([req])
    assert math.isfinite(mc) and math.isfinite(l2r) and mc < 0 and l2r < 0 and isinstance(greedy, bool)
    assert torch.is_grad_enabled()  # the estimators leave autograd as they found it
