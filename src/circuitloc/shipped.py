"""Where the files the package reads at run time are: the embedded default config and its schema
(config/config.yaml, config/schema.yaml) and the tasks' resources (resources/: IOI templates and
word lists, the facts table, the neutral text). In a checkout (or an editable install) those of
the checkout; in an installed package (`pip install .`) the copies it carries under
circuitloc/_shipped/, which setup.py's build step puts there. Standard library only: the plan and
the tasks read it."""

from __future__ import annotations

from pathlib import Path

CHECKOUT = Path(__file__).resolve().parents[2]
PACKAGED = Path(__file__).resolve().parent / "_shipped"
# what an installed package carries, relative to the checkout (setup.py copies exactly these)
FILES = ("config/config.yaml", "config/schema.yaml", "resources")


def root() -> Path:
    """The folder holding config/ and resources/: the checkout's, else the installed package's copy."""
    return CHECKOUT if (CHECKOUT / FILES[0]).is_file() else PACKAGED


def resources() -> Path:
    """The tasks' resources folder (resources/ of `root`)."""
    return root() / "resources"
