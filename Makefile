# Named test commands (docs/extending.md, "The tests"). `make unit` is the fast set; `make test` is
# the README's command, the whole suite; `make check` is what CI runs (.ci/run, after setup.sh).
PY ?= .venv/bin/python
PYTEST = $(PY) -m pytest

.PHONY: unit unit-all models workflow test lint check

unit:  ## tests/unit without the slow tests (simulations, staged reruns): about a minute of CPU
	$(PYTEST) tests/unit -m "not slow"

unit-all:  ## tests/unit, the slow tests too
	$(PYTEST) tests/unit

models:  ## the engine on tiny random models, toy training, GGUF conversion, weights on disk
	$(PYTEST) tests/models

workflow:  ## Snakemake: dry runs and the shared tiny workflow run
	$(PYTEST) tests/workflow

test:  ## the whole suite, every folder of tests/
	$(PYTEST)

lint:  ## the two linters CI runs before the tests
	.venv/bin/ruff check .
	.venv/bin/snakefmt --check .

check: lint test
