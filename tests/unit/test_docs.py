"""The documentation points only at what exists.

In README.md, config/README.md and docs/*.md:

- every markdown link (`[text](path)`, `![alt](path)`, `[text]: path`) names a file or directory of
  this repository, relative to the document, and every `#anchor` names a heading of its target;
- every repository path in inline code or in a fenced code block (a token whose first part is a
  top-level entry of the repository, e.g. `config/paper.yaml`, `bench/run.py`, `rules/*.smk`,
  `report/{name}.rst`) exists, relative to the repository root; a placeholder (`{x}`, `<x>`, `*`)
  must match at least one path;
- nothing points outside the repository (`../shared/...`);
- README.md has at most README_MAX_LINES lines.

Not checked: URLs, and paths a run makes (results/, .snakemake/) or setup.sh makes (.venv/). Each
check is shown to fail on a planted broken document in a temporary repository."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README_MAX_LINES = 260
# made by a run or by setup.sh, never in the repository: paths under these are not checked
GENERATED = ("results", ".snakemake", ".venv")
NOT_REPOSITORY = set(GENERATED) | {".git", ".pytest_cache", "__pycache__", ".mypy_cache", ".ruff_cache"}

FENCE = re.compile(r"^\s*(```|~~~)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
INLINE_CODE = re.compile(r"(?<!`)`([^`\n]+)`(?!`)")
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REF_LINK = re.compile(r"^\s*\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+\"[^\"]*\")?\s*$")
SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
PLACEHOLDER = re.compile(r"\{[^}]*\}|<[^>]*>")
SPLIT = re.compile(r"[\s=,()'\"\[\]|;`]+")


def documents(root: Path = ROOT) -> list[Path]:
    return [root / "README.md", root / "config" / "README.md", *sorted((root / "docs").glob("*.md"))]


def split_fences(text: str) -> tuple[list[tuple[int, str]], list[tuple[int, str]]]:
    """(line number, line) of the prose and of the fenced code blocks."""
    prose, code, fence = [], [], None
    for i, line in enumerate(text.splitlines(), 1):
        m = FENCE.match(line)
        if m and fence is None:
            fence = m.group(1)
        elif m and line.strip().startswith(fence):
            fence = None
        elif fence is None:
            prose.append((i, line))
        else:
            code.append((i, line))
    return prose, code


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: links reduced to their text, lowercase, punctuation dropped,
    spaces as hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    return re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for _, line in split_fences(path.read_text(encoding="utf-8"))[0]:
        m = HEADING.match(line)
        if m:
            s = slug(m.group(2))
            n = seen.get(s, 0)
            seen[s] = n + 1
            out.add(s if n == 0 else f"{s}-{n}")
    return out


def _inside(path: Path, root: Path) -> str | None:
    """The path relative to the repository root, or None when it lies outside."""
    try:
        return path.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return None


def _generated(rel: str) -> bool:
    return rel.split("/", 1)[0] in GENERATED


def check_link(target: str, doc: Path, root: Path) -> str | None:
    if SCHEME.match(target) or target.startswith("//"):
        return None  # a URL
    path, _, anchor = target.partition("#")
    dest = doc if not path else doc.parent / path
    rel = _inside(dest, root)
    if rel is None:
        return f"link {target!r} points outside the repository"
    if _generated(rel):
        return None
    if not dest.exists():
        return f"link {target!r}: {rel} does not exist"
    if anchor and dest.suffix == ".md" and anchor not in anchors(dest):
        return f"link {target!r}: no heading '#{anchor}' in {rel}"
    return None


def path_tokens(text: str, root: Path) -> list[str]:
    """The tokens of a code span or block that name repository paths (first part a top-level
    entry of the repository), or that climb out of it (../)."""
    top = {p.name for p in root.iterdir()} - NOT_REPOSITORY
    out = []
    for tok in SPLIT.split(text):
        tok = tok.strip().rstrip(".:")
        if not tok or "://" in tok or tok.startswith(("/", "~", "$")):
            continue
        if tok.startswith("../"):
            out.append(tok)
        elif "/" in tok and tok.split("/", 1)[0] in top:
            out.append(tok)
    return out


def check_path(token: str, root: Path) -> str | None:
    if token.startswith("../"):
        return f"path {token!r} points outside the repository"
    rel = token.rstrip("/")
    if _generated(rel):
        return None
    pattern = PLACEHOLDER.sub("*", rel)
    if "*" in pattern:
        return None if next(iter(root.glob(pattern)), None) is not None else f"path {token!r}: nothing matches {pattern}"
    if "…" in rel or "..." in rel:
        return None  # elided on purpose
    return None if (root / rel).exists() else f"path {token!r} does not exist"


def problems(doc: Path, root: Path = ROOT) -> list[str]:
    """Every broken link or repository path of one document, one line each (with its line number)."""
    prose, code = split_fences(doc.read_text(encoding="utf-8"))
    out = []
    for i, line in prose:
        targets = LINK.findall(line) + REF_LINK.findall(line)
        for target in targets:
            msg = check_link(target, doc, root)
            if msg:
                out.append(f"{doc.name}:{i}: {msg}")
        for span in INLINE_CODE.findall(line):
            for tok in path_tokens(span, root):
                msg = check_path(tok, root)
                if msg:
                    out.append(f"{doc.name}:{i}: {msg}")
    for i, line in code:
        for tok in path_tokens(line, root):
            msg = check_path(tok, root)
            if msg:
                out.append(f"{doc.name}:{i}: {msg} (code block)")
    return out


def readme_problems(root: Path = ROOT) -> list[str]:
    n = len((root / "README.md").read_text(encoding="utf-8").splitlines())
    return [f"README.md has {n} lines (at most {README_MAX_LINES})"] if n > README_MAX_LINES else []


# -- the repository's documents ------------------------------------------------------------------

def test_documents_exist():
    docs = documents()
    assert all(d.exists() for d in docs), [str(d) for d in docs if not d.exists()]
    assert len(docs) >= 3 + 1, "docs/ holds no page"


@pytest.mark.parametrize("doc", documents(), ids=lambda d: d.relative_to(ROOT).as_posix())
def test_links_and_paths_exist(doc):
    assert problems(doc) == []


def test_readme_is_short():
    assert readme_problems() == []


# -- the checker fails where it should -----------------------------------------------------------

@pytest.fixture
def repo(tmp_path):
    """A small repository: config/paper.yaml, bench/run.py, rules/a.smk, docs/page.md."""
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "paper.yaml").write_text("seed: 0\n")
    (tmp_path / "bench").mkdir()
    (tmp_path / "bench" / "run.py").write_text("")
    (tmp_path / "rules").mkdir()
    (tmp_path / "rules" / "a.smk").write_text("")
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "page.md").write_text("# A page\n\n## Two commands\n")
    return tmp_path


GOOD = """# Title
[page](docs/page.md), [section](docs/page.md#two-commands), [here](#title), [web](https://arxiv.org/abs/2605.08853)
`config/paper.yaml`, `bench/run.py --cores 2`, `rules/*.smk`, `rules/{stage}.smk`, `results/tables/x.md`,
`.snakemake/conda/<hash>`, `.venv/bin/python`, `EleutherAI/pythia-160m`, `my_model.yaml`

```bash
.venv/bin/snakemake --cores all --configfile config/paper.yaml
```
"""

BROKEN = {
    "link to a missing file": "[x](docs/missing.md)",
    "image of a missing file": "![fig](docs/fig.png)",
    "link to a missing heading": "[x](docs/page.md#no-such-section)",
    "link to a missing heading here": "[x](#nowhere)",
    "link out of the repository": "[design](../shared/design.md)",
    "reference link to a missing file": "[x]: config/missing.yaml",
    "inline path that does not exist": "see `config/papr.yaml`",
    "inline path in a command": "`bench/runn.py --cores 2`",
    "inline path out of the repository": "`../shared/design.md`",
    "placeholder that matches nothing": "`rules/{stage}.py`",
    "path in a code block": "```bash\n.venv/bin/snakemake --configfile config/full.yaml\n```",
}


def test_checker_passes_a_good_document(repo):
    (repo / "README.md").write_text(GOOD)
    assert problems(repo / "README.md", repo) == []


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_checker_fails_on_a_broken_document(repo, case):
    (repo / "README.md").write_text(GOOD + "\n" + BROKEN[case] + "\n")
    found = problems(repo / "README.md", repo)
    assert len(found) == 1, found


def test_checker_fails_on_a_long_readme(repo):
    (repo / "README.md").write_text("line\n" * README_MAX_LINES)
    assert readme_problems(repo) == []
    (repo / "README.md").write_text("line\n" * (README_MAX_LINES + 1))
    assert readme_problems(repo) == [f"README.md has {README_MAX_LINES + 1} lines (at most {README_MAX_LINES})"]


# -- pointers from the code and docs/extending.md's claims about the tests and a task's files ------
CODE_DIRS = ("src", "config", "rules", "workflow", "bench")
CODE_SUFFIXES = (".py", ".yaml", ".yml", ".smk")
TEST_PATH = re.compile(r"\btests/[\w/.-]*?\.py\b")
EXTENDING = ROOT / "docs" / "extending.md"


def quoted_test_path_problems(root: Path = ROOT) -> list[str]:
    """Every `tests/...py` path a comment or docstring of the code or a config quotes that does not
    exist (file:line: path)."""
    files = [p for d in CODE_DIRS for p in sorted((root / d).rglob("*")) if p.suffix in CODE_SUFFIXES
             and "egg-info" not in p.as_posix()] + [p for p in [root / "Snakefile"] if p.is_file()]
    return [f"{p.relative_to(root)}:{i}: {m}" for p in files
            for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
            for m in TEST_PATH.findall(line) if not (root / m).is_file()]


def test_every_test_path_quoted_in_the_code_exists():
    assert quoted_test_path_problems() == []


def test_the_test_path_check_finds_a_moved_test(repo):
    (repo / "tests" / "unit").mkdir(parents=True)
    (repo / "tests" / "unit" / "test_a.py").write_text("")
    (repo / "bench" / "run.py").write_text("# checked by tests/unit/test_a.py and tests/test_a.py\n")
    (repo / "config" / "paper.yaml").write_text("seed: 0  # tests/unit/test_a.py::test_one\n")
    assert quoted_test_path_problems(repo) == ["bench/run.py:1: tests/test_a.py"]


def _row(first_cell: str) -> list[str]:
    """The cells of docs/extending.md's table row that begins with `first_cell`."""
    for line in EXTENDING.read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells[0] == first_cell:
            return cells
    raise AssertionError(f"docs/extending.md has no table row {first_cell!r}")


def test_the_test_folders_hold_as_many_files_as_the_docs_say():
    for folder in ("unit", "models", "workflow"):
        n = len(list((ROOT / "tests" / folder).glob("test_*.py")))
        assert _row(f"`tests/{folder}/`")[-1] == str(n), f"docs/extending.md: tests/{folder}/ holds {n} test files"


def test_the_shipped_task_recipe_names_each_file_a_task_touches():
    """The row 'a task, shipped' counts the files it names; each names every built-in task (a new
    one goes beside them there), and so does no report caption it leaves out."""
    from circuitloc.plan.vocabulary import builtin_tasks

    cells = _row("a task, shipped")
    files = [t for t in INLINE_CODE.findall(cells[2]) if "/" in t and t.endswith((".py", ".yaml", ".rst"))]
    assert cells[1] == str(len(files)), (cells[1], files)
    tasks = [t.name for t in builtin_tasks.BUILTIN if t.in_workflow and t.base is None]

    def names_every_task(path: Path) -> bool:
        text = path.read_text(encoding="utf-8").lower()
        return all(re.search(rf"\b{t}\b", text) for t in tasks)

    listed = {ROOT / f for f in files if "<" not in f}
    assert all(names_every_task(p) for p in listed), [str(p) for p in listed if not names_every_task(p)]
    captions = {p for p in (ROOT / "report").glob("*.rst") if names_every_task(p)}
    assert captions <= listed, sorted(str(p.relative_to(ROOT)) for p in captions - listed)


def test_no_unit_test_has_a_wall_clock_timeout():
    """docs/extending.md: no test in tests/unit gives a call a wall-clock `timeout=` (on a busy machine
    a fresh interpreter's imports outran one and failed a correct test)."""
    import ast

    found = [f"{p.name}:{n.lineno}" for p in sorted((ROOT / "tests" / "unit").glob("*.py"))
             for n in ast.walk(ast.parse(p.read_text(encoding="utf-8")))
             if isinstance(n, ast.Call) and any(k.arg == "timeout" for k in n.keywords)]
    assert found == [], found
