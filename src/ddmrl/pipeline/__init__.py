"""The pipeline DAG as data (:mod:`ddmrl.pipeline.dag`) and its export to ``dvc.yaml`` (:mod:`.export`)."""

from ddmrl.pipeline.dag import Stage, build, inputs, param_values

__all__ = ["Stage", "build", "inputs", "param_values"]
