"""Where the two engines meet: Snakemake's command-line config as the params file every stage reads, and DVC's
record of what a Snakemake run made (``dvc.lock`` and the cache), so that ``dvc status`` is clean after it.

    python -m ddmrl.pipeline.engines record [--params params.yaml]

records the stages whose outputs all exist (the Snakefile does it when a run succeeds).
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from ddmrl.config import ConfigError, deep_merge, load
from ddmrl.pipeline import dag, export

#: where a Snakemake run whose ``--config`` / ``--configfile`` change params.yaml keeps the params it runs with
OVERRIDE_DIR = ".snakemake/ddmrl"


def params_file(overrides: dict[str, Any], params: str = "params.yaml") -> str:
    """The params file the stages of a Snakemake run read: ``params`` itself, or with Snakemake's ``config``
    (``--configfile`` and ``--config`` values) on top, a copy of it with the profile overlays beside it, in a folder
    of ``OVERRIDE_DIR`` named by their content. Runs with different overrides (a dry run beside a running workflow
    included) never rewrite each other's params, and an unchanged override finds its folder again (reruns nothing;
    the params trigger sees every command with ``params`` as its params file)."""
    path = Path(params)
    if not overrides:
        return params
    merged = yaml.safe_dump(
        deep_merge(yaml.safe_load(path.read_text(encoding="utf-8")) or {}, overrides), sort_keys=False
    )
    overlays = {p.name: p.read_text(encoding="utf-8") for p in sorted((path.parent / "profiles").glob("*.yaml"))}
    content = "\0".join([merged, *(f"{name}\0{text}" for name, text in overlays.items())])
    out = path.parent / OVERRIDE_DIR / hashlib.sha256(content.encode()).hexdigest()[:12]
    for name, text in overlays.items():
        _write_if_changed(out / "profiles" / name, text)
    _write_if_changed(out / path.name, merged)  # last: a folder with its params file is whole
    return (out / path.name).as_posix()


def _write_if_changed(path: Path, text: str) -> None:
    if path.exists() and path.read_text(encoding="utf-8") == text:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


def record(params: str | Path = "params.yaml") -> str:
    """Commit to DVC (``dvc.lock`` and the cache) every stage whose outputs all exist; returns what it did, in one
    line. Nothing is recorded outside a DVC repository or when ``dvc.yaml`` is not a fresh export of ``params``."""
    params = Path(params)
    root = params.parent
    if not (root / ".dvc").is_dir():
        return "not a DVC repository (dvc init): nothing recorded in dvc.lock"
    target = root / "dvc.yaml"
    if not target.exists() or target.read_text(encoding="utf-8") != export.render(params):
        return "dvc.yaml is not a fresh export (python -m ddmrl.pipeline.export): nothing recorded in dvc.lock"
    addresses = export.addresses(params)
    stages = dag.build(load(params), params.name)
    done = [addresses[s.name] for s in stages if all((root / o).exists() for o in s.outputs)]
    if not done:
        return "no stage has its outputs: nothing recorded in dvc.lock"
    targets = [] if len(done) == len(stages) else done
    dvc = shutil.which("dvc", path=str(Path(sys.executable).parent)) or "dvc"
    out = subprocess.run([dvc, "commit", "--force", "--quiet", *targets], cwd=root, capture_output=True, text=True)
    if out.returncode != 0:
        return f"dvc commit failed: {((out.stderr or out.stdout).strip().splitlines() or [''])[-1]}"
    return f"recorded {len(done)} of {len(stages)} stages in dvc.lock and the DVC cache"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ddmrl.pipeline.engines", description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["record"])
    parser.add_argument("--params", default="params.yaml")
    args = parser.parse_args(argv)
    try:
        message = record(args.params)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(message)
    return 0 if message.startswith("recorded") else 1


if __name__ == "__main__":
    sys.exit(main())
