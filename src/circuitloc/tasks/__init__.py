"""Tasks: a dataset builder plus a metric read off last-position logits."""
