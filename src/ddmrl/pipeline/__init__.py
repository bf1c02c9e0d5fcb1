"""The pipeline: the DAG as data (:mod:`ddmrl.pipeline.dag`), the data tree (:mod:`.layout`), the export to
``dvc.yaml`` (:mod:`.export`) and what joins the two engines (:mod:`.engines`). Import the submodule you need: this
package imports none, so that a stage reading the data tree does not depend on the DAG's code."""
