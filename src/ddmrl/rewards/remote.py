"""Scorers behind a local HTTP server, with bounded timeouts and retries.

Two patterns from the reference code (Flow-GRPO's and MaskGRPO's reward clients):

- :class:`UnifiedRewardClient`: an OpenAI-compatible chat server (``vllm serve`` / ``sglang.launch_server``) with
  a UnifiedReward checkpoint, queried as Flow-GRPO's ``unifiedreward_score_sglang`` does (same prompt text,
  greedy, 512 px PNG, ``Final Score:`` parsed and divided by 5).
- :class:`RewardServerClient`: yifan123/reward-server's protocol (MaskGRPO ``hpsv3_remote`` /
  ``unifiedreward_score``): a pickled ``{"images": [JPEG bytes], "prompts": [...]}`` POSTed to loopback, a pickled
  dict with ``"scores"`` back. Pickle runs code on load, so these clients refuse non-loopback URLs by default.

The reference clients retry up to 1000 times; here attempts and per-request timeouts are bounded and a server
that never answers gives one clear error.
"""

from __future__ import annotations

import base64
import io
import json
import logging
import math
import pickle
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from PIL import Image

from ddmrl.rewards.interface import ImageRewardModel, RewardSetupError

log = logging.getLogger(__name__)

LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})

# ------------------------------------------------------------------------------------------------ transport


def _opener() -> urllib.request.OpenerDirector:
    # no proxies: the servers are local (MaskGRPO passes proxies={"http": None, "https": None} for the same reason)
    return urllib.request.build_opener(urllib.request.ProxyHandler({}))


def check_loopback(url: str, scorer: str) -> None:
    """Refuse a URL whose host is not loopback (pickled replies must come from a process we started)."""
    host = urllib.parse.urlsplit(url).hostname
    if host not in LOOPBACK_HOSTS:
        raise ValueError(
            f"{scorer}: url {url!r} is not a loopback address; the pickle protocol is only safe with a local server "
            "(bind it to 127.0.0.1, or pass allow_remote=True if you trust that host)"
        )


def http_post(
    url: str,
    body: bytes,
    *,
    headers: dict[str, str],
    timeout_s: float,
    max_retries: int,
    backoff_s: float,
    scorer: str,
    hint: str,
) -> bytes:
    """POST ``body`` and return the reply body.

    Connection errors, timeouts, HTTP 429 and 5xx are retried ``max_retries`` times with exponential backoff
    (``backoff_s * 2**k``); other HTTP errors fail at once. Failure is one line naming the URL and ``hint``.
    """
    attempts = max_retries + 1
    last = ""
    opener = _opener()
    for k in range(attempts):
        if k:
            time.sleep(backoff_s * 2 ** (k - 1))
        req = urllib.request.Request(url, data=body, headers=headers, method="POST")
        try:
            with opener.open(req, timeout=timeout_s) as resp:
                return resp.read()
        except urllib.error.HTTPError as e:
            detail = e.read()[:300].decode("utf-8", "replace")
            last = f"HTTP {e.code}: {detail}"
            if e.code != 429 and e.code < 500:
                raise RuntimeError(f"{scorer}: {url} refused the request ({last})") from None
        except (urllib.error.URLError, ConnectionError, TimeoutError) as e:
            last = f"{type(e).__name__}: {getattr(e, 'reason', e)}"
        log.warning("%s: attempt %d/%d to %s failed (%s)", scorer, k + 1, attempts, url, last)
    raise RewardSetupError(f"{scorer}: no answer from {url} after {attempts} attempt(s) ({last}); {hint}")


def encode_image(image: Image.Image, fmt: str) -> bytes:
    """``image`` as RGB ``fmt`` bytes (PIL defaults: JPEG quality 75, as the reward-server clients)."""
    buf = io.BytesIO()
    image.convert("RGB").save(buf, format=fmt)
    return buf.getvalue()


# ------------------------------------------------------------------------------------------------ UnifiedReward

#: Flow-GRPO ``unifiedreward_score_sglang`` pointwise prompt, verbatim; ``{prompt}`` is the caption.
UNIFIED_REWARD_PROMPT = (
    "<image>\nYou are given a text caption and a generated image based on that caption. Your task is to evaluate "
    "this image based on two key criteria:\n1. Alignment with the Caption: Assess how well this image aligns with "
    "the provided caption. Consider the accuracy of depicted objects, their relationships, and attributes as "
    "described in the caption.\n2. Overall Image Quality: Examine the visual quality of this image, including "
    "clarity, detail preservation, color accuracy, and overall aesthetic appeal.\nBased on the above criteria, "
    "assign a score from 1 to 5 after 'Final Score:'.\nYour task is provided as follows:\nText Caption: [{prompt}]"
)
FINAL_SCORE = re.compile(r"Final Score:\s*([1-5](?:\.\d+)?)")


def parse_final_score(text: str | None) -> float | None:
    """The first ``Final Score: x`` in ``text`` (x in 1..5, optional decimals), or None."""
    m = FINAL_SCORE.search(text or "")
    return float(m.group(1)) if m else None


class UnifiedRewardClient(ImageRewardModel):
    """UnifiedReward pointwise score / ``scale`` (default 5, as Flow-GRPO and MaskGRPO), via an OpenAI-compatible
    ``/chat/completions`` endpoint.

    Per image: resized to ``image_size`` (Flow-GRPO: 512x512), PNG, sent as a ``data:image;base64,`` URL before
    the :data:`UNIFIED_REWARD_PROMPT` text; ``temperature=0``. A reply without a parsable ``Final Score`` gives
    NaN (``on_parse_failure="nan"``, the default; Flow-GRPO gives 0, ``"zero"``); failures are counted in
    ``parse_failures`` and logged per batch. Server errors are retried (bounded), then raised.
    """

    name = "unifiedreward"

    def __init__(
        self,
        base_url: str = "http://127.0.0.1:17140/v1",
        model: str = "UnifiedReward-7b-v1.5",
        api_key: str | None = None,
        timeout_s: float = 120.0,
        max_retries: int = 3,
        backoff_s: float = 1.0,
        max_concurrency: int = 8,
        image_size: int | None = 512,
        scale: float = 5.0,
        max_tokens: int | None = None,
        on_parse_failure: str = "nan",
        prompt_template: str = UNIFIED_REWARD_PROMPT,
    ) -> None:
        super().__init__()
        if on_parse_failure not in ("nan", "zero"):
            raise ValueError(f"{self.name}: on_parse_failure = {on_parse_failure!r}: must be 'nan' or 'zero'")
        if timeout_s <= 0 or max_retries < 0 or backoff_s < 0 or max_concurrency < 1 or scale <= 0:
            raise ValueError(
                f"{self.name}: need timeout_s > 0, max_retries >= 0, backoff_s >= 0, max_concurrency >= 1, scale > 0"
            )
        if "{prompt}" not in prompt_template:
            raise ValueError(f"{self.name}: prompt_template must contain '{{prompt}}'")
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.model, self.api_key = model, api_key
        self.timeout_s, self.max_retries, self.backoff_s = timeout_s, max_retries, backoff_s
        self.max_concurrency, self.image_size, self.scale = max_concurrency, image_size, scale
        self.max_tokens, self.on_parse_failure, self.prompt_template = max_tokens, on_parse_failure, prompt_template
        self.requests = 0
        self.parse_failures = 0
        self.last_replies: list[str] = []

    def _load(self) -> None:
        """Nothing to load in-process: the model lives in the server."""

    def _payload(self, image: Image.Image, prompt: str) -> bytes:
        if self.image_size:
            image = image.convert("RGB").resize((self.image_size, self.image_size))
        data_url = "data:image;base64," + base64.b64encode(encode_image(image, "PNG")).decode("ascii")
        body: dict[str, Any] = {
            "model": self.model,
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "image_url", "image_url": {"url": data_url}},
                        {"type": "text", "text": self.prompt_template.replace("{prompt}", prompt)},
                    ],
                }
            ],
            "temperature": 0,
        }
        if self.max_tokens is not None:
            body["max_tokens"] = self.max_tokens
        return json.dumps(body).encode("utf-8")

    def _ask(self, image: Image.Image, prompt: str) -> str:
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        raw = http_post(
            self.url,
            self._payload(image, prompt),
            headers=headers,
            timeout_s=self.timeout_s,
            max_retries=self.max_retries,
            backoff_s=self.backoff_s,
            scorer=self.name,
            hint="start the server first, e.g. `vllm serve CodeGoat24/UnifiedReward-qwen-7b --port PORT` "
            "(or sglang with UnifiedReward-7b-v1.5), and set base_url (see docs/rewards.md)",
        )
        try:
            return json.loads(raw)["choices"][0]["message"]["content"] or ""
        except (ValueError, KeyError, IndexError, TypeError) as e:
            raise RuntimeError(
                f"{self.name}: {self.url} did not return an OpenAI chat completion ({type(e).__name__}: {raw[:200]!r})"
            ) from None

    def _score(self, images: list[Image.Image], prompts: list[str]) -> list[float]:
        with ThreadPoolExecutor(max_workers=min(self.max_concurrency, len(images))) as pool:
            replies = list(pool.map(self._ask, images, prompts))
        self.requests += len(replies)
        self.last_replies = replies
        out, failed = [], 0
        for text in replies:
            value = parse_final_score(text)
            if value is None:
                failed += 1
                out.append(math.nan if self.on_parse_failure == "nan" else 0.0)
            else:
                out.append(value / self.scale)
        self.parse_failures += failed
        if failed:
            log.warning(
                "%s: %d/%d replies had no parsable 'Final Score' (scored %s); %d/%d so far",
                self.name,
                failed,
                len(replies),
                "NaN" if self.on_parse_failure == "nan" else "0",
                self.parse_failures,
                self.requests,
            )
        return out


# ------------------------------------------------------------------------------------------------ reward-server


def post_pickle(
    url: str,
    payload: dict[str, Any],
    *,
    timeout_s: float,
    max_retries: int,
    backoff_s: float,
    scorer: str,
    hint: str,
) -> dict[str, Any]:
    """POST a pickled ``payload`` to a reward-server and unpickle the reply dict."""
    raw = http_post(
        url,
        pickle.dumps(payload),
        headers={"Content-Type": "application/octet-stream"},
        timeout_s=timeout_s,
        max_retries=max_retries,
        backoff_s=backoff_s,
        scorer=scorer,
        hint=hint,
    )
    try:
        reply = pickle.loads(raw)  # noqa: S301 -- loopback server only (check_loopback)
    except Exception as e:  # a traceback page or truncated body
        raise RuntimeError(
            f"{scorer}: {url} did not return a pickled dict ({type(e).__name__}: {raw[:200]!r})"
        ) from None
    if not isinstance(reply, dict):
        raise RuntimeError(f"{scorer}: {url} returned a {type(reply).__name__}, expected a dict")
    return reply


class RewardServerClient(ImageRewardModel):
    """A yifan123/reward-server style scorer (MaskGRPO ``hpsv3_remote`` on 18087, ``unifiedreward_score`` on 18088,
    Flow-GRPO ``deqa_score_remote`` on 18086): JPEG batches of ``batch_size`` (64 in the reference), reply key
    ``response_key`` (``scores``; DeQA's server answers ``outputs``), each divided by ``scale`` (MaskGRPO: 5 for
    HPSv3 and UnifiedReward). ``send_prompts=False`` leaves prompts out (DeQA)."""

    name = "reward_server"

    def __init__(
        self,
        url: str = "http://127.0.0.1:18087",
        scale: float = 1.0,
        response_key: str = "scores",
        send_prompts: bool = True,
        batch_size: int = 64,
        timeout_s: float = 120.0,
        max_retries: int = 3,
        backoff_s: float = 1.0,
        allow_remote: bool = False,
    ) -> None:
        super().__init__()
        if not allow_remote:
            check_loopback(url, self.name)
        if batch_size < 1 or scale <= 0 or timeout_s <= 0 or max_retries < 0:
            raise ValueError(f"{self.name}: need batch_size >= 1, scale > 0, timeout_s > 0, max_retries >= 0")
        self.url, self.scale, self.response_key, self.send_prompts = url, scale, response_key, send_prompts
        self.batch_size, self.timeout_s = batch_size, timeout_s
        self.max_retries, self.backoff_s = max_retries, backoff_s

    def _load(self) -> None:
        """Nothing to load in-process: the model lives in the server."""

    def _score(self, images: list[Image.Image], prompts: list[str]) -> list[float]:
        out: list[float] = []
        for start in range(0, len(images), self.batch_size):
            batch = slice(start, start + self.batch_size)
            payload: dict[str, Any] = {"images": [encode_image(im, "JPEG") for im in images[batch]]}
            if self.send_prompts:
                payload["prompts"] = prompts[batch]
            reply = post_pickle(
                self.url,
                payload,
                timeout_s=self.timeout_s,
                max_retries=self.max_retries,
                backoff_s=self.backoff_s,
                scorer=self.name,
                hint="start the reward server (yifan123/reward-server, in its own environment) on that port",
            )
            if self.response_key not in reply:
                raise RuntimeError(
                    f"{self.name}: reply from {self.url} has no '{self.response_key}' key: {sorted(reply)}"
                )
            out.extend(float(s) / self.scale for s in reply[self.response_key])
        return out
