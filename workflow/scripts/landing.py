import _src_path  # noqa: F401  (this checkout's src/ first on sys.path, with or without --use-conda)

from circuitloc.report.pages.landing import write_landing
from circuitloc.runner import run, setup

setup(log_path=snakemake.log[0])
run(write_landing, files=dict(snakemake.input.items()), headline=tuple(snakemake.params.headline),
    out=snakemake.output.rst)
