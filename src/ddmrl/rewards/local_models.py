"""In-process image scorers: ImageReward, HPSv3, CLIP score (open_clip, and MaskGRPO's HF CLIP reward), DeQA-Score.

Each wraps the official package's own inference call (docs/rewards.md) and changes nothing in how it
scores; what this module adds is lazy loading from a local weights path, batching, and one-line setup errors.
The packages behind ImageReward, HPSv3, open_clip and DeQA pull their own torch / torchvision / transformers pins,
so run them in their own environment (docs/rewards.md) or behind a loopback server (:mod:`ddmrl.rewards.remote`).
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from PIL import Image

from ddmrl.rewards.interface import (
    ImageRewardModel,
    RewardSetupError,
    default_device,
    require_module,
    require_path,
)


def _chunks(n: int, size: int) -> Iterator[slice]:
    for start in range(0, n, size):
        yield slice(start, min(start + size, n))


def _as_float(x: Any) -> float:
    return float(x.item()) if hasattr(x, "item") else float(x)


def _check_batch_size(scorer: str, batch_size: int) -> int:
    if int(batch_size) < 1:
        raise ValueError(f"{scorer}: batch_size = {batch_size}: must be >= 1")
    return int(batch_size)


# ------------------------------------------------------------------------------------------------ ImageReward


class ImageRewardScore(ImageRewardModel):
    """ImageReward-v1.0 (Xu et al. 2023; THUDM/ImageReward, BLIP-L + MLP head).

    Loads with ``ImageReward.load("ImageReward-v1.0", device=..., download_root=weights)`` exactly as the package
    README does; ``weights`` is the directory holding ``ImageReward.pt`` and ``med_config.json``. Scores with
    ``model.score(prompt, image)`` per pair (PIL input needs image-reward >= 1.3): the text is truncated to 35
    tokens, the image resized to 224 px, and the output standardised ``(r - 0.16717) / 1.03334`` by the package, so
    values are roughly N(0, 1) on its benchmark. Offline use: ``load`` calls ``hf_hub_download(local_dir=weights)``
    and BLIP loads the ``bert-base-uncased`` tokenizer, so set ``HF_HUB_OFFLINE=1`` and have that tokenizer in the
    HF cache.
    """

    name = "imagereward"
    SOURCE = (
        "download ImageReward.pt and med_config.json from the Hugging Face repo THUDM/ImageReward "
        "(`huggingface-cli download THUDM/ImageReward ImageReward.pt med_config.json --local-dir DIR`) and set "
        "weights: DIR"
    )

    def __init__(self, weights: str | Path | None = None, device: str | None = None) -> None:
        super().__init__()
        self.weights, self.device = weights, device
        self.model: Any = None

    def _load(self) -> None:
        rm = require_module("ImageReward", "image-reward==1.5", self.name)
        root = require_path(self.weights, self.name, "weights", self.SOURCE, is_dir=True)
        for fname in ("ImageReward.pt", "med_config.json"):
            require_path(root / fname, self.name, "weights", self.SOURCE)
        self.model = rm.load("ImageReward-v1.0", device=default_device(self.device), download_root=str(root))

    def _score(self, images: list[Image.Image], prompts: list[str]) -> list[float]:
        import torch

        with torch.no_grad():
            return [_as_float(self.model.score(p, im.convert("RGB"))) for im, p in zip(images, prompts, strict=True)]


# ------------------------------------------------------------------------------------------------ HPSv3


class HPSv3Score(ImageRewardModel):
    """HPSv3 (Ma et al. 2025; MizzenAI/HPSv3, Qwen2-VL-7B reward model): the mean mu of its [mu, sigma] output.

    ``hpsv3.HPSv3RewardInferencer(config_path=..., checkpoint_path=weights, device=...)``, then
    ``reward(prompts=..., image_paths=...)`` **by keyword**: the positional order differs between repo versions
    and MaskGRPO calls it positionally (``grpo/reward_func.py``). The inferencer wants file paths, so each batch is
    written to temporary PNGs. ``config_path`` overrides the packaged ``HPSv3_7B.yaml``, whose
    ``model_name_or_path`` must name a local Qwen2-VL-7B-Instruct copy when there is no hub.
    """

    name = "hpsv3"
    SOURCE = (
        "download HPSv3.safetensors from the Hugging Face repo MizzenAI/HPSv3 "
        "(`huggingface-cli download MizzenAI/HPSv3 HPSv3.safetensors --local-dir DIR`) and set "
        "weights: DIR/HPSv3.safetensors"
    )

    def __init__(
        self,
        weights: str | Path | None = None,
        device: str | None = None,
        config_path: str | Path | None = None,
        batch_size: int = 8,
    ) -> None:
        super().__init__()
        self.weights, self.device, self.config_path = weights, device, config_path
        self.batch_size = _check_batch_size(self.name, batch_size)
        self.inferencer: Any = None

    def _load(self) -> None:
        hpsv3 = require_module("hpsv3", "hpsv3==1.0.0", self.name)
        ckpt = require_path(self.weights, self.name, "weights", self.SOURCE)
        config = None
        if self.config_path is not None:
            config = str(
                require_path(self.config_path, self.name, "config_path", "point it at a copy of HPSv3_7B.yaml")
            )
        self.inferencer = hpsv3.HPSv3RewardInferencer(
            config_path=config, checkpoint_path=str(ckpt), device=default_device(self.device)
        )

    def _score(self, images: list[Image.Image], prompts: list[str]) -> list[float]:
        out: list[float] = []
        with tempfile.TemporaryDirectory(prefix="hpsv3_") as tmp:
            for sl in _chunks(len(images), self.batch_size):
                paths = []
                for i, im in enumerate(images[sl], start=sl.start):
                    path = Path(tmp) / f"{i:06d}.png"
                    im.convert("RGB").save(path)
                    paths.append(str(path))
                rewards = self.inferencer.reward(prompts=prompts[sl], image_paths=paths)  # [B, 2]: mu, sigma
                out.extend(_as_float(row[0]) for row in rewards)
        return out


# ------------------------------------------------------------------------------------------------ CLIP score


class OpenCLIPScore(ImageRewardModel):
    """CLIP score (Hessel et al. 2021, torchmetrics convention): 100 * cos(image embedding, text embedding), each
    L2-normalised, clamped at >= 0 per image; open_clip tokenizer (77 tokens, truncated).

    Backbone: ``arch`` (default ViT-H-14) with the checkpoint file ``weights`` (default meant:
    laion/CLIP-ViT-H-14-laion2B-s32B-b79K ``open_clip_pytorch_model.bin``), loaded by
    ``open_clip.create_model_and_transforms(arch, pretrained=weights)``; report the backbone with the number.
    torchmetrics clamps the batch mean instead; the two differ only when some cosine is negative.
    """

    name = "clip"
    SOURCE = (
        "download open_clip_pytorch_model.bin from the Hugging Face repo laion/CLIP-ViT-H-14-laion2B-s32B-b79K "
        "(or the checkpoint of the configured arch) and set weights: PATH/open_clip_pytorch_model.bin"
    )

    def __init__(
        self,
        weights: str | Path | None = None,
        arch: str = "ViT-H-14",
        device: str | None = None,
        batch_size: int = 32,
    ) -> None:
        super().__init__()
        self.weights, self.arch, self.device = weights, arch, device
        self.batch_size = _check_batch_size(self.name, batch_size)
        self.model: Any = None
        self.preprocess: Any = None
        self.tokenizer: Any = None

    def _load(self) -> None:
        open_clip = require_module("open_clip", "open-clip-torch", self.name)
        ckpt = require_path(self.weights, self.name, "weights", self.SOURCE)
        self.device = default_device(self.device)
        model, _, preprocess = open_clip.create_model_and_transforms(
            self.arch, pretrained=str(ckpt), device=self.device
        )
        self.model, self.preprocess = model.eval(), preprocess
        self.tokenizer = open_clip.get_tokenizer(self.arch)

    def _score(self, images: list[Image.Image], prompts: list[str]) -> list[float]:
        import torch

        out: list[float] = []
        with torch.no_grad():
            for sl in _chunks(len(images), self.batch_size):
                pixels = torch.stack([self.preprocess(im.convert("RGB")) for im in images[sl]]).to(self.device)
                tokens = self.tokenizer(prompts[sl]).to(self.device)
                img = self.model.encode_image(pixels).float()  # [B, D]
                txt = self.model.encode_text(tokens).float()  # [B, D]
                img = img / img.norm(dim=-1, keepdim=True)
                txt = txt / txt.norm(dim=-1, keepdim=True)
                out.extend((100.0 * (img * txt).sum(-1)).clamp(min=0.0).tolist())  # [B]
        return out


class HFCLIPScore(ImageRewardModel):
    """MaskGRPO's ``reward_clip_score`` (grpo/reward_func.py): cosine similarity of the HF ``CLIPModel`` image and
    text embeddings, **not** scaled by 100 and not clamped (values in [-1, 1]).

    ``weights`` is a local directory in ``save_pretrained`` layout (MaskGRPO uses openai/clip-vit-large-patch14).
    The processor call matches MaskGRPO: ``padding=True, truncation=True, max_length=77, do_resize=True,
    do_center_crop=False`` (so images of one batch must share an aspect ratio; MMaDA's are square).
    """

    name = "clip_hf"
    SOURCE = (
        "download the Hugging Face repo openai/clip-vit-large-patch14 "
        "(`huggingface-cli download openai/clip-vit-large-patch14 --local-dir DIR`) and set weights: DIR"
    )

    def __init__(self, weights: str | Path | None = None, device: str | None = None, batch_size: int = 32) -> None:
        super().__init__()
        self.weights, self.device = weights, device
        self.batch_size = _check_batch_size(self.name, batch_size)
        self.model: Any = None
        self.processor: Any = None

    def _load(self) -> None:
        from transformers import CLIPModel, CLIPProcessor

        root = require_path(self.weights, self.name, "weights", self.SOURCE, is_dir=True)
        require_path(root / "config.json", self.name, "weights", self.SOURCE)
        self.device = default_device(self.device)
        self.model = CLIPModel.from_pretrained(str(root)).to(self.device).eval()
        self.processor = CLIPProcessor.from_pretrained(str(root))

    def _score(self, images: list[Image.Image], prompts: list[str]) -> list[float]:
        import torch

        out: list[float] = []
        with torch.no_grad():
            for sl in _chunks(len(images), self.batch_size):
                inputs = self.processor(
                    text=prompts[sl],
                    images=[im.convert("RGB") for im in images[sl]],
                    padding=True,
                    truncation=True,
                    max_length=77,
                    return_tensors="pt",
                    do_resize=True,
                    do_center_crop=False,
                ).to(self.device)
                res = self.model(**inputs)  # image_embeds, text_embeds: [B, D], L2-normalised by CLIPModel
                out.extend((res.image_embeds * res.text_embeds).sum(-1).float().tolist())  # [B]
        return out


# ------------------------------------------------------------------------------------------------ DeQA-Score


class DeQAScore(ImageRewardModel):
    """DeQA-Score (You et al. 2025; zhiyuanyou/DeQA-Score-Mix3, mPLUG-Owl2 7B): image quality in [1, 5]; the
    prompt is ignored.

    Loaded as reward-server's ``app_deqa`` does: ``AutoModelForCausalLM.from_pretrained(weights,
    trust_remote_code=True, attn_implementation="eager", torch_dtype=float16 on GPU)``; scored with the remote
    code's own ``model.score(images)``, which pads each image to a square with the mean colour, asks "How would you
    rate the quality of this image?" and returns softmax(logits of excellent, good, fair, poor, bad) . [5, 4, 3, 2,
    1]. Reward-server divides by 5 for RL; this returns the raw [1, 5] value. The remote code needs transformers
    4.36.1 and loads the ``q-future/one-align`` tokenizer at construction (have it in the HF cache, set
    ``HF_HUB_OFFLINE=1``).
    """

    name = "deqa"
    SOURCE = (
        "download the Hugging Face repo zhiyuanyou/DeQA-Score-Mix3 "
        "(`huggingface-cli download zhiyuanyou/DeQA-Score-Mix3 --local-dir DIR`) and set weights: DIR"
    )

    def __init__(self, weights: str | Path | None = None, device: str | None = None, batch_size: int = 8) -> None:
        super().__init__()
        self.weights, self.device = weights, device
        self.batch_size = _check_batch_size(self.name, batch_size)
        self.model: Any = None

    def _load(self) -> None:
        import torch
        import transformers

        root = require_path(self.weights, self.name, "weights", self.SOURCE, is_dir=True)
        require_path(root / "config.json", self.name, "weights", self.SOURCE)
        self.device = default_device(self.device)
        dtype = torch.float16 if self.device.startswith("cuda") else torch.float32
        try:
            model = transformers.AutoModelForCausalLM.from_pretrained(
                str(root), trust_remote_code=True, attn_implementation="eager", torch_dtype=dtype
            )
        except (ImportError, AttributeError, TypeError) as e:
            raise RewardSetupError(
                f"{self.name}: the DeQA remote code failed to load with transformers {transformers.__version__} "
                f"({type(e).__name__}: {e}); it needs transformers==4.36.1 in its own environment (docs/rewards.md)"
            ) from None
        self.model = model.to(self.device).eval()
        self.model.requires_grad_(False)

    def _score(self, images: list[Image.Image], prompts: list[str]) -> list[float]:
        import torch

        out: list[float] = []
        with torch.no_grad():
            for sl in _chunks(len(images), self.batch_size):
                out.extend(_as_float(s) for s in self.model.score([im.convert("RGB") for im in images[sl]]))
        return out
