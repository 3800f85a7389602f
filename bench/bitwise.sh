#!/usr/bin/env bash
# bench/bitwise.sh OLD_DTRAIN NEW_DTRAIN [FILTER] - a refactoring's "no change in behaviour" check:
# the same runs with two builds, model.safetensors compared with cmp. Single rank (mlp, lenet,
# lstm, resnet 50 steps), data parallel 2 and 4 (allreduce, reproducible), tensor 2, pipeline 2
# (gpipe, 1f1b, zb-h1), data 2 x pipeline 2, tensor 2 x pipeline 2, and a resume across layouts
# (2 stages -> data 2). Runs from the source tree (the models name their data relative to it);
# FILTER (a grep -E pattern) picks runs by name. Prints one line per run; exits 1 on any difference.
set -u
OLD=$1 NEW=$2 FILTER=${3:-.}
cd "$(dirname "$0")/.."
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
T=$(mktemp -d "${TMPDIR:-/tmp}/dtrain-bitwise.XXXXXX")
trap 'rm -rf "$T"' EXIT
cl() { printf '%s\n' "$2" >"$T/$1.yaml"; }
cl dp 'partition: {strategy: data}'
cl repro 'partition: {strategy: data, reproducible: true}'
cl t2 'partition: {strategy: model, tensor: 2}'
cl pg 'partition: {strategy: model, micro_batches: 4, schedule: gpipe}'
cl pf 'partition: {strategy: model, micro_batches: 4, schedule: 1f1b}'
cl pz 'partition: {strategy: model, micro_batches: 4, schedule: zb-h1}'
cl d2p2 'partition: {strategy: hybrid, data: 2, pipeline: 2, micro_batches: 2}'
cl t2p2 'partition: {strategy: model, tensor: 2, pipeline: 2, micro_batches: 4}'
bad=0
# one NAME NP SPEC CLUSTER|- STEPS [extra flags]: the run with both builds, compared
one() {
  local name=$1 np=$2 spec=$3 c=$4 steps=$5; shift 5
  printf '%s\n' "$name" | grep -qE -- "$FILTER" || return 0
  local b out
  for b in old new; do
    local bin=$OLD; [ $b = new ] && bin=$NEW
    out=$T/$name.$b
    local cmd=("$bin" run "$spec" --out "$out" --max-steps "$steps" --threads 1 --quiet "$@")
    [ "$c" != - ] && cmd+=(--cluster "$T/$c.yaml")
    if [ "$np" -gt 1 ]; then cmd=(mpirun -np "$np" "${cmd[@]}"); fi
    timeout 600 "${cmd[@]}" >"$out.log" 2>&1 || { echo "ERROR $name ($b): exit $?"; tail -3 "$out.log"; bad=1; return; }
  done
  if cmp -s "$T/$name.old/model.safetensors" "$T/$name.new/model.safetensors"; then echo "same  $name"
  else echo "DIFF  $name"; bad=1; fi
}
one mlp 1 models/mlp.yaml - 50
one lenet 1 models/lenet.yaml - 50
one lstm 1 models/lstm.yaml - 50
one resnet 1 models/resnet.yaml - 50
one cnn-bn 1 models/cnn-bn.yaml - 30
one dp2 2 models/mlp.yaml dp 40
one dp4 4 models/mlp.yaml dp 40
one dp2-repro 2 models/mlp.yaml repro 40
one dp4-repro 4 models/mlp.yaml repro 40
one dp2-lenet 2 models/lenet.yaml dp 20
one tp2 2 models/mlp.yaml t2 40
one tp2-lstm 2 models/lstm.yaml t2 20
one pp2-gpipe 2 models/mlp.yaml pg 40
one pp2-1f1b 2 models/mlp.yaml pf 40
one pp2-zb 2 models/mlp.yaml pz 40
one pp2-resnet 2 models/resnet.yaml pf 10
one d2p2 4 models/mlp.yaml d2p2 40
one t2p2 4 models/mlp.yaml t2p2 40
# resume across layouts: 20 steps as 2 stages, then to 40 as data 2
if printf 'resume-layouts\n' | grep -qE -- "$FILTER"; then
  for b in old new; do
    bin=$OLD; [ $b = new ] && bin=$NEW
    out=$T/resume.$b
    mpirun -np 2 "$bin" run models/mlp.yaml --cluster "$T/pf.yaml" --out "$out" --max-steps 20 --threads 1 --quiet >"$out.log" 2>&1 &&
      mpirun -np 2 "$bin" run models/mlp.yaml --cluster "$T/dp.yaml" --out "$out" --max-steps 40 --threads 1 --quiet --resume \
        >>"$out.log" 2>&1 || { echo "ERROR resume-layouts ($b)"; tail -3 "$out.log"; bad=1; }
  done
  cmp -s "$T/resume.old/model.safetensors" "$T/resume.new/model.safetensors" && echo "same  resume-layouts" \
    || { echo "DIFF  resume-layouts"; bad=1; }
fi
exit $bad
