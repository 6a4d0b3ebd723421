"""The figure jobs and what they draw: shared styles, the per-model plots and the plots across models
and seeds."""
