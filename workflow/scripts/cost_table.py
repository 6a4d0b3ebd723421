import _src_path  # noqa: F401  (this checkout's src/ first on sys.path, with or without --use-conda)
import logging
import sys

from circuitloc.cost import write_cost

log = logging.getLogger("circuitloc.cost")
logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s", force=True,
                    handlers=[logging.StreamHandler(), logging.FileHandler(snakemake.log[0], mode="w")])
# params.jobs: [stage, model or None] of each benchmark file in input, in the same order
jobs = [(stage, model, path) for (stage, model), path in zip(snakemake.params.jobs, snakemake.input, strict=True)]
try:
    write_cost(jobs, snakemake.output.csv, snakemake.output.md)
except Exception:  # its traceback goes to the job's log
    log.exception("the cost table failed")
    sys.exit(1)
log.info("cost of %d jobs written to %s", len(jobs), snakemake.output.csv)
