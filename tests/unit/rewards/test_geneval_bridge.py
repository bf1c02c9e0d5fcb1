"""GenEval bridge: layout writer, the exact evaluator command against a stand-in evaluate_images.py in a fake
geneval checkout, schema read-back, summary_scores.py's aggregation, setup errors, and the reward-server client."""

import io
import json
import pickle
import socket
import stat
import sys
import textwrap
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from PIL import Image

from ddmrl.geneval import summarize
from ddmrl.io import DataError
from ddmrl.rewards.geneval_bridge import (
    DETECTOR_NAME,
    RESULT_KEYS,
    GenEvalEnv,
    GenEvalServerClient,
    read_geneval_results,
    run_geneval,
    write_geneval_layout,
)
from ddmrl.rewards.interface import RewardSetupError

# Same argparse as the official script; walks the layout the same way; writes rows in the official schema.
# "correct" = the image is mostly red. It also records its argv and cwd so the test can check the command.
FAKE_EVALUATOR = textwrap.dedent(
    '''
    """Stand-in for djghosh13/geneval evaluation/evaluate_images.py (no detector)."""
    import argparse, json, os, re, sys
    from PIL import Image

    parser = argparse.ArgumentParser()
    parser.add_argument("imagedir", type=str)
    parser.add_argument("--outfile", type=str, default="results.jsonl")
    parser.add_argument("--model-config", type=str, default=None)
    parser.add_argument("--model-path", type=str, default="./")
    parser.add_argument("--options", nargs="*", type=str, default=[])
    args = parser.parse_args()
    args.options = dict(opt.split("=", 1) for opt in args.options)
    with open(os.path.join(os.path.dirname(__file__), "..", "called.json"), "w") as f:
        json.dump({"argv": sys.argv, "cwd": os.getcwd(), "pythonpath": os.environ.get("PYTHONPATH"),
                   "extra": os.environ.get("FAKE_EXTRA")}, f)
    if os.environ.get("FAKE_GENEVAL_FAIL"):
        print("loading detector", file=sys.stderr)
        print("AssertionError: DEVICE == cuda", file=sys.stderr)
        sys.exit(3)
    rows = []
    for sub in os.listdir(args.imagedir):
        folder = os.path.join(args.imagedir, sub)
        if not os.path.isdir(folder) or not sub.isdigit():
            continue
        with open(os.path.join(folder, "metadata.jsonl")) as fp:
            metadata = json.load(fp)
        for name in os.listdir(os.path.join(folder, "samples")):
            path = os.path.join(folder, "samples", name)
            if not os.path.isfile(path) or not re.match(r"\\d+\\.png", name):
                continue
            red = Image.open(path).convert("RGB").getpixel((0, 0))[0] > 128
            rows.append({"filename": path, "tag": metadata["tag"], "prompt": metadata["prompt"], "correct": red,
                         "reason": "" if red else "expected thing>=1, found 0", "metadata": json.dumps(metadata),
                         "details": json.dumps({"thing": [[0, 0, 4, 4, 0.99]]} if red else {})})
    if os.environ.get("FAKE_GENEVAL_DROP_ROW"):
        rows = rows[1:]
    with open(args.outfile, "w") as fp:
        fp.writelines(json.dumps(r) + "\\n" for r in rows)
    '''
)

RED, BLUE = (255, 0, 0), (0, 0, 255)


def meta(tag, prompt):
    return {"tag": tag, "prompt": prompt, "include": [{"class": "thing", "count": 1}]}


@pytest.fixture
def geneval(tmp_path):
    repo = tmp_path / "geneval"
    (repo / "evaluation").mkdir(parents=True)
    (repo / "evaluation" / "evaluate_images.py").write_text(FAKE_EVALUATOR)
    (repo / "evaluation" / "object_names.txt").write_text("thing\n")
    models = tmp_path / "models"
    models.mkdir()
    (models / f"{DETECTOR_NAME}.pth").write_bytes(b"ckpt")
    images = write_geneval_layout(
        tmp_path / "images",
        [
            (meta("single_object", "a photo of a thing"), [Image.new("RGB", (8, 8), c) for c in (RED, RED)]),
            (meta("counting", "a photo of two things"), [Image.new("RGB", (8, 8), c) for c in (RED, BLUE, BLUE)]),
        ],
    )
    return repo, models, images


def test_layout_writer(geneval):
    _, _, images = geneval
    assert sorted(p.name for p in images.iterdir()) == ["00000", "00001"]
    assert json.load(open(images / "00001" / "metadata.jsonl")) == meta("counting", "a photo of two things")
    assert sorted(p.name for p in (images / "00001" / "samples").iterdir()) == ["0000.png", "0001.png", "0002.png"]
    with pytest.raises(ValueError, match="item 0: metadata has no 'include' key"):
        write_geneval_layout(images.parent / "bad", [({"tag": "x", "prompt": "y"}, [Image.new("RGB", (2, 2))])])
    assert not (images.parent / "bad").exists()


def test_run_geneval_invokes_the_official_cli(geneval, tmp_path, monkeypatch):
    repo, models, images = geneval
    monkeypatch.setenv("PYTHONPATH", "/somewhere/ddmrl/src")
    out = tmp_path / "results" / "results.jsonl"
    rows = run_geneval(images, out, GenEvalEnv(repo, sys.executable, models), extra_env={"FAKE_EXTRA": "1"})
    called = json.loads((repo / "called.json").read_text())
    argv = called["argv"]
    assert argv[0] == "evaluation/evaluate_images.py" and Path(called["cwd"]) == repo.resolve()
    assert argv[1] == str(images.resolve())
    assert argv[2] == "--outfile" and Path(argv[3]).name == "results.jsonl" and argv[3] != str(out)  # temp name
    assert argv[4:] == ["--model-path", str(models.resolve())]
    assert called["pythonpath"] is None and called["extra"] == "1"
    assert out.is_file() and len(rows) == 5 and set(rows[0]) == set(RESULT_KEYS)
    assert sorted(r["correct"] for r in rows) == [False, False, True, True, True]
    assert read_geneval_results(out) == rows
    summary = summarize(rows)  # the official evaluator's rows read by the same summary code as geneval-mini's
    assert summary["tags"]["single_object"] == {"accuracy": 100.0, "correct": 2, "total": 2}
    assert summary["tags"]["counting"] == {"accuracy": pytest.approx(100 / 3), "correct": 1, "total": 3}
    assert summary["overall"] == pytest.approx(100 * (1.0 + 1 / 3) / 2)


def test_options_and_model_config_are_passed(geneval, tmp_path):
    repo, models, images = geneval
    cfg = tmp_path / "mask2former.py"
    cfg.write_text("# config")
    (models / "other_detector.pth").write_bytes(b"ckpt")
    options = {"model": "other_detector", "threshold": 0.5}
    env = GenEvalEnv(repo, sys.executable, models, model_config=cfg, options=options)
    run_geneval(images, tmp_path / "r.jsonl", env)
    argv = json.loads((repo / "called.json").read_text())["argv"]
    assert argv[6:] == ["--model-config", str(cfg.resolve()), "--options", "model=other_detector", "threshold=0.5"]


def test_setup_errors_name_the_missing_path(geneval, tmp_path):
    repo, models, images = geneval
    out = tmp_path / "r.jsonl"
    with pytest.raises(RewardSetupError, match=r"evaluate_images\.py not found; clone https://github.com/djghosh13"):
        run_geneval(images, out, GenEvalEnv(tmp_path / "nope", sys.executable, models))
    with pytest.raises(RewardSetupError, match=r"python /no/bin/python not found or not executable; create"):
        run_geneval(images, out, GenEvalEnv(repo, "/no/bin/python", models))
    with pytest.raises(RewardSetupError, match=r"detector checkpoint .*\.pth not found; run `evaluation/download"):
        run_geneval(images, out, GenEvalEnv(repo, sys.executable, tmp_path))
    with pytest.raises(ValueError, match="unknown evaluator option"):
        run_geneval(images, out, GenEvalEnv(repo, sys.executable, models, options={"treshold": 0.3}))
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match="no images in GenEval layout"):
        run_geneval(tmp_path / "empty", out, GenEvalEnv(repo, sys.executable, models))
    with pytest.raises(DataError, match="GenEval image folder not found"):
        run_geneval(tmp_path / "absent", out, GenEvalEnv(repo, sys.executable, models))
    assert not out.exists()


def test_python_on_path_and_not_executable(geneval, tmp_path):
    repo, models, images = geneval
    script = tmp_path / "py"
    script.write_text("#!/bin/sh\n")
    script.chmod(script.stat().st_mode & ~stat.S_IXUSR & ~stat.S_IXGRP & ~stat.S_IXOTH)
    with pytest.raises(RewardSetupError, match="not found or not executable"):
        run_geneval(images, tmp_path / "r.jsonl", GenEvalEnv(repo, script, models))


def test_evaluator_failure_and_short_output(geneval, tmp_path, monkeypatch):
    repo, models, images = geneval
    out = tmp_path / "r.jsonl"
    monkeypatch.setenv("FAKE_GENEVAL_FAIL", "1")
    with pytest.raises(RuntimeError, match=r"exited with 3: .*stderr: loading detector \| AssertionError: DEVICE"):
        run_geneval(images, out, GenEvalEnv(repo, sys.executable, models))
    monkeypatch.delenv("FAKE_GENEVAL_FAIL")
    monkeypatch.setenv("FAKE_GENEVAL_DROP_ROW", "1")
    with pytest.raises(RuntimeError, match="returned 4 rows for 5 images"):
        run_geneval(images, out, GenEvalEnv(repo, sys.executable, models))
    assert not out.exists()  # nothing half-written looks complete


def test_read_results_checks_schema(tmp_path):
    p = tmp_path / "r.jsonl"
    p.write_text(json.dumps({"filename": "x", "tag": "colors", "prompt": "p", "correct": True}) + "\n")
    with pytest.raises(DataError, match="line 1: missing key"):
        read_geneval_results(p)
    row = dict.fromkeys(RESULT_KEYS, "x")
    p.write_text(json.dumps(row) + "\n")
    with pytest.raises(DataError, match="'correct' = 'x', expected true/false"):
        read_geneval_results(p)


def test_geneval_server_client():
    received = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            data = pickle.loads(self.rfile.read(int(self.headers["Content-Length"])))
            received.append(data)
            reds = [Image.open(io.BytesIO(b)).getpixel((0, 0))[0] > 128 for b in data["images"]]
            tags = [m["tag"] for m in data["meta_datas"]]
            reply = {
                "scores": [1.0 if r else 0.5 for r in reds],
                "rewards": [0.0 if data["only_strict"] else float(r) for r in reds],
                "strict_rewards": [float(r) for r in reds],
                "group_rewards": {
                    "counting": [float(r) if t == "counting" else -10.0 for r, t in zip(reds, tags, strict=True)]
                },
                "group_strict_rewards": {},
            }
            body = pickle.dumps(reply)
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, args=(0.01,), daemon=True).start()
    try:
        client = GenEvalServerClient(url=f"http://127.0.0.1:{httpd.server_address[1]}", batch_size=2)
        imgs = [Image.new("RGB", (8, 8), c) for c in (RED, BLUE, RED)]
        metas = [meta("counting", "p"), meta("colors", "q"), meta("counting", "r")]
        res = client.score(imgs, metas, only_strict=False)
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert res.scores == [1.0, 0.5, 1.0] and res.rewards == [1.0, 0.0, 1.0] and res.strict_rewards == [1.0, 0.0, 1.0]
    assert res.group_rewards == {"counting": [1.0, -10.0, 1.0]}
    assert [len(d["images"]) for d in received] == [2, 1] and received[0]["meta_datas"] == metas[:2]
    assert received[0]["only_strict"] is False


def test_geneval_server_client_errors():
    with pytest.raises(ValueError, match="not a loopback address"):
        GenEvalServerClient(url="http://example.org:18085")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    client = GenEvalServerClient(url=f"http://127.0.0.1:{port}", max_retries=0)
    with pytest.raises(RewardSetupError, match="start reward-server's app_geneval"):
        client.score([Image.new("RGB", (4, 4))], [meta("colors", "p")])
    with pytest.raises(ValueError, match="1 images but 0 metadata"):
        client.score([Image.new("RGB", (4, 4))], [])
