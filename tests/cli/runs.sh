#!/usr/bin/env bash
# tests/cli/runs.sh - working with runs: a fresh run never overwrites a previous one (--force
# starts over), the best and the K newest checkpoints and what state.json says of them, resume
# hints and warnings, plain progress lines off a terminal (a pipe, mpirun into a file) with no
# carriage return, metrics step lines, the partial-epoch flag, time over a resume, dtrain plot,
# dtrain eval against the run's own metrics, dtrain predict, dtrain keys.
. "$(dirname "$0")/lib.sh"
cd "$top_srcdir"

tiny_spec "$TMP/tiny.yaml"
# ---- never lose a run ----
expect_rc 0 "first run" "$DTRAIN" run "$TMP/tiny.yaml" --out "$TMP/old" --quiet
cp "$TMP/old/model.safetensors" "$TMP/old.st"
expect_rc 2 "a fresh run into a previous run's directory is refused" "$DTRAIN" run "$TMP/tiny.yaml" --out "$TMP/old" --max-steps 3 --quiet
grep -q -- "holds a previous run.*--resume continues it, --force or another --out starts over" "$TMP/err" || fail "refusal message: $(cat "$TMP/err")"
cmp -s "$TMP/old.st" "$TMP/old/model.safetensors" && [ -s "$TMP/old/checkpoints/latest" ] && pass "the old run is untouched" || fail "the refused run changed the old one"
expect_rc 0 "--force starts over" "$DTRAIN" run "$TMP/tiny.yaml" --out "$TMP/old" --max-steps 3 --force --quiet
[ "$(grep -c '"split":"train"' "$TMP/old/metrics.jsonl")" = 1 ] || fail "--force: the old metrics are gone"
[ "$(cat "$TMP/old/checkpoints/latest")" = step-00000003 ] || fail "--force: latest is the new run's"
[ "$(ls "$TMP/old"/events.out.tfevents.* | wc -l)" = 1 ] || fail "--force: one events file (the new run's)"
expect_rc 2 "--resume DIR without '='" "$DTRAIN" run --resume "$TMP/old" "$TMP/tiny.yaml"
grep -q "hint: --resume takes a directory only as --resume=$TMP/old" "$TMP/err" || fail "--resume hint: $(cat "$TMP/err")"

# ---- best and newest checkpoints ----
TINY_EPOCHS=6 tiny_spec "$TMP/keep.yaml"
sed -i 's/  clip_norm: 1.0/  clip_norm: 1.0\n  keep_checkpoints: 2\n  checkpoint_every: 10\n  log_every: 8/' "$TMP/keep.yaml"
expect_rc 0 "run keeping 2 checkpoints and the best" "$DTRAIN" run "$TMP/keep.yaml" --out "$TMP/keep"
best_step=$(grep '"split":"test"' "$TMP/keep/metrics.jsonl" | sed 's/.*"step":\([0-9]*\).*"loss":\([0-9.e-]*\).*/\2 \1/' | sort -g | head -1 | cut -d' ' -f2)
best=$(printf 'step-%08d' "$best_step")
[ "$(cat "$TMP/keep/checkpoints/best")" = "$best" ] && pass "checkpoints/best names the lowest test loss ($best)" || fail "best is $(cat "$TMP/keep/checkpoints/best"), lowest test loss at $best"
latest=$(cat "$TMP/keep/checkpoints/latest")
n=$(ls -d "$TMP/keep/checkpoints"/step-* | wc -l)
want=2; [ "$best" != step-00000192 ] && [ "$best" != step-00000190 ] && want=3
[ "$n" = "$want" ] && pass "$n checkpoint directories: 2 newest + best" || fail "$n checkpoint directories, wanted $want: $(ls "$TMP/keep/checkpoints")"
[ -d "$TMP/keep/checkpoints/$best" ] || fail "the best checkpoint directory is kept"
grep -q "\"dir\": \"$best\"" "$TMP/keep/checkpoints/$latest/state.json" || fail "state.json names the best: $(grep -A4 best "$TMP/keep/checkpoints/$latest/state.json")"
grep -q "best checkpoint: step $best_step (test_loss" "$TMP/out" || fail "the run's output names the best checkpoint"
grep -q '(best)' "$TMP/out" || fail "the epoch line marks a new best"

# ---- metrics: step lines, the partial flag, time over a resume ----
[ "$(grep -c '"split":"step"' "$TMP/keep/metrics.jsonl")" = 24 ] || fail "one step line per log_every (8) steps: $(grep -c '"split":"step"' "$TMP/keep/metrics.jsonl")"
for k in loss accuracy lr grad_norm samples_per_sec time; do
  grep '"split":"step"' "$TMP/keep/metrics.jsonl" | head -1 | grep -q "\"$k\":[0-9]" || fail "step line key $k"
done
expect_rc 0 "10 steps" "$DTRAIN" run "$TMP/tiny.yaml" --out "$TMP/part" --max-steps 10 --quiet
grep '"split":"train"' "$TMP/part/metrics.jsonl" | grep -q '"partial":true' && pass "a cut epoch is flagged partial" || fail "partial flag"
sleep 1
expect_rc 0 "resume to the end" "$DTRAIN" run "$TMP/tiny.yaml" --out "$TMP/part" --resume --quiet
awk -F'"time":' 'NF > 1 { split($2, a, /[,}]/); if (a[1] + 0 < last - 1e-9) bad = 1; last = a[1] + 0 } END { exit bad }' "$TMP/part/metrics.jsonl" \
  && pass "metrics time never goes back over a resume" || fail "time restarted: $(grep -o '"time":[0-9.]*' "$TMP/part/metrics.jsonl" | tr '\n' ' ')"
grep '"split":"train"' "$TMP/part/metrics.jsonl" | tail -1 | grep -q partial && fail "a whole epoch is flagged partial"

# ---- resume warnings ----
expect_rc 0 "resume with more epochs" "$DTRAIN" run "$TMP/tiny.yaml" --out "$TMP/part" --resume --epochs 5 --quiet
grep -q "warning: the checkpoint's run was set for 3 epochs, this one for 5: the cosine schedule now spans" "$TMP/err" \
  && pass "a changed epoch count is warned about" || fail "epochs warning: $(cat "$TMP/err")"

# ---- progress lines off a terminal ----
TINY_EPOCHS=2 tiny_spec "$TMP/p.yaml"
"$DTRAIN" run "$TMP/p.yaml" --out "$TMP/pipe" --progress-steps 10 2>&1 | cat > "$TMP/pipe.log"
grep -q $'\r' "$TMP/pipe.log" && fail "a carriage return in piped output" || pass "no carriage return in a pipe"
grep -Eq '^progress: epoch 1/2 step 10/64 \(10/32 in epoch\) loss [0-9.]+ [0-9]+ samples/s elapsed [0-9.]+s ETA epoch [0-9.]+s run [0-9.]+s$' "$TMP/pipe.log" \
  && pass "a progress line with step, loss, samples/s, elapsed and ETA" || fail "progress line: $(grep progress "$TMP/pipe.log" | head -2)"
[ "$(grep -c '^progress:' "$TMP/pipe.log")" = 6 ] || fail "a line every 10 steps: $(grep -c '^progress:' "$TMP/pipe.log")"
"$DTRAIN" run "$TMP/p.yaml" --out "$TMP/quiet" --quiet --progress-steps 1 > "$TMP/q.log" 2>&1
[ -s "$TMP/q.log" ] && fail "--quiet prints: $(head -2 "$TMP/q.log")"
timeout -k 5 120 $MPIRUN -np 2 "$DTRAIN" run "$TMP/p.yaml" --out "$TMP/mpi" --threads 1 --progress-steps 16 > "$TMP/mpi.log" 2>&1 || fail "mpirun run: $(tail -3 "$TMP/mpi.log")"
grep -q $'\r' "$TMP/mpi.log" && fail "a carriage return under mpirun > file" || pass "no carriage return under mpirun > file"
[ "$(grep -c '^progress:' "$TMP/mpi.log")" = 4 ] && pass "rank 0 alone prints progress under mpirun" || fail "progress lines under mpirun: $(grep -c '^progress:' "$TMP/mpi.log")"

# on a terminal (script(1) gives one, 50 columns): a bar redrawn in place that never wraps, with
# the time left, and the evaluation said
if command -v script >/dev/null; then
  script -qec "stty cols 50; '$DTRAIN' run '$TMP/p.yaml' --out '$TMP/tty'" "$TMP/tty.log" > /dev/null 2>&1
  tr '\r' '\n' < "$TMP/tty.log" | sed 's/\x1b\[K//g' | grep '^epoch [0-9]*/2 ' | grep -v '  step ' > "$TMP/bars"
  [ -s "$TMP/bars" ] && awk 'length($0) > 49 { bad = 1 } END { exit bad }' "$TMP/bars" && grep -q '\[=*>* *\] .*ETA' "$TMP/bars" \
    && pass "the terminal bar fits 50 columns and shows the ETA" || fail "bar: $(head -3 "$TMP/bars")"
  grep -q 'evaluating the test set' "$TMP/bars" && pass "the bar says when the test set is evaluated" || fail "no evaluating state"
else
  echo "note: no script(1); the terminal bar is not tested"
fi

# ---- one clear message when every rank fails the same way ----
sed 's|  train: {format: synthetic, n: 1024, seed: 3, noise: 1.0}|  train: {format: npy, x: no/such/x.npy, y: no/such/y.npy}|' "$TMP/p.yaml" > "$TMP/nodata.yaml"
timeout -k 5 120 $MPIRUN -np 2 "$DTRAIN" run "$TMP/nodata.yaml" --out "$TMP/nodata" --threads 1 > "$TMP/nd.log" 2>&1; rc=$?
[ "$rc" = 3 ] || fail "missing data under mpirun: exit $rc, wanted 3"
[ "$(grep -c 'cannot find data file' "$TMP/nd.log")" = 1 ] && ! grep -q 'more process has sent help message' "$TMP/nd.log" \
  && pass "missing data under mpirun: one message, one abort notice" || fail "messages: $(cat "$TMP/nd.log")"

# ---- plot ----
expect_rc 0 "plot SVG" "$DTRAIN" plot "$TMP/keep" -o "$TMP/c.svg"
grep -q '<svg' "$TMP/c.svg" && grep -q 'accuracy' "$TMP/c.svg" || fail "an SVG with the accuracy panel"
if "$DTRAIN" plot --help | grep -q 'PNG needs'; then :; fi
if "$DTRAIN" plot "$TMP/keep" -o "$TMP/c.png" >"$TMP/out" 2>"$TMP/err"; then
  [ "$(head -c 8 "$TMP/c.png" | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ] && pass "plot PNG (cairo)" || fail "not a PNG"
else
  grep -q 'built without cairo' "$TMP/err" && pass "PNG refused clearly without cairo" || fail "plot PNG: $(cat "$TMP/err")"
fi
expect_rc 3 "plot a directory without metrics" "$DTRAIN" plot "$TMP/nowhere"
expect_rc 2 "plot to .gif" "$DTRAIN" plot "$TMP/keep" -o "$TMP/c.gif"

# ---- eval and predict ----
expect_rc 0 "eval the final weights" "$DTRAIN" eval "$TMP/keep.yaml" --out "$TMP/keep" --json
want=$(grep '"split":"test"' "$TMP/keep/metrics.jsonl" | tail -1 | sed 's/.*"loss":\([0-9.e-]*\).*"accuracy":\([0-9.e-]*\).*/\1 \2/')
got=$(sed 's/.*"loss":\([0-9.e-]*\),"accuracy":\([0-9.e-]*\).*/\1 \2/' "$TMP/out")
awk -v w="$want" -v g="$got" 'BEGIN { split(w, a); split(g, b); d = a[1] - b[1]; if (d < 0) d = -d; e = a[2] - b[2]; if (e < 0) e = -e; exit !(d <= 1e-5 * a[1] && e <= 1e-5) }' \
  && pass "eval = the run's last test metrics ($got)" || fail "eval $got, metrics $want"
grep -q '"confusion":\[\[' "$TMP/out" || fail "eval JSON has the confusion matrix"
expect_rc 0 "eval the best checkpoint as a table" "$DTRAIN" eval "$TMP/keep.yaml" --resume "$TMP/keep/checkpoints/$best"
grep -q 'confusion matrix' "$TMP/out" && grep -q 'recall' "$TMP/out" || fail "eval table"
bl=$(grep '"split":"test"' "$TMP/keep/metrics.jsonl" | grep "\"step\":$best_step," | sed 's/.*"loss":\([0-9.e-]*\).*/\1/')
el=$(sed -n 's/^loss \([0-9.]*\) .*/\1/p' "$TMP/out")
awk -v a="$bl" -v b="$el" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 2e-6) }' && pass "eval of the best checkpoint = its epoch's test loss" || fail "best: eval $el, metrics $bl"
# an mse model of labelled data: eval counts the right argmaxes as the run does (it said 0%)
sed 's/^loss: softmax_cross_entropy/loss: mse/' "$TMP/keep.yaml" >"$TMP/mse.yaml"
grep -q '^loss: mse' "$TMP/mse.yaml" || fail "could not derive an mse spec"
expect_rc 0 "an mse model" "$DTRAIN" run "$TMP/mse.yaml" --out "$TMP/mse" --quiet
expect_rc 0 "eval of the mse model" "$DTRAIN" eval "$TMP/mse.yaml" --out "$TMP/mse" --json
want=$(grep '"split":"test"' "$TMP/mse/metrics.jsonl" | tail -1 | sed 's/.*"accuracy":\([0-9.e-]*\).*/\1/')
got=$(sed 's/.*"accuracy":\([0-9.e-]*\).*/\1/' "$TMP/out")
awk -v w="$want" -v g="$got" 'BEGIN { d = w - g; if (d < 0) d = -d; exit !(w > 0.3 && d <= 1e-5) }' \
  && pass "eval's accuracy of an mse model = the run's ($got)" || fail "mse: eval accuracy $got, the run's $want"
expect_rc 2 "eval --data other" "$DTRAIN" eval "$TMP/keep.yaml" --data other
expect_rc 4 "eval without weights" "$DTRAIN" eval "$TMP/keep.yaml" --out "$TMP/nowhere"
{ echo "a,b,c,d,e,f,g,h,i,j,k,l,m,n,o,p"; for i in 1 2 3; do seq -s, 1 16; done; } > "$TMP/in.csv"
expect_rc 0 "predict a CSV" "$DTRAIN" predict "$TMP/keep.yaml" --out "$TMP/keep" --input "$TMP/in.csv"
[ "$(head -1 "$TMP/out")" = "sample,predicted,p0,p1,p2,p3" ] || fail "predict header: $(head -1 "$TMP/out")"
[ "$(wc -l < "$TMP/out")" = 4 ] || fail "one line per sample"
awk -F, 'NR > 1 { s = $3 + $4 + $5 + $6; if (s < 0.9999 || s > 1.0001) bad = 1 } END { exit bad }' "$TMP/out" && pass "probabilities sum to 1" || fail "probabilities: $(cat "$TMP/out")"
printf '1,2,3\n' > "$TMP/narrow.csv"
expect_rc 3 "predict: a row of 3 values for 16 inputs" "$DTRAIN" predict "$TMP/keep.yaml" --out "$TMP/keep" --input "$TMP/narrow.csv"
grep -q '3 columns per row but the model' "$TMP/err" || fail "narrow CSV message: $(cat "$TMP/err")"
expect_rc 2 "predict without --input" "$DTRAIN" predict "$TMP/keep.yaml"
# predict on the test set's features: its argmax accuracy is the run's test accuracy
expect_rc 0 "train the CSV blobs" "$DTRAIN" run models/blobs-csv.yaml --out "$TMP/blobs" --epochs 3 --quiet
cut -d, -f1-4 data/blobs-test.csv > "$TMP/bx.csv"
expect_rc 0 "predict the test features" "$DTRAIN" predict models/blobs-csv.yaml --out "$TMP/blobs" --input "$TMP/bx.csv" -o "$TMP/bp.csv"
acc=$(paste -d, <(tail -n +2 "$TMP/bp.csv") <(tail -n +2 data/blobs-test.csv | cut -d, -f5) | awk -F, '{ n++; if ($2 == $NF) k++ } END { printf "%.6g", k / n }')
want=$(grep '"split":"test"' "$TMP/blobs/metrics.jsonl" | tail -1 | sed 's/.*"accuracy":\([0-9.e-]*\).*/\1/')
awk -v a="$acc" -v b="$want" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d < 1e-5) }' \
  && pass "predict's argmax accuracy = the run's test accuracy ($acc)" || fail "predict accuracy $acc, metrics $want"

# ---- smaller messages ----
printf 'partition:\n  strategy: pipeline\n' > "$TMP/strat.yaml"
expect_rc 2 "strategy: pipeline" "$DTRAIN" check "$TMP/tiny.yaml" --cluster "$TMP/strat.yaml"
grep -q "strat.yaml:2:13: error: unknown strategy 'pipeline'; what runs it is strategy: model" "$TMP/err" || fail "strategy hint: $(cat "$TMP/err")"
TINY_EPOCHS=1 tiny_spec "$TMP/one.yaml"
expect_rc 0 "one epoch" "$DTRAIN" run "$TMP/one.yaml" --out "$TMP/one" --max-steps 1
grep -q '; 1 epoch x 32 steps' "$TMP/out" || fail "'1 epoch': $(grep '^data:' "$TMP/out")"
cat > "$TMP/gap.yaml" <<'YAML'
name: gap
input: [1, 8, 8]
layers:
  - {type: conv, name: a_rather_long_convolution_name, filters: 4, kernel: 3}
  - {type: global_avgpool}
  - {type: fc, units: 4}
loss: softmax_cross_entropy
data:
  train: {format: synthetic, n: 64, seed: 3}
  classes: 4
YAML
expect_rc 0 "check a model with long names and types" "$DTRAIN" check "$TMP/gap.yaml"
# every row's params column ends where the header's does
sed -n '/^layer /,/^total /p' "$TMP/out" | awk 'NR == 1 { w = index($0, "params") + 5; next } { if (substr($0, w, 1) !~ /[0-9]/ || substr($0, w + 1, 1) != " ") bad = 1 } END { exit bad }' \
  && pass "the layer table stays aligned with long names and types" || fail "table: $(sed -n '/^layer /,/^total /p' "$TMP/out")"
printf 'a,b,c\n1,2,0\n' > "$TMP/h.csv"
sed "s|  train: {format: synthetic, n: 1024, seed: 3, noise: 1.0}|  train: {format: csv, path: $TMP/h.csv}|" "$TMP/tiny.yaml" > "$TMP/h.yaml"
expect_rc 3 "a CSV header without header: true" "$DTRAIN" check "$TMP/h.yaml"
grep -q 'set header: true' "$TMP/err" || fail "CSV header hint: $(cat "$TMP/err")"

# ---- keys ----
expect_rc 2 "keys --bogus" "$DTRAIN" keys --bogus
expect_rc 0 "keys filtered" "$DTRAIN" keys layers.conv
grep -q '^layers.conv.kernel ' "$TMP/out" && ! grep -q '^train\.' "$TMP/out" && pass "keys FILTER lists only matching keys" || fail "keys filter: $(head -3 "$TMP/out")"
grep -Eq '^train.keep_checkpoints +integer +1$' <("$DTRAIN" keys train.keep) && pass "keys shows type and default" || fail "keys type/default: $("$DTRAIN" keys train.keep)"
finish
