"""``paper_mmada_geneval`` end to end on the real MMaDA classes: a tiny random ``MMadaModelLM`` and the real
``MAGVITv2`` (random weights), both from the reference Gen-Verse/MMaDA checkout (shared/reference/mmada, used as
the profile's ``mmada_code``), GenEval prompts in GenEval's schema, and two stand-ins for what runs outside ddmrl:
the reward server as a loopback HTTP server speaking reward-server's pickle protocol, and the official evaluator as
an ``evaluation/evaluate_images.py`` run in its own process; HPS's prompts scored through the same reward server, and
DPG-Bench's questions answered by a loopback VQA server. Every stage runs its DAG command line: download_image, GRPO
for two of its methods (the profile's LoRA targets, MMaDA's layout, emerge with guidance), GenEval, HPSv3 and DPG-Bench
evaluation, tables.
"""

from __future__ import annotations

import base64
import csv
import io
import json
import os
import pickle
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import torch
import yaml
from PIL import Image
from real_models import REFERENCE, magvit_dir, mmada_checkpoint, needs_reference, tokenizer
from safetensors.torch import load_file
from test_paper_llada_math import TARGET

from ddmrl.config import deep_merge, load
from ddmrl.pipeline import dag
from ddmrl.rewards.geneval_bridge import DETECTOR_NAME

REPO = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.slow, needs_reference]

# the official evaluator's command line and row schema; "detects" an image as correct when it is bright
FAKE_EVALUATOR = """
import argparse, json, os
import numpy as np
from PIL import Image

ap = argparse.ArgumentParser()
ap.add_argument("imagedir")
ap.add_argument("--outfile", required=True)
ap.add_argument("--model-path", required=True)
args = ap.parse_args()
rows = []
for folder in sorted(f for f in os.listdir(args.imagedir) if f.isdigit()):
    meta = json.load(open(os.path.join(args.imagedir, folder, "metadata.jsonl")))
    for name in sorted(os.listdir(os.path.join(args.imagedir, folder, "samples"))):
        path = os.path.join(args.imagedir, folder, "samples", name)
        bright = float(np.asarray(Image.open(path).convert("L")).mean()) / 255
        rows.append({"filename": path, "tag": meta["tag"], "prompt": meta["prompt"], "correct": bright > 0.5,
                     "reason": "", "metadata": json.dumps(meta), "details": "{}"})
with open(args.outfile, "w") as f:
    f.writelines(json.dumps(r) + "\\n" for r in rows)
"""

EVAL_PROMPTS = [
    {"tag": "single_object", "include": [{"class": "bench", "count": 1}], "prompt": "a photo of a bench"},
    {"tag": "colors", "include": [{"class": "cow", "count": 1, "color": "red"}], "prompt": "a photo of a red cow"},
    {"tag": "counting", "include": [{"class": "cup", "count": 2}], "exclude": [{"class": "cup", "count": 3}],
     "prompt": "a photo of two cups"},
]  # fmt: skip
TRAIN_PROMPTS = [
    {"tag": "single_object", "include": [{"class": "dog", "count": 1}], "prompt": "a photo of a dog"},
    {"tag": "colors", "include": [{"class": "car", "count": 1, "color": "blue"}], "prompt": "a photo of a blue car"},
    {"tag": "two_object", "include": [{"class": "cat", "count": 1}, {"class": "bus", "count": 1}],
     "prompt": "a photo of a cat and a bus"},
    {"tag": "single_object", "include": [{"class": "bench", "count": 1}], "prompt": "a photo of a bench"},  # held out
]  # fmt: skip
#: two of the profile's four methods (MMaDA's own and RebRL: different views and weights), to keep this short; the
#: other two differ from these in their views and weights alone, which the tiny models' tests cover
METHODS = ("unigrpo", "rebrl")


HPS_PROMPTS = [
    {"caption": "a red flower", "image_file": "0.jpg", "aspect_ratio": 1, "category": "Plants", "prompt_id": 0},
    {"caption": "a bridge", "image_file": "1.jpg", "aspect_ratio": 1, "category": "Architecture", "prompt_id": 1},
]  # fmt: skip
DPG_PROMPTS = [{"item_id": "cat", "prompt": "a black cat on a mat"}, {"item_id": "dog", "prompt": "a dog"}]
DPG_QUESTIONS = [
    "item_id,text,keywords,proposition_id,dependency,category_broad,category_detailed,tuple,question_natural_language",
    "cat,t,k,1,0,entity,whole,entity - whole (cat),Is there a cat?",
    'cat,t,k,2,1,attribute,color,"attribute - color (cat, black)",Is the cat black?',
    "dog,t,k,1,0,entity,whole,entity - whole (dog),Is there a dog?",
]


def mmada_inputs(root: Path) -> dict[str, Path]:
    """The MMaDA checkpoint and MAGVIT-v2 directories (the real classes, random weights); GenEval prompt files; the
    evaluator stand-in's checkout and detector folder."""
    mmada_checkpoint(root / "mmada-8b-base", tokenizer())
    magvit_dir(root / "magvitv2")
    files = {key: root / f"{key}.jsonl" for key in ("eval", "train", "hps", "dpg")}
    for key, lines in (("eval", EVAL_PROMPTS), ("train", TRAIN_PROMPTS), ("hps", HPS_PROMPTS), ("dpg", DPG_PROMPTS)):
        files[key].write_text("".join(json.dumps(m) + "\n" for m in lines))
    files["dpg_questions"] = root / "dpg_bench.csv"
    files["dpg_questions"].write_text("\n".join(DPG_QUESTIONS) + "\n")
    geneval = root / "geneval"
    (geneval / "evaluation").mkdir(parents=True)
    (geneval / "evaluation" / "evaluate_images.py").write_text(FAKE_EVALUATOR)
    (geneval / "evaluation" / "object_names.txt").write_text("bench\ncow\ncup\n")
    (root / "detector").mkdir()
    (root / "detector" / f"{DETECTOR_NAME}.pth").write_bytes(b"")
    return {"checkpoint": root / "mmada-8b-base", "code": REFERENCE, "vq": root / "magvitv2", "geneval": geneval,
            **files}  # fmt: skip


def brightness(image: Image.Image) -> float:
    """Mean grey level in [0, 1]."""
    grey = list(image.convert("L").getdata())
    return sum(grey) / len(grey) / 255


def serve(handle) -> ThreadingHTTPServer:
    """A loopback HTTP server answering each POST body with ``handle(body) -> reply`` bytes (its URL: ``.url``)."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            body = handle(self.rfile.read(int(self.headers["Content-Length"])))
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.url = f"http://127.0.0.1:{httpd.server_address[1]}"
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd


def reward_server() -> ThreadingHTTPServer:
    """reward-server's protocol: pickled {"images": [JPEG], "prompts"} in, {"scores"} out; the score is 5 x the
    image's mean brightness (the profile divides by 5)."""

    def handle(body: bytes) -> bytes:
        images = pickle.loads(body)["images"]
        return pickle.dumps({"scores": [5 * brightness(Image.open(io.BytesIO(b))) for b in images]})

    return serve(handle)


def vqa_server() -> ThreadingHTTPServer:
    """:class:`ddmrl.rewards.dpg.VQAServerClient`'s protocol: "yes" when the tile is brighter than mid-grey."""

    def handle(body: bytes) -> bytes:
        tile = Image.open(io.BytesIO(base64.b64decode(json.loads(body)["image"])))
        return json.dumps({"answer": "yes" if brightness(tile) > 0.5 else "no"}).encode()

    return serve(handle)


def small_profile(root: Path, paths: dict[str, Path], reward_url: str, vqa_url: str) -> None:
    paper = yaml.safe_load((REPO / "profiles" / "paper_mmada_geneval.yaml").read_text())
    sampler = {"steps": 4}
    small = {"image": {
        "task_params": {"geneval": {
            "eval": str(paths["eval"]), "train": str(paths["train"]), "num_image_tokens": 16, "max_seq_length": 24,
            "reward_models": {"unifiedreward": {"url": reward_url}},
            "evaluator": {"geneval_repo": str(paths["geneval"]), "python": sys.executable,
                          "model_path": str(root / "detector")},
        },
            "hps": {"eval": str(paths["hps"]), "num_image_tokens": 16, "max_seq_length": 24},
            "dpg": {"eval": str(paths["dpg"]), "questions": str(paths["dpg_questions"]), "num_image_tokens": 16,
                    "max_seq_length": 24},
        },
        "model": {"path_or_id": str(paths["checkpoint"]), "revision": None, "dtype": "float32",
                  "mmada_code": str(paths["code"]), "vq_path_or_id": str(paths["vq"]), "vq_revision": None},
        "download": {"num_eval": 3, "hub": [
            {"name": "mmada-8b-base", "repo_id": str(paths["checkpoint"])},
            {"name": "magvitv2", "repo_id": str(paths["vq"])},
            {"name": "geneval-prompts", "repo_id": str(paths["eval"]), "repo_type": "dataset"},
        ]},
        "seeds": [0],
        "methods": list(METHODS),
        "grpo": {"max_steps": 2, "num_prompts": 2, "num_generations": 3, "num_iterations": 1, "save_steps": 0,
                 "mixed_precision": "no", "learning_rate": 0.05, "lora": {"r": 4, "alpha": 8.0, "dropout": 0.0},
                 "launch": {"launcher": "python", "num_processes": 1}, "sampler": sampler},
        "evaluate": {"samples_per_prompt": 2, "min_images_per_tag": 0, "batch_size": 4, "sampler": sampler},
    }}  # fmt: skip
    (root / "repo" / "profiles").mkdir(parents=True)
    overlay = deep_merge(paper, small)
    # the stand-ins replace HPSv3 and mPLUG (not merged into the profile's entries)
    overlay["image"]["task_params"]["hps"]["scorer"] = {
        "brightness": {"model": "reward_server", "url": reward_url, "scale": 5.0}
    }
    overlay["image"]["task_params"]["dpg"]["vqa"] = {"model": "vqa_server", "url": vqa_url}
    (root / "repo" / "profiles" / "small.yaml").write_text(yaml.safe_dump(overlay, sort_keys=False))
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    (root / "repo" / "params.yaml").write_text(yaml.safe_dump({**params, "profile": "small"}, sort_keys=False))
    for d in ("stages", "configs"):
        (root / "repo" / d).symlink_to(REPO / d)


def hps_of(data: Path, model: str) -> float:
    return json.loads((data / "evaluate" / model / "hps.json").read_text())["score"]


def test_paper_geneval_dag_runs_on_the_real_mmada_classes(tmp_path):
    paths = mmada_inputs(tmp_path)
    servers = reward_server(), vqa_server()
    small_profile(tmp_path, paths, *(server.url for server in servers))
    root = tmp_path / "repo"
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
           "HF_MODULES_CACHE": str(tmp_path / "hf_modules"), "OMP_NUM_THREADS": "1"}  # fmt: skip
    stages = dag.build(load(root / "params.yaml"))
    assert [s.name for s in stages][0] == "download_image" and "download" not in {s.name for s in stages}
    try:
        for stage in stages:
            cmd = [sys.executable, *stage.cmd.split()[1:]]
            result = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=300, check=False)
            assert result.returncode == 0, f"{stage.name}: {result.stderr[-3000:]}"
    finally:
        for server in servers:
            server.shutdown()

    data = root / "data"
    pointer = json.loads((data / "download" / "image" / "base" / "ddmrl_model.json").read_text())
    assert pointer["kind"] == "mmada" and pointer["mmada_code"] == str(paths["code"])
    before = load_file(paths["checkpoint"] / "model.safetensors")
    for method in METHODS:
        run = f"{method}_geneval_s0"
        metrics = json.loads((data / "grpo" / run / "metrics.json").read_text())
        assert 0.0 <= metrics["reward_first"] <= 1.0  # the server's brightness score / 5
        with open(data / "grpo" / run / "curve.csv") as f:
            assert any(float(row["reward_std"]) > 0 for row in csv.DictReader(f)), "rewards must vary in a group"
        out = data / "grpo" / run / "model"
        after = load_file(out / "model.safetensors")
        assert set(after) == set(before), "adapters merged: the saved weights have the checkpoint's names"
        changed = {k for k in before if not torch.equal(before[k], after[k])}
        assert changed == {k for k in before if TARGET.fullmatch(k)}, (run, sorted(changed))
        # the save carries the checkout's modeling code (MMadaModelLM and what it imports) and an auto_map
        assert {"modeling_mmada.py", "modeling_llada.py", "configuration_llada.py"} <= {p.name for p in out.iterdir()}
        assert json.loads((out / "config.json").read_text())["auto_map"]["AutoModel"] == "modeling_mmada.MMadaModelLM"
        ev = json.loads((data / "evaluate" / run / "geneval.json").read_text())
        assert ev["n_prompts"] == 3 and ev["n_samples"] == 6 and 0.0 <= ev["overall"] <= 100.0
    # GenEval's layout: one folder per prompt, 2 PNGs decoded by MAGVIT-v2 (4 x 4 codes, factor 16: 64 x 64 pixels)
    folder = data / "evaluate" / "base" / "geneval"
    assert sorted(p.name for p in folder.iterdir() if p.name.isdigit()) == ["00000", "00001", "00002"]
    assert json.loads((folder / "00002" / "metadata.jsonl").read_text()) == EVAL_PROMPTS[2]
    assert Image.open(folder / "00000" / "samples" / "0001.png").size == (64, 64)
    rows = [
        json.loads(line) for line in (data / "evaluate" / "base" / "geneval_results.jsonl").read_text().splitlines()
    ]
    assert len(rows) == 6 and {r["tag"] for r in rows} == {"single_object", "colors", "counting"}
    # HPSv3 and DPG-Bench: every model, its images written and scored; their columns in the table
    for model in ("base", *(f"{m}_geneval_s0" for m in METHODS)):
        hps = json.loads((data / "evaluate" / model / "hps.json").read_text())
        assert hps["n_images"] == 4 and set(hps["per_category"]) == {"Plants", "Architecture"}
        assert 0.0 <= hps["score"] <= 1.0 and "mean_reward" not in hps  # the server's brightness / 5
        dpg = json.loads((data / "evaluate" / model / "dpg.json").read_text())
        assert dpg["n_images"] == 2 and dpg["n_samples"] == 8 and 0.0 <= dpg["score"] <= 100.0
        assert Image.open(data / "evaluate" / model / "dpg" / "cat.png").size == (128, 128)  # 2x2 tiles of 64 px
    table = (data / "tables" / "image_table.md").read_text()
    assert all(name in table for name in ("base", "UniGRPO", "RebRL"))
    header = next(line for line in table.splitlines() if line.startswith("| model"))
    columns = [c.strip() for c in header.strip("|").split("|")]
    assert columns[columns.index("Overall") + 1 : columns.index("Overall") + 3] == ["HPSv3", "DPG"]
    base_row = next(line for line in table.splitlines() if line.startswith("| base"))
    assert f"{hps_of(data, 'base'):.2f}" in base_row
