"""Image reward models behind one interface, the GenEval official-evaluator bridge and DPG-Bench scoring.

Text rewards live with their tasks (:mod:`ddmrl.tasks`). See docs/rewards.md for weights and environments. The
package imports nothing: the registry of reward models is :mod:`ddmrl.rewards.registry`, the contract
:mod:`ddmrl.rewards.interface`.
"""
