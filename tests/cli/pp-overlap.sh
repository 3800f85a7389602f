#!/usr/bin/env bash
# tests/cli/pp-overlap.sh - a pipeline's steps overlap (issue 31): a stage updates as soon as its
# walk is done and leaves the stages' norm sum in flight, completed at the next step or a log line;
# with clipping the step is taken unclipped and put back and taken clipped when its norm says so
# (post-validation). Under real mpirun: without clipping, weights bitwise equal to 1 rank (zb-v on 2
# and 4 stages, 1f1b) and to clip_norm 1e30 (speculated, never clipped), the logged norms too; the
# trace shows the norm waited on, never a blocking sum. With clipping on some steps (clip_norm 1
# here clips 8 of 16): bitwise equal to 1 rank on 2 stages (rollbacks at the next step, which walks
# again) and 4 (at log lines), one rollback per speculated step that clipped (a clip-prone stretch
# waits instead), a stop at a step that rolls back resumed; the copies planned and measured. Faults: a NaN gradient or loss ends the job
# from its stage (exit 5, the tensor named); a silent stage still ends it (exit 6).
. "$(dirname "$0")/lib.sh"
command -v "$MPIRUN" >/dev/null || { echo "SKIP: no mpirun"; exit 77; }
export OMPI_MCA_rmaps_base_oversubscribe=1
D=$top_srcdir/tests/cli
cluster acc4 'partition: {micro_batch: 4}'
cluster zv 'partition: {strategy: model, micro_batches: 8, schedule: zb-v, virtual_stages: 2}'
cluster f1 'partition: {strategy: model, micro_batches: 8, schedule: 1f1b}'
NC="--max-steps 12 --set train.clip_norm=0 --set train.log_every=1"

mpi_run one 1 "$D/pp-v-mlp.yaml" acc4 $NC
mpi_run zv2 2 "$D/pp-v-mlp.yaml" zv $NC
mpi_run zv4 4 "$D/pp-v-mlp.yaml" zv $NC --trace "$TMP/tr.json"
mpi_run f12 2 "$D/pp-v-mlp.yaml" f1 $NC
same one zv2 "no clipping, zb-v, 2 stages = 1 rank"
same one zv4 "no clipping, zb-v, 4 stages = 1 rank"
same one f12 "no clipping, 1f1b, 2 stages = 1 rank"
# clip_norm 1e30 never clips: every step is speculated and kept
mpi_run zv4w 4 "$D/pp-v-mlp.yaml" zv --max-steps 12 --set train.clip_norm=1e30 --set train.log_every=1
same zv4 zv4w "zb-v, 4 stages: without clipping = speculated"
norms() { grep -o '"grad_norm":[^,]*' "$TMP/$1/metrics.jsonl"; }
[ "$(norms zv4 | wc -l)" = 12 ] && [ "$(norms zv4)" = "$(norms zv4w)" ] \
  && pass "the logged gradient norms: every step's, the same bits as the speculated ones" \
  || fail "gradient norms: $(norms zv4 | head -3) vs $(norms zv4w | head -3)"
# every stage waits on the sum started a step before (12 steps: 12 waits), never a blocking sum
for r in 0 1 2 3; do
  w=$(grep -o '"name":"gradient norm","cat":"wait"' "$TMP/tr.rank$r.json" | wc -l)
  b=$(grep -c '"name":"allreduce gradient norm"' "$TMP/tr.rank$r.json")
  [ "$w" = 12 ] && [ "$b" = 0 ] && pass "rank $r: 12 waits on the norm in flight, no blocking sum" \
    || fail "rank $r: $w waits, $b blocking sums of the norm"
done

# clipping on some steps: 1 rank's norms say which; a step is speculated until the first clip, then
# after hold steps in a row that did not clip, hold doubling at each rollback (stepper.h)
CL="--max-steps 16 --set train.clip_norm=1"
mpi_run c1 1 "$D/pp-v-mlp.yaml" acc4 $CL --set train.log_every=1
mpi_run c2 2 "$D/pp-v-mlp.yaml" zv $CL --set train.log_every=100 --trace "$TMP/c2.json"
mpi_run c4 4 "$D/pp-v-mlp.yaml" zv $CL --set train.log_every=1 --trace "$TMP/c4.json"
same c1 c2 "clipping some steps, zb-v, 2 stages (rollbacks walk again) = 1 rank"
same c1 c4 "clipping some steps, zb-v, 4 stages (rollbacks at log lines) = 1 rank"
read -r nclip want < <(norms c1 | cut -d: -f2 | awk '{ c = $1 > 1; n += c; h = hold ? hold : 1
  if (c && (!seen || calm >= h)) { w++; hold = 2 * h > 256 ? 256 : 2 * h }
  if (c) { seen = 1; calm = 0 } else calm++ } END { print n, w }')
[ "$nclip" -gt 0 ] && [ "$nclip" -lt 16 ] && pass "clip_norm 1 clips $nclip of 16 steps" || fail "clips $nclip of 16 steps"
for t in c2.rank0 c2.rank1 c4.rank3; do
  n=$(grep -o '"name":"rollback"' "$TMP/$t.json" | wc -l)
  [ "$n" = "$want" ] && [ "$want" -gt 0 ] && pass "$t: $n rollback(s), one per speculated step that clipped" \
    || fail "$t: $n rollbacks, wanted $want"
done
# a stop after step 7 (speculated, clipped: put back before the checkpoint), resumed to 16
mpi_run cs 2 "$D/pp-v-mlp.yaml" zv --max-steps 7 --set train.clip_norm=1
mpi_run cs 2 "$D/pp-v-mlp.yaml" zv $CL --resume
same c1 cs "stopped at a step rolled back, resumed = 1 rank"
# the copies: parameters, gradients, two moments (adam) and buffers, planned and resident
sed 's/units: 32, activation: tanh/units: 4000, activation: tanh/; s/units: 24, activation: relu/units: 400, activation: relu/' \
  "$D/pp-v-mlp.yaml" > "$TMP/big.yaml"
mpi_run b0 2 "$TMP/big.yaml" zv --max-steps 2 --set train.clip_norm=0
mpi_run b1 2 "$TMP/big.yaml" zv --max-steps 2 --set train.clip_norm=1
mem() { grep -o "\"$2\":\[[^]]*\]" "$TMP/$1/metrics.jsonl" | tail -1 | sed 's/.*\[//; s/\]//; s/.*,//'; }
python3 - "$(mem b0 mem_planned_mib)" "$(mem b1 mem_planned_mib)" "$(mem b0 mem_peak_mib)" "$(mem b1 mem_peak_mib)" <<'PY' \
  > "$TMP/mem" 2>&1 && pass "stage 1's copies: $(cat "$TMP/mem")" || fail "stage 1's copies: $(cat "$TMP/mem")"
import sys
p0, p1, m0, m1 = map(float, sys.argv[1:])
want = (4 * 4 * 1608400 + 4 * 8000) / 2**20    # bn and fc3's 1,608,400 parameters 4 times, bn's 8000 buffers
print(f"planned +{p1 - p0:.1f} MiB, measured +{m1 - m0:.1f} MiB, {want:.1f} MiB of copies")
sys.exit(not (abs(p1 - p0 - want) < 1 and abs(m1 - m0 - want) < 2))   # the plan's fixed term is the measured start-up RSS
PY

# faults: the stage whose part is not finite ends the job, naming its tensor
fault() {
  local want=$1 name=$2 f=$3; shift 3
  expect_rc "$want" "$name [DTRAIN_FAULT=$f]" env DTRAIN_FAULT="$f" timeout -k 5 120 "$MPIRUN" -np 2 "$DTRAIN" run \
    "$D/pp-v-mlp.yaml" --cluster "$TMP/zv.yaml" --threads 1 --quiet --max-steps 10 --set train.clip_norm=0 "$@"
}
has() { grep -qE -- "$1" "$TMP/err" && pass "$2" || { fail "$2: no /$1/ in stderr:"; sed 's/^/  | /' "$TMP/err" | head -20; }; }
fault 5 "zb-v: NaN gradient on stage 1" 'nan_grad@rank=1,step=3' --out "$TMP/ng1"
has "^dtrain\[rank 1/2\]: fatal: non-finite gradient norm at step 3 \(tensor: fc2.weight \(gradient\)\)" "names rank 1, step 3, fc2"
fault 5 "zb-v: NaN gradient on stage 0" 'nan_grad@rank=0,step=4' --out "$TMP/ng0"
has "^dtrain\[rank 0/2\]: fatal: non-finite gradient norm at step 4 \(tensor: fc1.weight \(gradient\)\)" "names rank 0, step 4, fc1"
fault 5 "zb-v: NaN loss (stage 0 scores)" 'nan_loss@rank=0,step=3' --out "$TMP/nl"
has "^dtrain\[rank 0/2\]: fatal: non-finite loss \(nan\) at step 3" "names rank 0 and step 3"
# a stage that stops answering while the others wait on its norm: named, exit 6
fault 6 "zb-v: stage 1 hangs" 'hang@rank=1,step=5' --out "$TMP/hang" --collective-timeout 5
has "not answering: rank 1 " "rank 1 named"
finish
