"""UnifiedReward over a real loopback OpenAI-style server (http.server thread) and the reward-server pickle client."""

import base64
import io
import json
import logging
import math
import pickle
import re
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from PIL import Image

from ddmrl.rewards.interface import RewardSetupError
from ddmrl.rewards.remote import UNIFIED_REWARD_PROMPT, RewardServerClient, UnifiedRewardClient, parse_final_score

REPLIES = {
    "good": "The image matches the caption closely.\nFinal Score: 4.5",
    "five": "Final Score:5",
    "chatty": "I would say Final Score: 3 overall, though Final Score: 1 for realism",
    "bad": "I cannot rate this image.",
    "out of range": "Final Score: 7",
}


class Server:
    """A ThreadingHTTPServer on 127.0.0.1 (ephemeral port) whose POST handler is ``respond(handler, body)``."""

    def __init__(self, respond):
        outer = self
        self.requests, self.lock = [], threading.Lock()

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                with outer.lock:
                    outer.requests.append((self.path, dict(self.headers), body))
                code, reply = respond(self, body)
                try:
                    self.send_response(code)
                    self.send_header("Content-Length", str(len(reply)))
                    self.end_headers()
                    self.wfile.write(reply)
                except (BrokenPipeError, ConnectionResetError):  # the client timed out and left
                    pass

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads, self.httpd.block_on_close = True, False  # do not wait for a sleeping handler
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.01,), daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


def chat_server(flaky_first=0, delay_s=0.0):
    state = {"left": flaky_first}

    def respond(handler, body):
        req = json.loads(body)
        caption = re.search(r"Text Caption: \[(.*)\]$", req["messages"][0]["content"][1]["text"]).group(1)
        if caption == "reject":
            return 400, b'{"error": "bad request"}'
        if state["left"] > 0:
            state["left"] -= 1
            return 500, b"overloaded"
        time.sleep(delay_s)
        msg = {"choices": [{"index": 0, "message": {"role": "assistant", "content": REPLIES[caption]}}]}
        return 200, json.dumps(msg).encode()

    return Server(respond)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def images(n):
    return [Image.new("RGB", (64, 32), (10 * i, 0, 0)) for i in range(n)]


def test_parse_final_score():
    assert parse_final_score("blah Final Score: 4.25 end") == 4.25
    assert parse_final_score("Final Score:\n 2") == 2.0
    assert parse_final_score("Final Score: 7") is None and parse_final_score(None) is None
    assert parse_final_score("Final score: 4") is None  # case-sensitive, as the reference regex


def test_unifiedreward_scores_and_request_format(caplog):
    with chat_server() as srv:
        client = UnifiedRewardClient(
            base_url=f"http://127.0.0.1:{srv.port}/v1", model="UnifiedReward-qwen-7b", api_key="k", max_concurrency=2
        )
        with caplog.at_level(logging.WARNING, logger="ddmrl.rewards.remote"):
            out = client.score(images(5), ["good", "five", "chatty", "bad", "out of range"])
    assert out[:3] == pytest.approx([0.9, 1.0, 0.6])  # /5; the first Final Score wins
    assert math.isnan(out[3]) and math.isnan(out[4])
    assert client.parse_failures == 2 and client.requests == 5
    assert "2/5 replies had no parsable 'Final Score'" in caplog.text
    path, headers, body = srv.requests[0]
    assert path == "/v1/chat/completions" and headers["Authorization"] == "Bearer k"
    req = json.loads(body)
    assert req["model"] == "UnifiedReward-qwen-7b" and req["temperature"] == 0
    image_part, text_part = req["messages"][0]["content"]
    url = image_part["image_url"]["url"]
    assert url.startswith("data:image;base64,")
    sent = Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1])))
    assert sent.format == "PNG" and sent.size == (512, 512)
    assert text_part["text"] in {UNIFIED_REWARD_PROMPT.replace("{prompt}", c) for c in REPLIES}
    assert "Alignment with the Caption" in text_part["text"] and "after 'Final Score:'" in text_part["text"]


def test_unifiedreward_zero_on_failure_mode():
    with chat_server() as srv:
        client = UnifiedRewardClient(base_url=f"http://127.0.0.1:{srv.port}/v1", on_parse_failure="zero")
        assert client.score(images(2), ["bad", "good"]) == pytest.approx([0.0, 0.9])
    assert client.parse_failures == 1


def test_unifiedreward_retries_5xx_then_succeeds():
    with chat_server(flaky_first=2) as srv:
        client = UnifiedRewardClient(base_url=f"http://127.0.0.1:{srv.port}/v1", max_retries=2, backoff_s=0.01)
        assert client.score(images(1), ["good"]) == pytest.approx([0.9])
    assert len(srv.requests) == 3


def test_unifiedreward_gives_up_after_bounded_retries():
    with chat_server(flaky_first=10) as srv:
        client = UnifiedRewardClient(base_url=f"http://127.0.0.1:{srv.port}/v1", max_retries=1, backoff_s=0.0)
        with pytest.raises(RewardSetupError, match=r"no answer from .* after 2 attempt\(s\) \(HTTP 500: overloaded\)"):
            client.score(images(1), ["good"])
    assert len(srv.requests) == 2


def test_unifiedreward_client_error_is_not_retried():
    with chat_server() as srv:
        client = UnifiedRewardClient(base_url=f"http://127.0.0.1:{srv.port}/v1", max_retries=3)
        with pytest.raises(RuntimeError, match="refused the request .*HTTP 400"):
            client.score(images(1), ["reject"])
    assert len(srv.requests) == 1


def test_unifiedreward_server_down_is_a_clear_error():
    port = free_port()
    client = UnifiedRewardClient(base_url=f"http://127.0.0.1:{port}/v1", max_retries=1, backoff_s=0.0)
    with pytest.raises(RewardSetupError) as e:
        client.score(images(1), ["good"])
    msg = str(e.value)
    assert f"http://127.0.0.1:{port}/v1/chat/completions" in msg and "vllm serve" in msg and "\n" not in msg


def test_unifiedreward_timeout_is_bounded():
    with chat_server(delay_s=1.0) as srv:
        client = UnifiedRewardClient(base_url=f"http://127.0.0.1:{srv.port}/v1", timeout_s=0.2, max_retries=0)
        start = time.monotonic()
        with pytest.raises(RewardSetupError, match="after 1 attempt"):
            client.score(images(1), ["good"])
        assert time.monotonic() - start < 0.9


def test_unifiedreward_bad_options():
    with pytest.raises(ValueError, match="on_parse_failure"):
        UnifiedRewardClient(on_parse_failure="drop")
    with pytest.raises(ValueError, match="must contain"):
        UnifiedRewardClient(prompt_template="no placeholder")


def pickle_server(reply_key="scores"):
    def respond(handler, body):
        data = pickle.loads(body)
        scores = [Image.open(io.BytesIO(b)).getpixel((0, 0))[0] / 10.0 for b in data["images"]]
        assert all(Image.open(io.BytesIO(b)).format == "JPEG" for b in data["images"])
        return 200, pickle.dumps({reply_key: scores, "n_prompts": len(data.get("prompts", []))})

    return Server(respond)


def test_reward_server_client_batches_and_scales():
    with pickle_server() as srv:
        client = RewardServerClient(url=f"http://127.0.0.1:{srv.port}", scale=5.0, batch_size=2)
        out = client.score([Image.new("RGB", (16, 16), (v, 0, 0)) for v in (50, 100, 150)], ["a", "b", "c"])
    assert out == pytest.approx([1.0, 2.0, 3.0], abs=0.1)  # JPEG is lossy
    sent = [pickle.loads(body) for _, _, body in srv.requests]
    assert [len(d["images"]) for d in sent] == [2, 1] and [d["prompts"] for d in sent] == [["a", "b"], ["c"]]


def test_reward_server_client_deqa_form():
    with pickle_server(reply_key="outputs") as srv:
        client = RewardServerClient(url=f"http://localhost:{srv.port}", response_key="outputs", send_prompts=False)
        client.score([Image.new("RGB", (16, 16))], ["ignored"])
    assert "prompts" not in pickle.loads(srv.requests[0][2])


def test_reward_server_client_refuses_remote_and_missing_key():
    with pytest.raises(ValueError, match="not a loopback address"):
        RewardServerClient(url="http://10.0.0.5:18087")
    with pickle_server(reply_key="outputs") as srv:
        with pytest.raises(RuntimeError, match="has no 'scores' key"):
            RewardServerClient(url=f"http://127.0.0.1:{srv.port}").score([Image.new("RGB", (8, 8))], ["p"])
