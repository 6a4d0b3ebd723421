"""The paper's claims beside this run's numbers: which models each compares, the claims judged on one
number per model and those judged on draws and resamples."""
