#!/bin/sh
# tests/cli/ckpt-corrupt.sh - resuming from a damaged checkpoint is refused: exit 4 and a message
# naming the damaged file. Cases: a flipped data byte, a truncated file, a broken state.json.
set -u

: "${DTRAIN:?set DTRAIN to the dtrain binary}"
if [ ! -x "$DTRAIN" ]; then
        echo "skip: $DTRAIN is not built"
        exit 77
fi
srcdir=${top_srcdir:-$(cd "$(dirname "$0")/../.." && pwd)}
spec=$srcdir/tests/cli/tiny.yaml

tmp=$(mktemp -d "${TMPDIR:-/tmp}/dtrain-ckpt-corrupt.XXXXXX") || exit 99
trap 'rm -rf "$tmp"' EXIT
trap 'exit 1' HUP INT TERM

fail() {
        echo "FAIL: $*" >&2
        exit 1
}

# ---- a good run to damage ----
"$DTRAIN" run "$spec" --out "$tmp/good" --max-steps 5 >"$tmp/log" 2>&1
rc=$?
if [ $rc -ne 0 ]; then
        cat "$tmp/log" >&2
        fail "training run exited $rc"
fi
[ -f "$tmp/good/checkpoints/latest" ] || fail "no checkpoints/latest after the run"
latest=$(cat "$tmp/good/checkpoints/latest")
[ -f "$tmp/good/checkpoints/$latest/model.safetensors" ] || fail "latest names '$latest' without model.safetensors"

# out dir for one case: a copy of the good run; ck is its checkpoint directory
fresh() {
        rm -rf "$tmp/run"
        cp -R "$tmp/good" "$tmp/run" || fail "cannot copy the run"
        ck=$tmp/run/checkpoints/$latest
}

# resume must exit 4 and name file $1 (a name, not a path) in its message
expect_refused() {
        "$DTRAIN" run "$spec" --out "$tmp/run" --max-steps 10 --resume=auto >"$tmp/log" 2>&1
        rc=$?
        if [ $rc -ne 4 ]; then
                cat "$tmp/log" >&2
                fail "$2: expected exit 4, got $rc"
        fi
        if ! grep -q "$1" "$tmp/log"; then
                cat "$tmp/log" >&2
                fail "$2: the message does not name $1"
        fi
        echo "ok: $2: $(grep "$1" "$tmp/log" | head -n 1)"
}

# flips the last byte of a file (the end of the data section for safetensors)
flip_last_byte() {
        size=$(wc -c <"$1")
        b=$(od -An -tu1 -j $((size - 1)) -N 1 "$1" | tr -d ' ')
        # shellcheck disable=SC2059 # the format is the byte, as an octal escape
        printf "\\$(printf %03o $(((b + 1) % 256)))" |
                dd of="$1" bs=1 seek=$((size - 1)) conv=notrunc 2>/dev/null || fail "cannot write $1"
}

fresh
flip_last_byte "$ck/model.safetensors"
expect_refused model.safetensors "flipped data byte"
grep -q crc "$tmp/log" || fail "flipped data byte: the message does not name the crc check"

fresh
size=$(wc -c <"$ck/model.safetensors")
dd if="$tmp/good/checkpoints/$latest/model.safetensors" of="$ck/model.safetensors" bs=1 \
        count=$((size - 5)) 2>/dev/null || fail "cannot truncate"
expect_refused model.safetensors "truncated file"

fresh
printf '{"format": 1,' >"$ck/state.json"
expect_refused state.json "broken state.json"

# an untouched copy still resumes (the cases above failed for their damage, not for resuming)
fresh
"$DTRAIN" run "$spec" --out "$tmp/run" --max-steps 10 --resume=auto >"$tmp/log" 2>&1
rc=$?
if [ $rc -ne 0 ]; then
        cat "$tmp/log" >&2
        fail "resuming an intact checkpoint exited $rc"
fi
echo "ok: intact checkpoint resumes"
exit 0
