"""The vocabulary (circuitloc.plan.vocab) is the one home of task and ablation names: no module outside
tasks/ decides by a task's or kind's name, the table and figure jobs never import torch, unknown
names are errors, and a task defined outside circuitloc runs through the workflow."""

import ast
import re
import subprocess
import sys

import pytest
import yaml
from workflow_helpers import ROOT, copy_workflow, smk, smk_env

from circuitloc.plan import vocab

SRC = ROOT / "src" / "circuitloc"
NAMES = {"ioi", "induction", "facts", "facts_shared", "neutral", *vocab.KINDS}
# where names may decide behaviour: the vocabulary itself and the task modules
ALLOWED = {SRC / "vocab.py", *(SRC / "tasks").glob("*.py")}


def _deciding_literals(tree) -> list[tuple[int, str]]:
    """String literals naming a task or kind in a comparison (==, !=, in, not in) or in
    startswith/endswith: a decision by name."""
    out = []

    def names(node):
        consts = [node] if isinstance(node, ast.Constant) else \
            list(node.elts) if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else []
        return [c.value for c in consts if isinstance(c, ast.Constant) and c.value in NAMES]

    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            for side in [node.left, *node.comparators]:
                out += [(node.lineno, n) for n in names(side)]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr in ("startswith", "endswith"):
            out += [(node.lineno, n) for a in node.args for n in names(a)]
    return out


def test_no_task_or_kind_name_decides_behaviour_outside_tasks_and_vocab():
    found = []
    for path in sorted(SRC.rglob("*.py")) + sorted((ROOT / "workflow" / "scripts").glob("*.py")):
        if path not in ALLOWED:
            found += [f"{path.relative_to(ROOT)}:{ln}: {n!r}" for ln, n in _deciding_literals(ast.parse(path.read_text()))]
    literal = "|".join(sorted(NAMES))
    smk_pattern = re.compile(rf"""(==|!=|\bin\b|startswith\()\s*[(\[]?\s*["']({literal})["']""")
    for path in sorted((ROOT / "rules").glob("*.smk")) + [ROOT / "Snakefile"]:
        for i, line in enumerate(path.read_text().splitlines(), 1):
            if smk_pattern.search(line.split("#")[0]):
                found.append(f"{path.relative_to(ROOT)}:{i}: {line.strip()}")
    assert not found, "names deciding behaviour outside tasks/ and vocab.py:\n" + "\n".join(found)


def test_the_grep_finds_a_decision_by_name():
    """The check above can fail: the branches it replaced are found."""
    old = 'if task == "facts":\n    pass\nif kind != "zero":\n    pass\nx = name.startswith("facts")\n'
    assert [n for _, n in _deciding_literals(ast.parse(old))] == ["facts", "zero", "facts"]


# the modules of the table, figure and analysis jobs, and the scripts that run them (no threads)
LIGHT_MODULES = ("plan.vocab", "report.tables", "report.writers", "report.figures", "report.analysis", "report.sweep",
                 "report.plots", "report.cost", "runner", "io", "plan.resources", "metrics", "stats")
LIGHT_SCRIPTS = ("tables", "figures", "fig_scale", "robustness", "specificity_table", "stability", "sweep_tables",
                 "sweep_overview")


def _script_imports(name):
    tree = ast.parse((ROOT / "workflow" / "scripts" / f"{name}.py").read_text())
    return sorted({n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module
                   and n.module.startswith("circuitloc")})


def test_table_and_figure_jobs_do_not_import_torch():
    """Each light module, and everything a light script imports, in a fresh interpreter: torch (and
    transformers) stay out of sys.modules, so these jobs start in a fraction of a second."""
    modules = [f"circuitloc.{m}" for m in LIGHT_MODULES] + [m for s in LIGHT_SCRIPTS for m in _script_imports(s)]
    code = ("import sys, importlib\n"
            f"for m in {sorted(set(modules))!r}: importlib.import_module(m)\n"
            "from circuitloc.runner import setup; setup()\n"
            "import circuitloc.report.writers as W, circuitloc.report.figures as F\n"
            "W.write_sweep, W.write_stability, W.write_robustness, F.fig_scale\n"
            "from circuitloc.report import analysis, sweep\n"
            "print(sorted(k for k in ('torch', 'transformers', 'transformer_lens') if k in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=smk_env(), timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]", out.stdout


def test_unknown_names_are_errors_never_fallbacks():
    with pytest.raises(ValueError, match="unknown ablation 'median-query'"):
        vocab.parse_ablation("median-query")
    with pytest.raises(ValueError, match="unknown ablation 'zero-block'"):
        vocab.parse_ablation("zero-block")
    with pytest.raises(ValueError, match="unknown task 'iio'"):
        vocab.task("iio")
    with pytest.raises(ValueError, match="tasks.facts_shared"):
        vocab.workflow_tasks(["ioi", "facts_shared"])
    from circuitloc.engine import replacement

    assert set(replacement.KIND_REPLACEMENT) == set(vocab.REPLACING_KINDS)  # every replacing kind has its builder
    assert set(vocab.REPLACING_KINDS) < set(vocab.KINDS)


def test_unit_labels_round_trip():
    for unit in vocab.UNITS:
        label = vocab.unit_label(unit, 3, 1)
        assert vocab.unit_kind(label) == unit
    assert [vocab.unit_label(u, 0, 2) for u in vocab.UNITS] == ["L0H2", "L0G2", "L0"]


def test_a_task_module_registers_its_spec(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "tests" / "plugins"))
    assert vocab.load_task_modules(["synthetic_task"]) == ["recall"]
    assert vocab.task("recall").metrics == ("recall_ld",)
    from circuitloc.tasks.registry import task_of

    t = task_of("recall")
    assert t.metric_name == "recall_ld" and t.higher_is_better and t.fields == ("next_id", "prev_id")
    with pytest.raises(ValueError, match="already defined"):
        vocab.register(vocab.TaskSpec("recall", "elsewhere", ("x",), True, ()))


@pytest.mark.workflow
def test_a_task_of_the_test_suite_runs_through_the_workflow(tmp_path):
    """tests/plugins/synthetic_task.py defines a task (its spec, dataset builder and metric) and
    nothing else changes: the tiny workflow builds its dataset, scores it, draws its curves and
    writes its Table 1 and Table 2, named after the task and its metric."""
    work = copy_workflow(tmp_path / "wf")
    cfg = yaml.safe_load((ROOT / ".test" / "config.yaml").read_text())
    cfg["models"] = {"tiny_gqa": {**cfg["models"]["tiny_gqa"], "ablation": {"kinds": ["zero"], "units": ["query"]}}}
    cfg.update(task_modules=["synthetic_task"], tasks={"recall": {"n": 40, "n_score": 12, "n_curve": 20}},
               analysis=["stability"])
    (work / "recall.yaml").write_text(yaml.safe_dump(cfg))
    env = smk_env(PYTHONPATH=f"{ROOT / 'src'}:{ROOT / 'tests' / 'plugins'}")
    smk("results/tables/table1_recall_zero-query.csv", "results/tables/table2_recall_zero-query.csv",
        "results/tables/stability_recall.csv", "--cores", "2", "--configfile", "recall.yaml", cwd=work, env=env)
    import polars as pl

    t1 = pl.read_csv(work / "results/tables/table1_recall_zero-query.csv")
    assert t1["model"].to_list() == ["tiny_gqa"] and "baseline_recall_ld" in t1.columns
    assert t1["top_head"][0].startswith("L") and t1["n_score_prompts"][0] == 12 and t1["n_curve_prompts"][0] == 20
    scores = pl.read_parquet(work / "results/scores/recall/tiny_gqa/zero-query.parquet")
    assert len(scores) == 16 and scores["metric"][0] == "recall_ld"
    t2 = pl.read_csv(work / "results/tables/table2_recall_zero-query.csv")
    assert t2["sign_flip"].is_null().all()  # the spec asks for no sign-flip check
    st = pl.read_csv(work / "results/tables/stability_recall.csv")
    assert st["split"].to_list() == ["sequence length"]
    # an unknown task name in the config is refused by name
    cfg["tasks"] = {"recal": {"n": 40, "n_score": 12}}
    (work / "typo.yaml").write_text(yaml.safe_dump(cfg))
    out = smk("-n", "--configfile", "typo.yaml", cwd=work, env=env, check=False)
    assert out.returncode != 0 and "unknown task 'recal'" in out.stdout + out.stderr
