#!/usr/bin/env bash
# tests/cli/cpu-cap.sh - tests/tools/cpu-cap.sh, which lets 4 ranks emulate 4 slower cores on 2 (bench/vstages.sh
# CAP=0.5): two ranks held to 0.3 of a core each use at most ~0.3 of one (a busy loop's CPU time over its wall
# time; an uncapped loop reads ~1 on an idle core, so the check fails without the quota; at nice 19 beside
# other work it may read ~0), the default period spans two scheduler ticks, the groups weigh as the caller's
# nice, Open MPI's polls do not yield, the groups are gone afterwards, bad options exit 2, and a 4-rank pipeline
# bench runs under it
# with waits that do not yield (DTRAIN_WAIT_YIELD=0, set by the tool; a bad value exits 2). Skips (77) without root or cgroup v1.
. "$(dirname "$0")/lib.sh"
command -v "$MPIRUN" >/dev/null || { echo "SKIP: no mpirun"; exit 77; }
CAPT=$top_srcdir/tests/tools/cpu-cap.sh
"$CAPT" --share 0.5 -- true; rc=$?
[ "$rc" = 77 ] && { echo "SKIP: no cgroup v1 cpu controller or not root"; exit 77; }
[ "$rc" = 0 ] || fail "a capped 'true' exits $rc"
# one write(2) a rank: print's text and newline went out apart, and two ranks' lines interleaved
cat > "$TMP/busy.py" <<'PY'
import os, time
t = time.time(); c = time.process_time()
while time.time() - t < 1.5: pass
os.write(1, b"%.3f\n" % ((time.process_time() - c) / (time.time() - t)))
PY
"$CAPT" --share 0.3 --period 10000 -- "$MPIRUN" -np 2 --bind-to none "$CAPT" python3 "$TMP/busy.py" > "$TMP/frac" 2>"$TMP/err"
python3 - "$TMP/frac" <<'PY' && pass "2 ranks at 0.3 each use $(tr '\n' ' ' < "$TMP/frac")of a core" || fail "capped fractions: $(cat "$TMP/frac" "$TMP/err")"
import sys
f = [float(x) for x in open(sys.argv[1]).read().split()]
sys.exit(0 if len(f) == 2 and all(0 <= x < 0.4 for x in f) else 1)
PY
# the quota period spans two scheduler ticks (under the old 2 ms, at HZ=250, 4 ranks at 0.5 on 2 cores
# ran 0.34-0.39 of a core each, throttled together), and the group weighs as its caller's nice (a
# capped run at nice 19 took half the machine from a measurement)
per=$("$CAPT" --share 0.5 -- "$CAPT" sh -c 'cat "$DTRAIN_CPUCAP_DIR"/rank*/cpu.cfs_period_us')
[ "$per" -ge 8000 ] && pass "default period $per us" || fail "default period '$per' us, expected >= 8000"
w=$(nice -n 19 "$CAPT" --share 0.5 -- sh -c 'cat "$DTRAIN_CPUCAP_DIR"/cpu.shares')
[ "$w" = 15 ] && pass "a capped run at nice 19 weighs 15" || fail "a capped run at nice 19 weighs '$w', expected 15"
y=$("$CAPT" --share 0.5 -- sh -c 'echo "$OMPI_MCA_mpi_yield_when_idle"')
[ "$y" = 0 ] && pass "Open MPI's polls do not yield under the cap" || fail "mpi_yield_when_idle is '$y' under the cap"
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
