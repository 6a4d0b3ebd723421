"""Running the workflow from tests: Snakemake as a subprocess, in a scratch copy of the workflow."""

import contextlib
import functools
import http.server
import os
import re
import shutil
import sys
import threading
from pathlib import Path

from circuitloc.plan import paths
from snakemake_fork import SERVER

ROOT = Path(__file__).resolve().parents[1]
SNAKEMAKE = [sys.executable, "-m", "snakemake"]
# What a run needs from the checkout (src/ is put on PYTHONPATH; resources/ is found through it).
WORKFLOW_FILES = ("Snakefile", "rules", "workflow", "config", ".test", "envs", "report", "profiles", "resources")
# Jobs at once in the test runs (every job uses one torch thread).
CORES = os.environ.get("CIRCUITLOC_TEST_CORES", "2")


def smk_env(**extra):
    return {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT / "src"), **extra}


def smk(*args, cwd=ROOT, check=True, timeout=1500, env=None):
    p = SERVER.run(list(args), cwd, env or smk_env(), timeout, serve_env=smk_env())  # as subprocess.run would
    if check and p.returncode != 0:
        raise AssertionError(f"snakemake {' '.join(args)} failed:\n{p.stdout[-4000:]}\n{p.stderr[-4000:]}")
    return p


def copy_workflow(dest: Path) -> Path:
    dest.mkdir(parents=True, exist_ok=True)
    for name in WORKFLOW_FILES:
        src = ROOT / name
        (shutil.copytree if src.is_dir() else shutil.copy)(src, dest / name)
    return dest


def reuse_results(tiny_run: Path, work: Path, *paths: str) -> None:
    """Files and folders of the tiny run's results/ (`paths` relative to it) copied into the
    workflow copy `work`, modification times kept: Snakemake finds them newer than their inputs and
    runs none of the jobs that made them."""
    for rel in paths:
        src, dest = tiny_run / "results" / rel, work / "results" / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        (shutil.copytree if src.is_dir() else shutil.copy2)(src, dest)


def reuse_models(tiny_run: Path, work: Path, models=("tiny_mha", "tiny_gqa")) -> None:
    """The tiny run's built toys (card and weights) copied into the workflow copy `work`: a test
    about later stages pays no model build (a torch job of several seconds)."""
    reuse_results(tiny_run, work, *(f"models/{m}" for m in models))


def planned_jobs(dry_run_output: str) -> list[tuple[str, dict]]:
    """(rule, wildcards) for every job a dry run lists, in its order."""
    jobs = []
    for block in re.split(r"\n(?=(?:local)?rule \w+:)", dry_run_output):
        m = re.match(r"(?:local)?rule (\w+):", block.strip())
        if m:
            wc = re.search(r"wildcards: (.*)", block)
            jobs.append((m.group(1), dict(kv.split("=", 1) for kv in wc.group(1).split(", ")) if wc else {}))
    return jobs


TEST_CONFIG = ROOT / ".test" / "config.yaml"


def resolve_over_test_config(layer):
    """The config a run of `.test/config.yaml` plus the overlay `layer` (a dict) would plan with."""
    from circuitloc.plan.config.workflow_config import layered, resolve

    return resolve(layered(ROOT, {}, [TEST_CONFIG], layer), ROOT)


def config_error(layer) -> str:
    """The one-line ConfigError that overlay `layer` on `.test/config.yaml` gives."""
    import pytest

    from circuitloc.errors import ConfigError

    with pytest.raises(ConfigError) as e:
        resolve_over_test_config(layer)
    return str(e.value)


def _directory_outputs() -> re.Pattern:
    """The rules' directory() outputs (rules/*.smk) as one pattern, each wildcard one path segment
    (and each {name} of an f-string: `directory(f"results/mib/{{task}}/{a}")`, a rule made per list;
    a pattern of circuitloc.plan.paths: `directory(paths.WEIGHTS)`, `directory(paths.fill(paths.MIB, ...))`)."""
    pats = []
    for smk_file in sorted((ROOT / "rules").glob("*.smk")):
        text = smk_file.read_text()
        named = re.findall(r"directory\(\s*(?:paths\.fill\()?paths\.([A-Z_]+)", text)
        for path in re.findall(r"directory\(\s*f?\"([^\"]+)\"", text) + [getattr(paths, n) for n in named]:
            parts = re.split(r"(\{+[^}]+\}+)", path)
            pats.append("".join("[^/]+" if p.startswith("{") else re.escape(p) for p in parts))
    return re.compile("|".join(f"(?:{p})" for p in pats))


def stand_in_outputs(run: Path, dry_run_output: str) -> None:
    """An empty stand-in for every output and benchmark file a dry run lists (a directory for a
    directory() output), so a following --touch makes the run up to date without computing."""
    directories = _directory_outputs()
    files = {f.strip() for line in re.findall(r"^\s+(?:output|benchmark): (.*)$", dry_run_output, flags=re.M)
             for f in line.split(",")}
    for f in files:
        (run / f).parent.mkdir(parents=True, exist_ok=True)
        if directories.fullmatch(f):
            (run / f).mkdir(exist_ok=True)
        else:
            (run / f).write_text("")


@contextlib.contextmanager
def served(folder):
    """`folder` over HTTP on a free local port (what `python -m http.server` does), for the block."""
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(folder))
    handler.log_message = lambda *a: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
