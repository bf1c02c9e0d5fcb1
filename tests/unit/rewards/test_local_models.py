"""In-process scorers, wired against stand-in packages with the official call signatures (ImageReward, hpsv3,
open_clip, DeQA remote code) and against a tiny random HF CLIPModel (transformers is installed here)."""

import math
import sys
import types
from pathlib import Path

import pytest
import torch
from PIL import Image

from ddmrl.rewards.interface import RewardSetupError
from ddmrl.rewards.local_models import DeQAScore, HFCLIPScore, HPSv3Score, ImageRewardScore, OpenCLIPScore

RED, GREEN, BLUE = (255, 0, 0), (0, 255, 0), (0, 0, 255)


def solid(color, size=(8, 8)):
    return Image.new("RGB", size, color)


# ------------------------------------------------------------------------------------------------ ImageReward


@pytest.fixture
def fake_imagereward(monkeypatch):
    """``ImageReward`` with the package's ``load(name, device, download_root)`` and ``model.score(prompt, image)``."""
    mod = types.ModuleType("ImageReward")
    mod.loads = []

    class Model:
        def score(self, prompt, image):
            assert isinstance(prompt, str) and isinstance(image, Image.Image), "score(prompt, image) order"
            return len(prompt) + image.getpixel((0, 0))[0] / 255.0

    def load(name="ImageReward-v1.0", device="cpu", download_root=None):
        mod.loads.append({"name": name, "device": device, "download_root": download_root})
        return Model()

    mod.load = load
    monkeypatch.setitem(sys.modules, "ImageReward", mod)
    return mod


def imagereward_dir(tmp_path):
    d = tmp_path / "ImageReward"
    d.mkdir()
    (d / "ImageReward.pt").write_bytes(b"weights")
    (d / "med_config.json").write_text("{}")
    return d


def test_imagereward_wiring(fake_imagereward, tmp_path):
    d = imagereward_dir(tmp_path)
    m = ImageRewardScore(weights=d, device="cpu")
    assert fake_imagereward.loads == []  # lazy
    assert m.score([solid(RED), solid(BLUE)], ["a cat", "a"]) == [6.0, 1.0]
    m.score([solid(RED)], ["x"])
    assert fake_imagereward.loads == [{"name": "ImageReward-v1.0", "device": "cpu", "download_root": str(d)}]


def test_imagereward_missing_weights(fake_imagereward, tmp_path):
    with pytest.raises(RewardSetupError, match=r"imagereward: weights directory .*absent not found.*THUDM/ImageRew"):
        ImageRewardScore(weights=tmp_path / "absent").score([solid(RED)], ["p"])
    (tmp_path / "partial").mkdir()
    (tmp_path / "partial" / "ImageReward.pt").write_bytes(b"w")
    with pytest.raises(RewardSetupError, match=r"med_config\.json not found"):
        ImageRewardScore(weights=tmp_path / "partial").score([solid(RED)], ["p"])


def test_imagereward_missing_package(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "ImageReward", None)
    with pytest.raises(RewardSetupError, match=r"'ImageReward' is not importable .*pip install image-reward==1\.5"):
        ImageRewardScore(weights=imagereward_dir(tmp_path)).score([solid(RED)], ["p"])


# ------------------------------------------------------------------------------------------------ HPSv3


@pytest.fixture
def fake_hpsv3(monkeypatch):
    """``hpsv3.HPSv3RewardInferencer``: ``reward`` is keyword-only here, so a positional call fails the test."""
    mod = types.ModuleType("hpsv3")
    mod.inits, mod.calls = [], []

    class HPSv3RewardInferencer:
        def __init__(self, config_path=None, checkpoint_path=None, device="cuda", differentiable=False):
            mod.inits.append({"config_path": config_path, "checkpoint_path": checkpoint_path, "device": device})

        def reward(self, *, prompts, image_paths):
            mod.calls.append((list(prompts), list(image_paths)))
            rows = []
            for prompt, path in zip(prompts, image_paths, strict=True):
                assert Path(path).suffix == ".png" and Path(path).is_file()
                with Image.open(path) as im:
                    red = im.getpixel((0, 0))[0]
                rows.append([len(prompt) + red / 255.0, 0.25])  # [mu, sigma]
            return torch.tensor(rows)

    mod.HPSv3RewardInferencer = HPSv3RewardInferencer
    monkeypatch.setitem(sys.modules, "hpsv3", mod)
    return mod


def test_hpsv3_wiring_keywords_mu_and_temp_pngs(fake_hpsv3, tmp_path):
    ckpt = tmp_path / "HPSv3.safetensors"
    ckpt.write_bytes(b"w")
    cfg = tmp_path / "HPSv3_7B.yaml"
    cfg.write_text("model_name_or_path: /local/qwen\n")
    m = HPSv3Score(weights=ckpt, device="cpu", config_path=cfg, batch_size=2)
    assert fake_hpsv3.inits == []
    out = m.score([solid(RED), solid(BLUE), solid(RED)], ["ab", "abc", ""])
    assert out == pytest.approx([3.0, 3.0, 1.0])  # mu, never sigma
    assert fake_hpsv3.inits == [{"config_path": str(cfg), "checkpoint_path": str(ckpt), "device": "cpu"}]
    assert [len(p) for p, _ in fake_hpsv3.calls] == [2, 1]  # batches of batch_size
    assert all(not Path(p).exists() for _, paths in fake_hpsv3.calls for p in paths)  # temp PNGs removed
    m.score([solid(GREEN)], ["x"])
    assert len(fake_hpsv3.inits) == 1


def test_hpsv3_errors(fake_hpsv3, tmp_path, monkeypatch):
    with pytest.raises(RewardSetupError, match=r"hpsv3: weights file .*HPSv3\.safetensors not found.*MizzenAI/HPSv3"):
        HPSv3Score(weights=tmp_path / "HPSv3.safetensors").score([solid(RED)], ["p"])
    with pytest.raises(ValueError, match="batch_size = 0"):
        HPSv3Score(weights="x", batch_size=0)
    monkeypatch.setitem(sys.modules, "hpsv3", None)
    with pytest.raises(RewardSetupError, match=r"pip install hpsv3==1\.0\.0"):
        HPSv3Score(weights=tmp_path).score([solid(RED)], ["p"])


# ------------------------------------------------------------------------------------------------ open_clip

TEXT_EMB = {"red": [1.0, 0.0, 0.0], "not red": [-1.0, 0.0, 0.0], "red or green": [1.0, 1.0, 0.0]}


@pytest.fixture
def fake_open_clip(monkeypatch):
    """``open_clip`` with ``create_model_and_transforms(arch, pretrained=, device=)`` and ``get_tokenizer``:
    the image embedding is the mean RGB colour, the text embedding a table lookup."""
    mod = types.ModuleType("open_clip")
    mod.creates = []

    class Model(torch.nn.Module):
        def encode_image(self, pixels):
            return pixels  # [B, 3]

        def encode_text(self, tokens):
            return tokens  # [B, 3]

    def preprocess(image):
        return torch.tensor(image.getpixel((0, 0)), dtype=torch.float32) / 255.0  # [3]

    def create_model_and_transforms(model_name, pretrained=None, device="cpu", **kw):
        mod.creates.append({"model_name": model_name, "pretrained": pretrained, "device": device})
        return Model(), None, preprocess

    def get_tokenizer(model_name):
        return lambda texts: torch.tensor([TEXT_EMB[t] for t in texts])

    mod.create_model_and_transforms, mod.get_tokenizer = create_model_and_transforms, get_tokenizer
    monkeypatch.setitem(sys.modules, "open_clip", mod)
    return mod


def test_open_clip_score_is_100_cos_clamped(fake_open_clip, tmp_path):
    ckpt = tmp_path / "open_clip_pytorch_model.bin"
    ckpt.write_bytes(b"w")
    m = OpenCLIPScore(weights=ckpt, device="cpu", batch_size=2)
    out = m.score([solid(RED), solid(RED), solid(RED), solid(GREEN)], ["red", "not red", "red or green", "red"])
    assert out == pytest.approx([100.0, 0.0, 100.0 / math.sqrt(2), 0.0])  # cos -1 -> clamped to 0
    assert fake_open_clip.creates == [{"model_name": "ViT-H-14", "pretrained": str(ckpt), "device": "cpu"}]


def test_open_clip_missing(fake_open_clip, tmp_path, monkeypatch):
    with pytest.raises(RewardSetupError, match=r"clip: weights file .* not found.*laion/CLIP-ViT-H-14-laion2B"):
        OpenCLIPScore(weights=tmp_path / "x.bin").score([solid(RED)], ["red"])
    monkeypatch.setitem(sys.modules, "open_clip", None)
    with pytest.raises(RewardSetupError, match="pip install open-clip-torch"):
        OpenCLIPScore(weights=tmp_path / "x.bin").score([solid(RED)], ["red"])


# ------------------------------------------------------------------------------------------------ HF CLIP


@pytest.fixture(scope="module")
def tiny_clip_dir(tmp_path_factory):
    """A random 1-layer CLIPModel + byte-level CLIP tokenizer + image processor, saved like a hub checkout."""
    from transformers import CLIPConfig, CLIPImageProcessor, CLIPModel, CLIPProcessor, CLIPTokenizer
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    chars = list(bytes_to_unicode().values())
    vocab = {c: i for i, c in enumerate(chars)}
    vocab.update({c + "</w>": len(chars) + i for i, c in enumerate(chars)})
    vocab.update({"<|startoftext|>": len(vocab), "<|endoftext|>": len(vocab) + 1})
    tok = CLIPTokenizer(vocab=vocab, merges=[])
    small = {"hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2}
    cfg = CLIPConfig(
        text_config={
            **small,
            "vocab_size": len(vocab),
            "max_position_embeddings": 77,
            "bos_token_id": vocab["<|startoftext|>"],
            "eos_token_id": vocab["<|endoftext|>"],
            "pad_token_id": vocab["<|endoftext|>"],
        },
        vision_config={**small, "image_size": 32, "patch_size": 8},
        projection_dim=8,
    )
    torch.manual_seed(0)
    d = tmp_path_factory.mktemp("clip")
    CLIPModel(cfg).save_pretrained(d)
    ip = CLIPImageProcessor(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32})
    CLIPProcessor(image_processor=ip, tokenizer=tok).save_pretrained(d)
    return d


def manual_cosines(d, images, prompts):
    """Cosine of the projected pooled embeddings, computed from the towers directly (not CLIPModel.forward)."""
    from transformers import CLIPModel, CLIPProcessor

    model, proc = CLIPModel.from_pretrained(d).eval(), CLIPProcessor.from_pretrained(d)
    inp = proc(text=prompts, images=images, padding=True, return_tensors="pt", do_center_crop=False)
    with torch.no_grad():
        img = model.visual_projection(model.vision_model(pixel_values=inp["pixel_values"]).pooler_output)
        txt = model.text_projection(
            model.text_model(input_ids=inp["input_ids"], attention_mask=inp["attention_mask"]).pooler_output
        )
    return torch.nn.functional.cosine_similarity(img, txt, dim=-1).tolist()


def test_hf_clip_is_unscaled_cosine(tiny_clip_dir):
    images = [solid(RED, (40, 40)), solid(GREEN, (32, 32)), solid(BLUE, (64, 64))]
    prompts = ["a red square", "green", "a blue thing on a table"]
    m = HFCLIPScore(weights=tiny_clip_dir, device="cpu", batch_size=2)
    assert not m.loaded
    out = m.score(images, prompts)
    assert len(out) == 3 and all(-1.0 <= s <= 1.0 for s in out)  # no x100, no clamp
    assert out == pytest.approx(manual_cosines(tiny_clip_dir, images, prompts), abs=1e-5)
    assert m.score(images[::-1], prompts[::-1]) == pytest.approx(out[::-1], abs=1e-5)  # per pair, batch-independent
    assert m.load_count == 1


def test_hf_clip_missing_weights(tmp_path):
    with pytest.raises(RewardSetupError, match=r"clip_hf: weights directory .* not found.*openai/clip-vit-large"):
        HFCLIPScore(weights=tmp_path / "clip").score([solid(RED)], ["p"])
    with pytest.raises(RewardSetupError, match=r"config\.json not found"):
        HFCLIPScore(weights=tmp_path).score([solid(RED)], ["p"])


# ------------------------------------------------------------------------------------------------ DeQA


def test_deqa_wiring(monkeypatch, tmp_path):
    import transformers

    calls = []

    class FakeDeQA:
        def to(self, device):
            calls.append(("to", device))
            return self

        def eval(self):
            return self

        def requires_grad_(self, flag):
            calls.append(("requires_grad_", flag))
            return self

        def score(self, images):
            calls.append(("score", len(images)))
            return torch.tensor([1.0 + 4.0 * im.getpixel((0, 0))[0] / 255.0 for im in images])  # in [1, 5]

    def from_pretrained(path, **kwargs):
        calls.append(("from_pretrained", path, kwargs))
        return FakeDeQA()

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", from_pretrained)
    (tmp_path / "config.json").write_text("{}")
    m = DeQAScore(weights=tmp_path, device="cpu", batch_size=2)
    out = m.score([solid(RED), solid(BLUE), solid((255, 0, 0))], ["ignored", "", "x"])
    assert out == pytest.approx([5.0, 1.0, 5.0])
    name, path, kwargs = calls[0]
    assert (name, path) == ("from_pretrained", str(tmp_path))
    assert kwargs == {"trust_remote_code": True, "attn_implementation": "eager", "torch_dtype": torch.float32}
    assert ("requires_grad_", False) in calls and [c for c in calls if c[0] == "score"] == [("score", 2), ("score", 1)]
    with pytest.raises(RewardSetupError, match=r"deqa: weights directory .* not found.*zhiyuanyou/DeQA-Score-Mix3"):
        DeQAScore(weights=tmp_path / "nope").score([solid(RED)], ["p"])
