#!/usr/bin/env bash
# Every GPU measurement of the rollout engines and the update, in one run of under 8 minutes on one GPU, each part
# under its own time limit so that one failure costs only itself; logs in $OUT (default .gpu/logs), the tables at
# the end. Prepared here by scripts/prepare_gpu_checks.sh (.gpu/: the wheels the GPU image lacks and SmolLM2's
# configuration and tokenizer; random weights are made on the machine). Parts, most important first:
#
#   tests          the CUDA tests of the static-cache engine (graph replay equals the eager step; replays after a
#                  weight change read the new weights) and of packed flex attention
#   engines_135m   generation tokens/s, transformers vs static_cache, 135M shape, bf16, 64 / 256 / 1,024 rows
#   vs_trl         one GRPO step against TRL 1.16 (no vLLM), bf16, the step's 64 completions as one micro-batch;
#                  grove with rollout.engine auto (static_cache on CUDA) and with transformers
#   frozenlake_*   the multi-turn FrozenLake rollout (conversation prompts, prefix reuse), each engine
#   engines_05b    generation tokens/s at the 0.5B shape (Qwen2.5-0.5B's dimensions), 64 / 256 rows
#   mfu_05b        the update's model-FLOPs utilisation at the 0.5B shape (flex attention; then the dense mask,
#                  which needs no compilation: the first update's one-off cost apart)
#
#   bash benchmarks/gpu_checks.sh            # on the GPU machine, from the repository root
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-.gpu/logs}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --target .gpu/site .gpu/whl/*.whl > "$OUT/install.log" 2>&1
export PYTHONPATH=$PWD/.gpu/site:$PWD/src:$PWD PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > "$OUT/gpu.txt" 2>&1
python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)" \
  >> "$OUT/gpu.txt" 2>&1
[ -d .gpu/smol ] || python3 scripts/make_random_model.py .gpu/smol --src .gpu/src135m > "$OUT/model.log" 2>&1

part() {  # part NAME SECONDS COMMAND...: run COMMAND under a time limit, its output in $OUT/NAME.log
  local name=$1 limit=$2 start
  shift 2
  start=$(date +%s)
  timeout "$limit" "$@" > "$OUT/$name.log" 2>&1
  echo "$name: exit $? after $(( $(date +%s) - start )) s" | tee -a "$OUT/parts.txt"
}

part tests 60 python3 -m pytest -q -p no:cacheprovider tests/test_static_engine.py tests/test_packed_attention.py \
  -k "cuda or flex"
part engines_135m 75 python3 benchmarks/rollout_engines.py --device cuda --shape 135m --rows 64 256 1024 --repeats 2
part vs_trl 140 python3 benchmarks/vs_trl.py --device cuda --model .gpu/smol --rounds 1 --steps 4 \
  --impls trl-bf16 grove-bf16 --set train.micro_batch_size=64
part vs_trl_transformers 60 python3 benchmarks/vs_trl.py --device cuda --model .gpu/smol --rounds 1 --steps 4 \
  --impls grove-bf16 --set train.micro_batch_size=64 --set rollout.engine=transformers
part frozenlake_static 40 python3 benchmarks/multi_turn_rollout.py --device cuda --precision bf16 --rounds 3 \
  --set model.name=.gpu/smol --set model.init_from=null
part frozenlake_transformers 40 python3 benchmarks/multi_turn_rollout.py --device cuda --precision bf16 --rounds 3 \
  --set model.name=.gpu/smol --set model.init_from=null --set rollout.engine=transformers
part engines_05b 45 python3 benchmarks/rollout_engines.py --device cuda --shape 0.5b --rows 64 256 --repeats 2
part mfu_05b 55 python3 benchmarks/update_mfu.py --device cuda --shape 0.5b
part mfu_05b_dense 30 python3 benchmarks/update_mfu.py --device cuda --shape 0.5b --packed-attention dense_mask

echo; echo "== machine"; cat "$OUT/gpu.txt"
echo; echo "== parts"; cat "$OUT/parts.txt"
echo; echo "== tests"; tail -n 3 "$OUT/tests.log"
for name in engines_135m engines_05b; do
  echo; echo "== $name"; grep -E "^\||×" "$OUT/$name.log" || tail -n 5 "$OUT/$name.log"
done
echo; echo "== vs_trl"; grep -E "^\||vs trl" "$OUT/vs_trl.log" "$OUT/vs_trl_transformers.log" || tail -n 5 "$OUT/vs_trl.log"
for name in frozenlake_static frozenlake_transformers; do
  echo; echo "== $name"; grep -E "^examples|^\| median|peak" "$OUT/$name.log" || tail -n 5 "$OUT/$name.log"
done
for name in mfu_05b mfu_05b_dense; do
  echo; echo "== $name"; grep -E "first update|^0.5b" "$OUT/$name.log" || tail -n 5 "$OUT/$name.log"
done
echo; echo "== flex attention compiled everywhere"
grep -l "flex_attention called without torch.compile" "$OUT"/*.log || echo "no log holds the unfused-kernel warning"
