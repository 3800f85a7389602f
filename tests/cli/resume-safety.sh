#!/usr/bin/env bash
# tests/cli/resume-safety.sh - --resume never starts fresh over a previous run (issue 25 item 2):
# with checkpoints/latest missing it continues from the newest intact step directory (bitwise as
# if latest were there) or refuses with exit 4 leaving every byte in place; and a checkpoint is
# accepted through checkpoints/best wherever a checkpoint directory is (item 3).
. "$(dirname "$0")/lib.sh"
tiny_spec "$TMP/tiny.yaml"
# snap DIR: every file's checksum but the lock's, the listing of the directories
snap() { ( cd "$1" && find . -path ./.lock -prune -o -type f -print0 | sort -z | xargs -0 sha256sum; find . ! -name .lock | sort ); }
expect_rc 0 "reference: 70 steps" "$DTRAIN" run "$TMP/tiny.yaml" --out "$TMP/ref" --max-steps 70 --quiet
expect_rc 0 "a run stopped at 40 steps" "$DTRAIN" run "$TMP/tiny.yaml" --out "$TMP/a" --max-steps 40 --quiet
cp -a "$TMP/a" "$TMP/a0"

# 1. latest missing: the newest intact step directory, said so, and the same weights as a resume
rm "$TMP/a/checkpoints/latest"
expect_rc 0 "latest missing: --resume continues" "$DTRAIN" run "$TMP/tiny.yaml" --out "$TMP/a" --max-steps 70 --resume --quiet
grep -q 'latest is missing; continuing from the newest intact checkpoint, .*step-00000040' "$TMP/err" \
  && pass "says which checkpoint" || { fail "no note naming step 40"; cat "$TMP/err"; }
cmp -s "$TMP/a/model.safetensors" "$TMP/ref/model.safetensors" && pass "bitwise equal to an uninterrupted run" \
  || fail "weights differ from the uninterrupted run"
[ "$(grep -c '"step":40,"split":"train"' "$TMP/a/metrics.jsonl")" -le 1 ] || fail "metrics of the old run were rewritten"
grep -q '"step":40,' "$TMP/a/metrics.jsonl" && pass "metrics.jsonl kept the old run's lines" || fail "metrics.jsonl emptied"

# 2. latest missing, the newest step directory damaged: the older one (the best, step 32)
cp -a "$TMP/a0" "$TMP/b"
rm "$TMP/b/checkpoints/latest"
printf 'garbage' | dd of="$TMP/b/checkpoints/step-00000040/model.safetensors" bs=1 seek=100 conv=notrunc 2>/dev/null
cp -a "$TMP/b" "$TMP/b2"
expect_rc 0 "newest damaged: the older intact one" "$DTRAIN" run "$TMP/tiny.yaml" --out "$TMP/b2" --max-steps 70 --resume --quiet
grep -q 'continuing from the newest intact checkpoint, .*step-00000032' "$TMP/err" && pass "step 32 named" \
  || { fail "step 32 not named"; cat "$TMP/err"; }
# ... and every step directory damaged: exit 4, nothing changed
printf 'garbage' | dd of="$TMP/b/checkpoints/step-00000032/model.safetensors" bs=1 seek=100 conv=notrunc 2>/dev/null
snap "$TMP/b" >"$TMP/b.before"
expect_rc 4 "no intact checkpoint: refused" "$DTRAIN" run "$TMP/tiny.yaml" --out "$TMP/b" --max-steps 70 --resume --quiet
grep -q 'holds a previous run.*latest is missing.*nothing was changed' "$TMP/err" && pass "the message says what is missing" \
  || { fail "message"; cat "$TMP/err"; }
snap "$TMP/b" | diff "$TMP/b.before" - >/dev/null && pass "every byte of the old run in place" || fail "the old run was modified"

# 3. checkpoints/ turned into a plain file: exit 4 at once, nothing changed
cp -a "$TMP/a0" "$TMP/c"
rm -r "$TMP/c/checkpoints"
echo x >"$TMP/c/checkpoints"
snap "$TMP/c" >"$TMP/c.before"
expect_rc 4 "checkpoints is a file: refused" "$DTRAIN" run "$TMP/tiny.yaml" --out "$TMP/c" --resume --quiet
snap "$TMP/c" | diff "$TMP/c.before" - >/dev/null && pass "nothing changed" || fail "the old run was modified"

# 4. outputs but no checkpoint at all (killed before the first): refused; an empty directory starts fresh
mkdir -p "$TMP/d" && cp "$TMP/a0/metrics.jsonl" "$TMP/d/"
snap "$TMP/d" >"$TMP/d.before"
expect_rc 4 "metrics but no checkpoint: refused" "$DTRAIN" run "$TMP/tiny.yaml" --out "$TMP/d" --resume --quiet
snap "$TMP/d" | diff "$TMP/d.before" - >/dev/null && pass "nothing changed" || fail "the old run was modified"
mkdir -p "$TMP/e"
expect_rc 0 "--resume into an empty directory starts fresh" "$DTRAIN" run "$TMP/tiny.yaml" --out "$TMP/e" --max-steps 5 --resume --quiet

# 5. checkpoints/best wherever a checkpoint is accepted (item 3)
B="$TMP/a0/checkpoints/best"
[ -f "$B" ] || fail "no checkpoints/best in a run with a test set"
expect_rc 0 "eval --resume .../best" "$DTRAIN" eval "$TMP/tiny.yaml" --resume "$B"
expect_rc 0 "eval --weights .../best" "$DTRAIN" eval "$TMP/tiny.yaml" --weights "$B"
python3 -c "
import struct,sys
n=8; f=open(sys.argv[1],'wb'); import random; random.seed(1)
hdr=b\"{'descr': '<f4', 'fortran_order': False, 'shape': (%d, 16), }\" % n
hdr=hdr+b' '*(63-len(hdr)%64)+b'\n'
f.write(b'\x93NUMPY\x01\x00'+struct.pack('<H',len(hdr))+hdr+struct.pack('<%df'%(n*16),*[random.gauss(0,1) for _ in range(n*16)]))
" "$TMP/x.npy"
expect_rc 0 "predict --resume .../best" "$DTRAIN" predict "$TMP/tiny.yaml" --resume "$B" --input "$TMP/x.npy" -o "$TMP/p1.csv"
expect_rc 0 "predict --weights .../best" "$DTRAIN" predict "$TMP/tiny.yaml" --weights "$B" --input "$TMP/x.npy" -o "$TMP/p2.csv"
cmp -s "$TMP/p1.csv" "$TMP/p2.csv" || fail "predict: --resume and --weights of best differ"
expect_rc 0 "run --resume=.../best" "$DTRAIN" run "$TMP/tiny.yaml" --out "$TMP/f" --max-steps 50 --resume="$B" --quiet
expect_rc 0 "run --weights .../best" "$DTRAIN" run "$TMP/tiny.yaml" --out "$TMP/g" --max-steps 5 --weights "$B" --quiet
expect_rc 0 "run --resume=.../latest" "$DTRAIN" run "$TMP/tiny.yaml" --out "$TMP/h" --max-steps 50 \
  --resume="$TMP/a0/checkpoints/latest" --quiet
expect_rc 4 "a file that is no pointer is refused" "$DTRAIN" eval "$TMP/tiny.yaml" --resume "$TMP/a0/metrics.jsonl"
grep -q 'not a checkpoint pointer' "$TMP/err" || fail "message for a file that is no pointer: $(cat "$TMP/err")"
finish
