"""The vocabulary as plain data: ablation kinds and units, their labels, the built-in tasks and the
catalog of every task and kind a run may name."""
