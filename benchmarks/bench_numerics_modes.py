"""What each CPU numerics mode (``ddmrl.numerics``, ``DDMRL_NUMERICS``) costs: one training step of the main job's
TinyDDM (64 sequences of 48 tokens, forward, backward, AdamW) and one forward pass of 128 sequences, median of
``--repeats`` timed calls after one warm-up, each mode in its own process (a mode is chosen before torch loads).

    python benchmarks/bench_numerics_modes.py                    # every mode, about a minute on 2 cores
    python benchmarks/bench_numerics_modes.py --modes portable compatible --repeats 5

Run it with nothing else on the machine: every mode computes on one thread, and a second process on the same core
inflates the figures. Prints one line per mode (milliseconds) and the machine it ran on.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys

#: the timed code, run in a fresh process per mode
PROBE = """
import json, statistics, time
import ddmrl, torch
ddmrl.numerics.check()
from ddmrl.models.tiny import TinyDDMConfig, TinyDDMForMaskedLM
torch.manual_seed(0)
model = TinyDDMForMaskedLM(TinyDDMConfig(vocab_size=35, max_position_embeddings=64, position_embedding="rope"))
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
train, infer = torch.randint(0, 35, (64, 48)), torch.randint(0, 35, (128, 48))

def step():
    model(train, labels=train).loss.backward()
    opt.step()
    opt.zero_grad()

@torch.no_grad()
def forward():
    model(infer)

def median_ms(fn, n):
    fn()
    times = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return 1000 * statistics.median(times)

print(json.dumps({"train_step_ms": median_ms(step, {n}), "forward_ms": median_ms(forward, {n})}))
"""


def cpu_name() -> str:
    for line in open("/proc/cpuinfo"):
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor()


def main() -> None:
    from ddmrl import numerics

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--modes", nargs="+", default=[m for m in numerics.MODES if m != "native"])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    pinned = {var for env in numerics.MODES.values() for var in env}
    print(f"# {cpu_name()}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.2f}")
    for mode in args.modes:
        env = {k: v for k, v in os.environ.items() if k not in pinned} | {numerics.MODE_VAR: mode}
        code = PROBE.replace("{n}", str(args.repeats))
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
        ms = json.loads(out.stdout.strip().splitlines()[-1])
        print(f"{mode:12s} train step {ms['train_step_ms']:7.1f} ms   forward {ms['forward_ms']:7.1f} ms")


if __name__ == "__main__":
    main()
