"""Write the test config's IOI source, .test/ioi_fahamu.parquet: a small file in fahamu/ioi's format
(one column `ioi_sentences`, each a full sentence ending in the indirect object's name, some with a
full stop), drawn from the 30 templates and the shipped names, places and objects
(circuitloc.tasks.ioi.synthetic_fahamu). Deterministic: rerunning it rewrites the same sentences.

    python tests/make_test_fahamu.py && CIRCUITLOC_UPDATE_EXPECTED=1 python -m pytest tests/workflow/test_workflow.py
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

from circuitloc.tasks import fahamu, ioi  # noqa: E402

PATH = ROOT / ".test" / "ioi_fahamu.parquet"
ROWS, SEED = 300, 16


def main(path=PATH, rows=ROWS, seed=SEED):
    sentences = ioi.synthetic_fahamu(rows, seed)["sentence"]
    table = pa.table({fahamu.FAHAMU_COLUMN: pa.array(list(sentences), pa.string())})
    pq.write_table(table, path, row_group_size=100)
    print(f"wrote {path} ({rows} rows)")


if __name__ == "__main__":
    main()
