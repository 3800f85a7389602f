#!/usr/bin/env bash
# tests/cli/cpu-cap.sh - tests/tools/cpu-cap.sh, which lets 4 ranks emulate 4 slower cores on 2 (bench/vstages.sh
# CAP=0.5): two ranks held to 0.3 of a core each use at most ~0.3 of one (a busy loop's CPU time over its wall
# time; an uncapped loop reads ~1 on an idle core, so the check fails without the quota), the groups are gone
# afterwards, bad options exit 2, and a 4-rank pipeline bench runs under it
# with waits that do not yield (DTRAIN_WAIT_YIELD=0, set by the tool; a bad value exits 2). Skips (77) without root or cgroup v1.
. "$(dirname "$0")/lib.sh"
command -v "$MPIRUN" >/dev/null || { echo "SKIP: no mpirun"; exit 77; }
CAPT=$top_srcdir/tests/tools/cpu-cap.sh
"$CAPT" --share 0.5 -- true; rc=$?
[ "$rc" = 77 ] && { echo "SKIP: no cgroup v1 cpu controller or not root"; exit 77; }
[ "$rc" = 0 ] || fail "a capped 'true' exits $rc"
cat > "$TMP/busy.py" <<'PY'
import time
t = time.time(); c = time.process_time()
while time.time() - t < 1.5: pass
print("%.3f" % ((time.process_time() - c) / (time.time() - t)))
PY
"$CAPT" --share 0.3 --period 10000 -- "$MPIRUN" -np 2 --bind-to none "$CAPT" python3 "$TMP/busy.py" > "$TMP/frac" 2>"$TMP/err"
python3 - "$TMP/frac" <<'PY' && pass "2 ranks at 0.3 each use $(tr '\n' ' ' < "$TMP/frac")of a core" || fail "capped fractions: $(cat "$TMP/frac" "$TMP/err")"
import sys
f = [float(x) for x in open(sys.argv[1]).read().split()]
sys.exit(0 if len(f) == 2 and all(0.05 < x < 0.4 for x in f) else 1)
PY
ls -d /sys/fs/cgroup/cpu/dtrain-cap.* 2>/dev/null | grep -q . && fail "groups left: $(ls -d /sys/fs/cgroup/cpu/dtrain-cap.*)" || pass "groups removed"
expect_rc 2 "share 0 refused" "$CAPT" --share 0 -- true
expect_rc 2 "unknown option refused" "$CAPT" --bogus -- true
cp "$top_srcdir/bench/models/mlp-even8.yaml" "$TMP/m.yaml"
cluster pp4 'partition: {strategy: model, micro_batches: 4, schedule: 1f1b}'
OMPI_MCA_rmaps_base_oversubscribe=1 "$CAPT" --share 0.5 -- "$MPIRUN" -np 4 --bind-to none "$CAPT" "$DTRAIN" bench \
  "$TMP/m.yaml" --cluster "$TMP/pp4.yaml" --batch 32 --iters 2 --warmup 1 --json > "$TMP/b.json" 2>"$TMP/err" \
  && python3 -c "import json,sys; m=json.load(open(sys.argv[1]))[0]; sys.exit(0 if len(m['stages'])==4 and m['pipeline']['waits_yield'] is False else 1)" "$TMP/b.json" \
  && pass "4-rank pipeline bench under the cap, its waits spinning in their own shares" || fail "4-rank bench: $(head -5 "$TMP/err" "$TMP/b.json")"
DTRAIN_WAIT_YIELD=2 expect_rc 2 "DTRAIN_WAIT_YIELD=2 refused" "$DTRAIN" bench "$TMP/m.yaml" --batch 8 --iters 1 --warmup 0
finish
