"""`pip install .` (not editable) gives a package that runs on its own: the embedded default config,
its schema and the tasks' resources travel inside it (setup.py's build step, circuitloc.shipped),
so `circuitloc.Run()` and docs/api.md's worked example run from the installed copy, in a directory
that is no checkout. The install goes into a folder of its own (`pip install --target`), with the
environment's torch and the rest beside it; nothing is downloaded (--no-index, --no-deps, the
build backend of this environment)."""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

from circuitloc import shipped

ROOT = Path(__file__).resolve().parents[2]
# what `pip install .` reads from a checkout (the rest of it is the workflow's and the tests')
SOURCE = ("pyproject.toml", "setup.py", "MANIFEST.in", "src", "config", "resources")


def worked_example() -> str:
    section = (ROOT / "docs" / "api.md").read_text().split("\n## A worked example\n", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_a_checkout_reads_its_own_config_and_resources():
    assert shipped.root() == ROOT and shipped.resources() == ROOT / "resources"
    assert all((ROOT / name).exists() for name in shipped.FILES)


def test_pip_install_dot_runs_the_api_example_from_the_installed_package(tmp_path):
    checkout = tmp_path / "checkout"  # a copy: the build writes build/ and *.egg-info beside the sources
    checkout.mkdir()
    for name in SOURCE:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, checkout / name, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        else:
            shutil.copy2(src, checkout / name)
    site = tmp_path / "site"
    p = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "--no-build-isolation",
                        "--target", str(site), str(checkout)], capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    for name in shipped.FILES:
        assert (site / "circuitloc" / "_shipped" / name).exists(), name

    work = tmp_path / "notebook"
    work.mkdir()
    (work / ".test").symlink_to(ROOT / ".test")  # the example's config and stored toys, as from a checkout
    check = (f"\nimport circuitloc\nfrom circuitloc import shipped\n"
             f"assert circuitloc.__file__.startswith({str(site)!r}), circuitloc.__file__\n"
             f"assert shipped.root() == shipped.PACKAGED, shipped.root()\n"
             "print('DEFAULT MODELS', sorted(cl.Run().config['models']))\n")
    (work / "example.py").write_text(worked_example() + check)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(HF_HUB_OFFLINE="1", PYTHONPATH=str(site))
    p = subprocess.run([sys.executable, "example.py"], cwd=work, env=env, capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "top_head_drop" in p.stdout
    default = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    assert f"DEFAULT MODELS {sorted(default['models'])}" in p.stdout
