"""Block diffusion's sampler (SDAR, Cheng et al. 2025; TraDo / TraceRL, Wang et al. 2025; LLaDA 2.x, Bie et al.
2025): bidirectional attention inside a block, causal attention across blocks, so a finished block is cached
exactly (a real KV cache, not Fast-dLLM's approximation).

**The protocol** (``BlockModel``). A block-diffusion model is anything with one method::

    logits, cache = model.block_forward(input_ids, position_ids, attention, cache, store)

* ``input_ids`` [N, n]: the tokens of the n positions that follow the cached ones (the cache holds C positions,
  C = 0 for ``cache=None``); ``position_ids`` [N, n] their positions (what the model's position embedding reads;
  left pads make them differ from the canvas index);
* ``attention`` [N, n, C + n] bool: True where query i may attend key j, the keys being the C cached positions
  then the n given ones (the caller builds it: :func:`block_attention`);
* ``store``: False returns ``cache`` unchanged (it may be returned as it came); True returns a cache holding the C
  positions and then the n given ones, their keys and values as this call computed them. The sampler passes a cache
  back only as it got it from the last ``store=True`` call, so an implementation may extend it in place (SDAR's
  ``DynamicCache`` with ``store_kv=True``);
* ``logits`` [N, n, V]: position i's logits predict ``input_ids[:, i]`` (a family with the autoregressive shift,
  Dream's, aligns them in its ``block_forward``).

A family without a cache satisfies the protocol by keeping the tokens, positions and attention of the stored
positions and recomputing them with every call: the result is the same, only slower (:class:`Recomputed` wraps a
cache-free forward this way). ``ddmrl.models.tiny_block``
(TinyBlockDDM) implements it with a real cache; the likelihood of a view (``ddmrl.likelihood.block``) uses the same
method with ``cache=None``.

**The layout.** Every canvas position t (prompt then completion, T = P + L) belongs to block
``floor((t - origin) / block_length)``: ``align: completion`` puts the origin at the completion's first position
(P), so the completion's blocks start with it and the prompt's blocks end with it (TraceRL's training layout,
dLLM-RL ``train/rl_sdar.py`` ``make_basic_block_attention``); ``align: sequence`` puts it at position 0 of the
canvas (SDAR's ``block_diffusion_generate``, LLaDA 2.x's ``generate``: the prompt's tail then shares a block with
the first completion tokens, and is re-read with them). A query attends every key of its own or an earlier block
that is not a pad (:func:`block_attention`); positions count from each row's first real token (:func:`positions`).
Under ``align: sequence`` blocks do too, as the releases count them for a prompt alone: each left-padded row is
moved left by its pad count modulo ``block_length`` (:func:`row_shifts`, :func:`shift_left`), so that its first
real token starts a block; the positions it frees at the canvas's end are a void, never attended or denoised, and
each row's completion is read back from where it then starts.

**The sampler.** The part of the canvas before the first block holding a completion position is prefilled into the
cache in one call (block-causal inside). Each block is then denoised in ``steps`` passes (a pass evaluates the block
only, against the cache) and, once it has no mask left, appended to the cache in one more pass. A pass proposes a
token at every position of the block (``temperature``, ``top_k``, ``top_p`` as SDAR's and LLaDA 2.x's
``sample_with_temperature_topk_topp``: top-k, then top-p, then a multinomial draw from ``generator``; the argmax at
temperature 0) and commits, among the block's masked positions, the ``k_s`` proposals of highest confidence (the
proposal's probability under that distribution), ``k_s`` SDAR's and LLaDA 2.x's ``get_num_transfer_tokens``: the
block's length split over the steps, the first ``remainder`` steps one more. With ``parallel: threshold`` a pass
commits instead every masked proposal whose confidence exceeds ``threshold`` when there are at least ``k_s`` of
them (SDAR's ``low_confidence_dynamic``, LLaDA 2.0's rule). ``kv_cache=False`` evaluates the whole canvas up to the
block's end at every pass, with the full block-causal mask and no cache (LLaDA 2.x's ``generate``): the same tokens
in float32 (tested), more compute. In bfloat16 the cached keys and values and the shorter calls round otherwise
(measured on the tiny LLaDA 2.0: logits up to 0.0078 apart, 3 of 18 sampled completions changed), so
``kv_cache=False`` is the exact mode for LLaDA 2.x's tokens; SDAR's ``generate`` caches as this sampler does.

**The releases' arithmetic, behind switches** (:class:`Params`, ``sampler.options.block``). ``selection``: among
equal confidences the default commits the lowest positions first (a stable ranking); ``release_topk`` runs
``torch.topk`` row by row over the masked confidences in their own dtype, as SDAR's and LLaDA 2.0's ``generate``
(:func:`release_topk`; its order among ties is unspecified: on this CPU the last tied position first). With top-k
1 every confidence is exactly 1 and only this rule decides what a pass commits. ``softmax_dtype: logits``: the
proposal distribution in the logits' own dtype, as SDAR's sampler on its model's un-upcast (bfloat16) logits;
LLaDA 2.x upcasts its logits to float32 in ``forward``, the default's dtype.

**Token editing** (LLaDA 2.1, ``editing_threshold``; None, the default, leaves the sampler as above). Every pass
also rewrites each already committed completion position of the block whose new proposal differs from its token
with confidence above ``editing_threshold`` (:func:`edits`; the prompt's tail is never edited), and a block is done
only after a pass that leaves no mask and edits nothing, or after ``max_post_steps`` passes over it without a mask:
LLaDA 2.1's ``generate`` loop, row by row (a finished row's block no longer changes while another row's goes on).
The ``steps`` schedule still sets each pass's count, and a pass beyond it commits at least one (2.1 has no
schedule: its count is ``num_to_transfer`` = 1, so ``steps: block_length`` reproduces it). ``reveal_step`` keeps
the pass that unmasked a token; an edit is no reveal (a trajectory method reading reveal steps does not see it).

Deviations from the released samplers (docs/families.md, "Block diffusion"): a batch of left-padded prompts (theirs
take one prompt; pads are never attended, positions and, under ``sequence``, blocks count from the first real
token); the defaults of ``selection`` and ``softmax_dtype`` (above); the last block ends with the
completion (they round the canvas up to whole blocks and denoise the extra masks too); temperature 0 is the argmax
(SDAR divides by 0, LLaDA 2.0 draws from softmax(logits)); the mask token is never proposed; a step commits at most
the masked count (SDAR's ``low_confidence_static`` can overwrite committed or prompt positions when ``k_s`` exceeds
it); no early stop at EOS, no SDAR ``sequential``/``entropy_bounded`` rules.

``reveal_step`` is the global index of the denoising pass that committed each token (counted across blocks), the
order TraceRL's trajectory views read; ``nfe`` counts every forward call: the prefill, each denoising pass and each
append (with ``kv_cache=False``, the passes only).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal, Protocol, get_args

import torch
from pydantic import Field

from ddmrl.config._base import Bool, Section, section
from ddmrl.samplers.base import SampleOutput, init_canvas

if TYPE_CHECKING:
    from ddmrl.config.sampler import SamplerConfig

ALIGNS = ("completion", "sequence")
PARALLEL_RULES = ("none", "threshold")
Selection = Literal["lowest_index_first", "release_topk"]
SoftmaxDtype = Literal["float32", "logits"]
SELECTIONS: tuple[str, ...] = get_args(Selection)
SOFTMAX_DTYPES: tuple[str, ...] = get_args(SoftmaxDtype)

__all__ = [
    "ALIGNS",
    "SELECTIONS",
    "SOFTMAX_DTYPES",
    "BlockModel",
    "Params",
    "Recomputed",
    "block_attention",
    "block_index",
    "block_spans",
    "edits",
    "generate",
    "lowest_index_first",
    "positions",
    "propose",
    "release_topk",
    "row_shifts",
    "shift_left",
    "transfer_counts",
]


@section
class Params(Section):
    """The block sampler's own keys (``sampler.options.block``, used with ``sampler.name: block``, every block family:
    TinyBlockDDM, SDAR / TraDo, LLaDA 2.x). Each default is ddmrl's rule; the other values reproduce a release's
    arithmetic where it differs (docs/families.md, "Block diffusion", and docs/reproduction.md)."""

    kv_cache: Bool = Field(
        True,
        description="Cache the keys and values of finished blocks (exact in real arithmetic; SDAR's generate does the "
        "same). false: recompute the canvas up to the block's end at every pass, as LLaDA 2.x's generate does: in "
        "bfloat16 the cache moves the logits by rounding (up to 0.09 on the tiny LLaDA 2.0), so false is the exact "
        "mode for LLaDA 2.x's tokens.",
    )
    selection: Selection = Field(
        "lowest_index_first",
        description="Which masked positions a pass commits among equal confidences: lowest_index_first (a stable "
        "ranking, the same on every device) or release_topk (the releases' quirk: torch.topk row by row over the "
        "confidences in their dtype, -inf off the masks, the threshold compared in that dtype, as SDAR's and LLaDA "
        "2.0's generate; torch.topk's order among ties is unspecified, on this CPU the last tied position first).",
    )
    softmax_dtype: SoftmaxDtype = Field(
        "float32",
        description="Dtype of the proposal distribution (softmax, top-k / top-p, the draw, the confidence): float32, "
        "or logits, the logits' own dtype (SDAR's released sampler: its model does not upcast its logits, so a "
        "bfloat16 SDAR samples from a bfloat16 softmax; LLaDA 2.x upcasts, float32 either way).",
    )


class BlockModel(Protocol):
    """What the block sampler and the block likelihood need from a model (the module docstring states the
    contract)."""

    def block_forward(
        self,
        input_ids: torch.Tensor,
        position_ids: torch.Tensor,
        attention: torch.Tensor,
        cache: Any | None = None,
        store: bool = False,
    ) -> tuple[torch.Tensor, Any]: ...


class Recomputed:
    """The protocol over a forward pass without a cache, ``forward(input_ids [N, T], position_ids [N, T], attention
    [N, T, T]) -> logits [N, T, V]`` (LLaDA 2.x's ``forward`` with its 4-D mask, for instance): the "cache" keeps the
    stored positions' tokens, positions and attention rows, and every call recomputes them with the new ones."""

    def __init__(self, forward: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]) -> None:
        self.forward = forward

    def block_forward(
        self,
        input_ids: torch.Tensor,
        position_ids: torch.Tensor,
        attention: torch.Tensor,
        cache: Any | None = None,
        store: bool = False,
    ) -> tuple[torch.Tensor, Any]:
        n, m = input_ids.shape
        old_ids, old_pos, old_att = cache if cache is not None else (input_ids[:, :0], position_ids[:, :0], None)
        c = old_ids.shape[1]
        rows = (
            attention
            if old_att is None
            else torch.cat([torch.cat([old_att, old_att.new_zeros(n, c, m)], 2), attention], 1)
        )
        ids, pos = torch.cat([old_ids, input_ids], 1), torch.cat([old_pos, position_ids], 1)  # [N, C + n]
        logits = self.forward(ids, pos, rows)[:, c:]
        return logits, ((ids, pos, rows) if store else cache)


def block_index(prompt_length: int, total: int, block_length: int, align: str) -> torch.Tensor:
    """[T] the block of every canvas position: ``floor((t - origin) / block_length)``, origin P (``completion``) or 0
    (``sequence``); prompt blocks are negative under ``completion``.

    >>> block_index(3, 7, 2, "completion").tolist()
    [-2, -1, -1, 0, 0, 1, 1]
    >>> block_index(3, 7, 2, "sequence").tolist()
    [0, 0, 1, 1, 2, 2, 3]
    """
    if align not in ALIGNS:
        raise ValueError(f"unknown align {align!r}; choose one of {ALIGNS}")
    origin = prompt_length if align == "completion" else 0
    return torch.div(torch.arange(total) - origin, block_length, rounding_mode="floor")


def block_spans(blocks: torch.Tensor, start: int) -> list[tuple[int, int]]:
    """[(lo, hi)] the runs of equal block index from the block that holds position ``start`` to the end.

    >>> block_spans(torch.tensor([0, 0, 1, 1, 2]), 3)
    [(2, 4), (4, 5)]
    """
    first = int((blocks == blocks[start]).nonzero()[0])
    bounds = [first] + [t for t in range(first + 1, len(blocks)) if blocks[t] != blocks[t - 1]] + [len(blocks)]
    return list(zip(bounds[:-1], bounds[1:], strict=True))


def block_attention(q_blocks: torch.Tensor, k_blocks: torch.Tensor, key_valid: torch.Tensor) -> torch.Tensor:
    """[N, n, K] True where a query of block ``q_blocks`` [n] may attend a key of block ``k_blocks`` [K]: the key's
    block is the query's or an earlier one, and the key is no pad (``key_valid`` [N, K]). A query with no such key
    (a pad among pads) attends the keys of its own and earlier blocks, pads included: its output is never read, and
    a fully masked row would give NaN."""
    causal = k_blocks[None, :] <= q_blocks[:, None]  # [n, K]
    allowed = causal[None] & key_valid[:, None, :]  # [N, n, K]
    return torch.where(allowed.any(-1, keepdim=True), allowed, causal[None])


def positions(valid: torch.Tensor) -> torch.Tensor:
    """[N, T] position ids counted from each row's first real token (``valid`` [N, T] False at pads; pads get 0).

    >>> positions(torch.tensor([[False, True, True], [True, True, True]])).tolist()
    [[0, 0, 1], [0, 1, 2]]
    """
    return (valid.long().cumsum(1) - 1).clamp_min(0)


def row_shifts(valid: torch.Tensor, block_length: int, align: str) -> torch.Tensor:
    """[N] how far each row of a left-padded canvas moves left (``valid`` [N, P] False at pads) so that its first
    real token starts a block: under ``align: sequence`` its pad count modulo ``block_length`` (SDAR's
    ``block_diffusion_generate`` and LLaDA 2.x's ``generate`` take one prompt and count blocks from its first token),
    under ``completion`` 0 (the blocks start at the completion, shared by every row).

    >>> row_shifts(torch.tensor([[True] * 4, [False] * 3 + [True], [False] * 2 + [True] * 2]), 2, "sequence").tolist()
    [0, 1, 0]
    """
    if align != "sequence":
        return torch.zeros(valid.shape[0], dtype=torch.long, device=valid.device)
    return (~valid).sum(1) % block_length


def shift_left(x: torch.Tensor, shift: torch.Tensor, fill: Any) -> torch.Tensor:
    """[N, T] row r of ``x`` [N, T] moved left by ``shift[r]`` positions (only pads leave at the front), the freed
    end set to ``fill`` (a void: the caller marks it invalid, never attended, never denoised).

    >>> shift_left(torch.tensor([[1, 2, 3], [4, 5, 6]]), torch.tensor([0, 1]), 0).tolist()
    [[1, 2, 3], [5, 6, 0]]
    """
    t = x.shape[1]
    src = torch.arange(t, device=x.device)[None] + shift[:, None]  # [N, T] the source of every position
    return x.gather(1, src.clamp_max(t - 1)).masked_fill(src >= t, fill)


def transfer_counts(length: int, steps: int) -> list[int]:
    """Tokens to commit at each of ``steps`` passes over a block of ``length`` positions: SDAR's and LLaDA 2.x's
    ``get_num_transfer_tokens`` (``length // steps``, the first ``length % steps`` one more).

    >>> transfer_counts(4, 3)
    [2, 1, 1]
    """
    return [length // steps + (s < length % steps) for s in range(steps)]


def propose(
    logits: torch.Tensor,
    temperature: float,
    top_k: int | None,
    top_p: float | None,
    generator: torch.Generator | None,
    keep_dtype: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(tokens [N, K], confidences [N, K]) from ``logits`` [N, K, V], as SDAR's and LLaDA 2.x's
    ``sample_with_temperature_topk_topp``: logits / temperature, the ``top_k`` best kept, then the ``top_p``
    nucleus (the token crossing the threshold kept), softmax, one multinomial draw per position (all positions of
    the block, in order); the confidence is the drawn token's probability. Temperature 0: the argmax, its confidence
    the untempered (filtered) probability. In float32, or with ``keep_dtype`` in the logits' dtype (SDAR's
    ``generate.py`` on its model's un-upcast logits: a bfloat16 softmax and draw for a bfloat16 model)."""
    n, k, v = logits.shape
    z = (logits if keep_dtype else logits.float()).reshape(n * k, v)
    if temperature > 0:
        z = z / temperature
    if top_k:
        kth = torch.topk(z, min(top_k, v)).values[:, -1:]
        z = z.masked_fill(z < kth, -torch.inf)
    if top_p is not None and top_p < 1.0:
        ordered, order = torch.sort(z, descending=True)
        beyond = torch.cumsum(torch.softmax(ordered, -1), -1) > top_p
        beyond[:, 1:] = beyond[:, :-1].clone()
        beyond[:, 0] = False
        z = z.masked_fill(torch.zeros_like(beyond).scatter(-1, order, beyond), -torch.inf)
    probs = torch.softmax(z, -1)  # [N K, V]
    if temperature > 0:
        token = torch.multinomial(probs, 1, generator=generator)  # [N K, 1]
    else:
        token = probs.argmax(-1, keepdim=True)
    return token.view(n, k), probs.gather(-1, token).view(n, k)


def lowest_index_first(conf: torch.Tensor, masked: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """[N, K] each row's ``k`` [N, 1] most confident ``masked`` positions by ``conf`` [N, K], ties to the lower
    index (a stable ranking in float64: the same choice on every device)."""
    conf = conf.double().masked_fill(~masked, -torch.inf)
    rank = conf.argsort(dim=1, descending=True, stable=True).argsort(dim=1)  # [N, K] 0 = most confident
    return (rank < k) & masked


def release_topk(conf: torch.Tensor, masked: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """[N, K] each row's ``k`` [N, 1] most confident ``masked`` positions as SDAR's ``block_diffusion_generate``
    (JetAstra/SDAR ``generate.py``) and LLaDA 2.0's ``generate`` (``modeling_llada2_moe.py``) choose them:
    ``torch.topk`` row by row over ``torch.where(mask, conf, -inf)`` in the confidences' own dtype. Among equal
    confidences ``torch.topk``'s order is unspecified (on this CPU: the last tied position first), so this is the
    release's choice only where the arithmetic is (same device and kernels)."""
    scored = torch.where(masked, conf, -torch.inf)  # [N, K] in conf's dtype, as the releases' confidence
    top = torch.zeros_like(masked)
    for j in range(scored.shape[0]):  # the releases' loop over rows
        top[j, torch.topk(scored[j], int(k[j])).indices] = True
    return top & masked


def _commits(
    conf: torch.Tensor, masked: torch.Tensor, count: int, threshold: float | None, selection: str
) -> torch.Tensor:
    """[N, K] the masked positions a pass commits: the ``count`` most confident (at most the masked count; ties by
    ``selection``: :func:`lowest_index_first` or :func:`release_topk`), or, with a ``threshold``, every masked one
    above it when there are at least ``count`` of them (compared in float64, or with ``release_topk`` in the
    confidences' dtype, as the releases' ``confidence > threshold``)."""
    k = masked.sum(1, keepdim=True).clamp_max(count)  # [N, 1]
    top = (release_topk if selection == "release_topk" else lowest_index_first)(conf, masked, k)
    if threshold is None:
        return top
    above = ((conf if selection == "release_topk" else conf.double()) > threshold) & masked
    return torch.where(above.sum(1, keepdim=True) >= count, above, top)


def edits(
    proposal: torch.Tensor, conf: torch.Tensor, current: torch.Tensor, masked: torch.Tensor, editing_threshold: float
) -> torch.Tensor:
    """LLaDA 2.1's token editing (``generate``'s ``editing_transfer_index``): [N, K] True at an already committed
    position (not ``masked``) whose new ``proposal`` differs from the ``current`` token with confidence above
    ``editing_threshold`` (the caller keeps the prompt's positions out)."""
    return ~masked & (conf > editing_threshold) & (proposal != current)


def keywords(sampler: SamplerConfig, steps: int, completion_length: int) -> dict:
    """The keys of the shared ``sampler:`` section this sampler's ``generate`` takes (``ddmrl.rollout.sampler_kwargs``
    adds ``temperature``): ``steps`` stays the budget over the completion, as for llada, split over the blocks
    (``generate``'s are per block)."""
    blocks = -(-completion_length // sampler.block_length)
    return {"cfg_scale": sampler.cfg_scale, "block_length": sampler.block_length, "steps": max(1, steps // blocks),
            "parallel": sampler.parallel, "threshold": sampler.threshold}  # fmt: skip


@torch.no_grad()
def generate(
    model: BlockModel,
    prompt_ids: torch.Tensor,
    completion_length: int,
    *,
    mask_id: int,
    block_length: int,
    steps: int,
    temperature: float = 0.0,
    top_k: int | None = None,
    top_p: float | None = None,
    parallel: str = "none",
    threshold: float = 0.9,
    align: str = "completion",
    kv_cache: bool = True,
    selection: str = "lowest_index_first",
    softmax_dtype: str = "float32",
    attention_mask: torch.Tensor | None = None,
    cfg_scale: float = 0.0,
    generator: torch.Generator | None = None,
    editing_threshold: float | None = None,
    max_post_steps: int = 16,
) -> SampleOutput:
    """Sample completions of ``completion_length`` tokens for ``prompt_ids`` [N, P] (left-padded; ``attention_mask``
    [N, P] 0 at pads, None: no pads) block by block, ``steps`` denoising passes per block (see the module
    docstring). ``parallel``: none (a fixed count per pass) or threshold (``threshold``, at least that count).
    ``align``: completion | sequence. ``kv_cache``: the exact cache of finished blocks (False: recompute).
    ``selection``, ``softmax_dtype``: the tie rule and the proposal's dtype (:class:`Params`).
    ``editing_threshold`` (None: off): LLaDA 2.1's token editing, up to ``max_post_steps`` passes once a block has
    no mask left (the module docstring)."""
    if parallel not in PARALLEL_RULES:
        raise ValueError(f"sampler.parallel = {parallel!r}: the block sampler takes one of {PARALLEL_RULES}")
    if cfg_scale:
        raise ValueError("sampler.cfg_scale: the block sampler has no classifier-free guidance (set 0)")
    choices = (("selection", selection, SELECTIONS), ("softmax_dtype", softmax_dtype, SOFTMAX_DTYPES))
    for key, value, allowed in choices:
        if value not in allowed:
            raise ValueError(f"sampler.options.block.{key} = {value!r}: choose one of {allowed}")
    if steps < 1 or block_length < 1 or completion_length < 1:
        raise ValueError(
            f"block sampler: steps = {steps}, block_length = {block_length}, completion_length = {completion_length} "
            "must be >= 1"
        )
    n, p = prompt_ids.shape
    x, _ = init_canvas(prompt_ids, completion_length, mask_id)  # [N, T]
    t = x.shape[1]
    dev = x.device
    valid = torch.ones(n, t, dtype=torch.bool, device=dev)
    if attention_mask is not None:
        valid[:, :p] = attention_mask.bool()
    shift = row_shifts(valid[:, :p], block_length, align)  # [N]
    x, valid = shift_left(x, shift, mask_id), shift_left(valid, shift, False)  # each row's blocks from its first token
    first = p - shift  # [N] each row's first completion position
    is_completion = (torch.arange(t, device=dev)[None] >= first[:, None]) & valid  # [N, T]
    reveal = torch.full((n, t), -1, dtype=torch.long, device=dev)  # [N, T]
    pos = positions(valid)  # [N, T]
    blocks = block_index(p, t, block_length, align).to(dev)  # [T]
    spans = block_spans(blocks, int(first.min()))
    threshold_or_none = threshold if parallel == "threshold" else None
    cache, nfe, step = None, 0, 0
    start = spans[0][0]
    if kv_cache and start > 0:  # the prompt's finished blocks, block-causal, in one call
        att = block_attention(blocks[:start], blocks[:start], valid[:, :start])
        _, cache = model.block_forward(x[:, :start], pos[:, :start], att, None, True)
        nfe += 1
    for lo, hi in spans:
        counts = transfer_counts(hi - lo, steps)
        done = torch.zeros(n, dtype=torch.bool, device=dev)  # editing: the rows whose block is final
        post = torch.zeros(n, dtype=torch.long, device=dev)  # editing: passes over a row's block without masks
        completion = is_completion[:, lo:hi]  # [N, K] the block's completion positions
        for s in itertools.count():
            masked = (x[:, lo:hi] == mask_id) & completion  # [N, K]
            if editing_threshold is None:
                if s >= len(counts) or not bool(masked.any()):
                    break
            else:  # LLaDA 2.1: on until a pass leaves no mask and edits nothing, at most max_post_steps mask-free
                post += ~masked.any(1) & ~done
                done |= post > max_post_steps
                if bool(done.all()):
                    break
            if kv_cache:
                att = block_attention(blocks[lo:hi], blocks[:hi], valid[:, :hi])  # [N, K, hi]
                logits = model.block_forward(x[:, lo:hi], pos[:, lo:hi], att, cache, False)[0]
            else:
                att = block_attention(blocks[:hi], blocks[:hi], valid[:, :hi])  # [N, hi, hi]
                logits = model.block_forward(x[:, :hi], pos[:, :hi], att, None, False)[0][:, lo:hi]
            nfe += 1
            keep = softmax_dtype == "logits"
            logits = (logits if keep else logits.float()).clone()
            logits[..., mask_id] = -torch.inf  # never propose the mask token itself
            proposal, conf = propose(logits, temperature, top_k, top_p, generator, keep)  # [N, K] each
            commit = _commits(conf, masked, counts[s] if s < len(counts) else 1, threshold_or_none, selection)
            change = commit
            if editing_threshold is not None:
                commit &= ~done[:, None]
                edit = edits(proposal, conf, x[:, lo:hi], masked, editing_threshold) & completion & ~done[:, None]
                change = commit | edit
                done |= ~masked.any(1) & ~edit.any(1)
            x[:, lo:hi] = torch.where(change, proposal, x[:, lo:hi])
            reveal[:, lo:hi][commit] = step
            step += 1
        if kv_cache and hi < t:  # the finished block joins the cache
            att = block_attention(blocks[lo:hi], blocks[:hi], valid[:, :hi])
            _, cache = model.block_forward(x[:, lo:hi], pos[:, lo:hi], att, cache, True)
            nfe += 1
    at = first[:, None] + torch.arange(completion_length, device=dev)  # [N, L] each row's completion
    return SampleOutput(x.gather(1, at), reveal.gather(1, at), nfe)
