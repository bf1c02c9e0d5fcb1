# Load and validate params.yaml once, before any job: a bad value stops the workflow with one line naming the key.
# Everything else (paths, commands, params each stage reads) comes from ddmrl.pipeline.dag; keep logic there.

import json
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("DVC_NO_ANALYTICS", "1")

from ddmrl.config import ConfigError, load
from ddmrl.pipeline import dag

PARAMS = "params.yaml"

try:
    CFG = load(PARAMS)
    STAGES = dag.build(CFG, PARAMS)
    dag.check_names(STAGES)
except (ConfigError, ValueError) as e:
    print(f"error: {e}", file=sys.stderr)
    sys.exit(1)


def stage_inputs(stage):
    """Artifact deps, the stage script and the library files it imports (mtime triggers see code edits)."""
    return list(dag.inputs(stage))


def stage_outputs(stage):
    return [*stage.outs, *stage.metrics, *stage.plots, *(directory(d) for d in stage.dir_outs)]


def stage_params(stage):
    """The params.yaml values the stage reads, as one string: a change reruns it (the `params` rerun trigger)."""
    return json.dumps(dag.param_values(CFG, stage), sort_keys=True)


def stage_resources(stage):
    """Scheduler resources of the job (e.g. gpu for accelerate-launched training); none by default."""
    return dict(stage.resources)


def final_outputs():
    """The tables and every metrics file."""
    tables = next(s for s in STAGES if s.name == "tables")
    return [*tables.dir_outs, *(m for s in STAGES for m in s.metrics)]
