"""ImageRewardModel contract: batch checks, lazy single load, one-line setup errors."""

import math
import sys
import threading

import pytest
from PIL import Image

from ddmrl.rewards.interface import (
    ImageRewardModel,
    RewardSetupError,
    check_batch,
    nan_count,
    require_module,
    require_path,
)


class Counting(ImageRewardModel):
    name = "counting"

    def __init__(self):
        super().__init__()
        self.batches = []

    def _load(self):
        self.model = lambda im, p: im.width + len(p)

    def _score(self, images, prompts):
        self.batches.append(len(images))
        return [self.model(im, p) for im, p in zip(images, prompts, strict=True)]


def img(w=4):
    return Image.new("RGB", (w, w))


def test_lazy_load_happens_once_on_first_score():
    m = Counting()
    assert not m.loaded and m.load_count == 0
    assert m.score([img(4), img(6)], ["ab", "c"]) == [6.0, 7.0]
    assert m([img(2)], ["xyz"]) == [5.0]
    assert m.loaded and m.load_count == 1 and m.batches == [2, 1]


def test_concurrent_first_calls_load_once():
    m = Counting()
    threads = [threading.Thread(target=m.score, args=([img()], ["p"])) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert m.load_count == 1


def test_empty_batch_does_not_load():
    m = Counting()
    assert m.score([], []) == []
    assert not m.loaded


@pytest.mark.parametrize(
    "images,prompts,match",
    [
        ([img()], [], "1 images but 0 prompts"),
        (["not an image"], ["p"], r"images\[0\] is a str"),
        ([img()], [3], r"prompts\[0\] is a int"),
    ],
)
def test_bad_batches_are_refused_in_one_line(images, prompts, match):
    with pytest.raises(ValueError, match=match) as e:
        check_batch(images, prompts, "x")
    assert "\n" not in str(e.value)


def test_wrong_number_of_scores_is_an_error():
    class Short(Counting):
        def _score(self, images, prompts):
            return [0.0]

    with pytest.raises(RuntimeError, match="returned 1 scores for 2 images"):
        Short().score([img(), img()], ["a", "b"])


def test_require_module_names_the_pip_package(monkeypatch):
    monkeypatch.setitem(sys.modules, "some_missing_pkg", None)
    with pytest.raises(RewardSetupError) as e:
        require_module("some_missing_pkg", "some-missing-pkg==1.0", "scorer")
    msg = str(e.value)
    assert "pip install some-missing-pkg==1.0" in msg and "'some_missing_pkg'" in msg and "\n" not in msg


def test_require_path_names_path_and_source(tmp_path):
    (tmp_path / "f.bin").write_bytes(b"x")
    assert require_path(tmp_path / "f.bin", "s", "weights", "get it") == tmp_path / "f.bin"
    assert require_path(tmp_path, "s", "weights", "get it", is_dir=True) == tmp_path
    with pytest.raises(RewardSetupError, match=r"s: weights file .*nope\.bin not found; download from X"):
        require_path(tmp_path / "nope.bin", "s", "weights", "download from X")
    with pytest.raises(RewardSetupError, match="weights directory"):
        require_path(tmp_path / "f.bin", "s", "weights", "x", is_dir=True)
    with pytest.raises(RewardSetupError, match="no weights path configured"):
        require_path(None, "s", "weights", "x")


def test_nan_count():
    assert nan_count([1.0, math.nan, 0.0, math.nan]) == 2
