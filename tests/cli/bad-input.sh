#!/bin/sh
# tests/cli/bad-input.sh - damaged and hostile input through `dtrain check`: specs nested 100k levels
# deep or over the size limit end at once with exit 2; damaged data files (a CSV row starting with
# a NUL byte, hex floats, NaN and Inf in IDX and .npy, gzip trailers with a bad CRC or length or
# none, bytes after the gzip stream or after the array) end with exit 3 and a message naming the
# file. Every case generates its files here.
. "$(dirname "$0")/lib.sh"

if [ ! -x "$DTRAIN" ]; then
        echo "skip: $DTRAIN is not built"
        exit 77
fi

# expect WANT NAME PATTERN CMD...: exit status WANT and a line of stderr matching PATTERN (grep -E)
expect() {
        want=$1 name=$2 pat=$3
        shift 3
        expect_rc "$want" "$name" "$@"
        if ! grep -Eq -- "$pat" "$TMP/err"; then
                fail "$name: no message matching: $pat"
                sed 's/^/  | /' "$TMP/err" | head -5
        fi
}

# octal escapes of byte b for printf
byte() { printf "\\$(printf '%03o' "$1")"; }

# setbyte FILE OFFSET VALUE
setbyte() { byte "$3" | dd of="$1" bs=1 seek="$2" conv=notrunc 2>/dev/null; }
# sets byte OFFSET of FILE to something else than it was
flip() {
        b=$(od -An -tu1 -j "$2" -N 1 "$1" | tr -d ' ')
        setbyte "$1" "$2" $(((b + 1) % 256))
}

# ---- specs ----

# 100k levels took libyaml minutes (quadratic); now parsing stops at the 65th
{
        printf 'name: t\ninput: [4]\nlayers: '
        awk 'BEGIN { for (i = 0; i < 100000; i++) printf "["; for (i = 0; i < 100000; i++) printf "]"; print "" }'
} >"$TMP/deep.yaml"
start=$(date +%s)
expect 2 "100k nested levels" "deep.yaml:3:72: error: YAML: mappings and sequences nested more than 64 levels deep" \
        "$DTRAIN" check "$TMP/deep.yaml"
took=$(($(date +%s) - start))
[ "$took" -le 10 ] || fail "100k nested levels took ${took}s"
expect 2 "100k nested levels in a cluster spec" "deep.yaml:3:72: error: YAML: .* nested more than 64" \
        "$DTRAIN" check "$top_srcdir/tests/specs/good-minimal.yaml" --cluster "$TMP/deep.yaml"

# over 4 MiB: refused before parsing, from a file or a pipe
{
        cat "$top_srcdir/tests/specs/good-minimal.yaml"
        awk 'BEGIN { for (i = 0; i < 80000; i++) printf "# %060d\n", i }'
} >"$TMP/big.yaml"
size=$(wc -c <"$TMP/big.yaml")
expect 2 "a 5 MB spec" "big.yaml: error: $size bytes, more than the 4 MiB a spec file may have" \
        "$DTRAIN" check "$TMP/big.yaml"
expect_rc 2 "a 5 MB spec through a pipe" sh -c "cat '$TMP/big.yaml' | '$DTRAIN' check /dev/stdin"
grep -q "^/dev/stdin: error: more than the 4 MiB a spec file may have" "$TMP/err" ||
        fail "a 5 MB spec through a pipe: $(head -n 1 "$TMP/err")"

# ---- data ----

# spec FILE FORMAT-KEYS INPUT [LOSS]: a small classifier on a source
spec() {
        cat >"$1" <<YAML
name: t
input: [$3]
layers:
  - {type: fc, units: 3}
loss: ${4:-softmax_cross_entropy}
data:
  train: {$2}
train: {epochs: 1, batch: 2}
YAML
}

# the report's case: the NUL row was dropped and the file trained on 2 samples
printf '1,2,3,4,0\n\0005,6,7,8,1\n9,9,9,9,2\n' >"$TMP/nul.csv"
spec "$TMP/nul.yaml" "format: csv, path: $TMP/nul.csv" 4
expect 3 "CSV row starting with a NUL byte" "nul.csv:2: a NUL byte at column 1" "$DTRAIN" check "$TMP/nul.yaml"

printf '1,2,3,4,0\n0x1p3,6,7,8,1\n' >"$TMP/hex.csv"
spec "$TMP/hex.yaml" "format: csv, path: $TMP/hex.csv" 4
expect 3 "CSV hex float" "hex.csv:2: field 1: expected a decimal number, got '0x1p3'" "$DTRAIN" check "$TMP/hex.yaml"

printf '1,2,3,inf,0\n' >"$TMP/inf.csv"
spec "$TMP/inf.yaml" "format: csv, path: $TMP/inf.csv" 4
expect 3 "CSV inf" "inf.csv:1: field 4: expected a decimal number, got 'inf'" "$DTRAIN" check "$TMP/inf.yaml"

# IDX float32 (2 samples of 2; sample 1 holds a NaN) and byte labels
printf '\0\0\015\002\0\0\0\002\0\0\0\002\077\200\0\0\077\200\0\0\077\200\0\0\177\300\0\0' >"$TMP/x.idx"
printf '\0\0\010\001\0\0\0\002\0\001' >"$TMP/y.idx"
spec "$TMP/nan.yaml" "format: idx, images: $TMP/x.idx, labels: $TMP/y.idx" 2
expect 3 "NaN in IDX float data" "x.idx: sample 1: value 1 of 2 is nan" "$DTRAIN" check "$TMP/nan.yaml"

# .npy float32 (2, 2) with +Inf, int64 labels
npy() { # FILE DESCR SHAPE: a version 1 header padded to 128 bytes
        h="{'descr': '$2', 'fortran_order': False, 'shape': $3, }"
        printf '\223NUMPY\001\000\166\000%-117s\n' "$h" >"$1"
}
npy "$TMP/x.npy" '<f4' '(2, 2)'
printf '\0\0\200\077\0\0\200\177\0\0\200\077\0\0\200\077' >>"$TMP/x.npy"
npy "$TMP/y.npy" '<i8' '(2,)'
printf '\0\0\0\0\0\0\0\0\001\0\0\0\0\0\0\0' >>"$TMP/y.npy"
spec "$TMP/inf-npy.yaml" "format: npy, x: $TMP/x.npy, y: $TMP/y.npy" 2
expect 3 "Inf in .npy data" "x.npy: sample 0: value 1 of 2 is inf" "$DTRAIN" check "$TMP/inf-npy.yaml"

# gzip'd IDX images: a good one, then damaged copies
printf '\0\0\010\003\0\0\0\002\0\0\0\001\0\0\0\002\001\002\003\004' >"$TMP/img.idx"
gzip -nc "$TMP/img.idx" >"$TMP/good.gz"
gz_case() { # NAME FILE PATTERN
        spec "$TMP/gz.yaml" "format: idx, images: $2, labels: $TMP/y.idx" 2
        expect 3 "$1" "$3" "$DTRAIN" check "$TMP/gz.yaml"
}
spec "$TMP/gz.yaml" "format: idx, images: $TMP/good.gz, labels: $TMP/y.idx" 2
expect_rc 0 "good gzip'd IDX" "$DTRAIN" check "$TMP/gz.yaml"
n=$(wc -c <"$TMP/good.gz")
cp "$TMP/good.gz" "$TMP/crc.gz"
flip "$TMP/crc.gz" $((n - 8))
gz_case "gzip CRC" "$TMP/crc.gz" "crc.gz: corrupt gzip stream: incorrect data check"
cp "$TMP/good.gz" "$TMP/len.gz"
flip "$TMP/len.gz" $((n - 2))
gz_case "gzip length" "$TMP/len.gz" "len.gz: corrupt gzip stream: incorrect length check"
head -c $((n - 8)) "$TMP/good.gz" >"$TMP/cut.gz"
gz_case "gzip without its trailer" "$TMP/cut.gz" "cut.gz: truncated gzip stream"
{ cat "$TMP/good.gz"; printf 'garbage'; } >"$TMP/junk.gz"
gz_case "bytes after the gzip stream" "$TMP/junk.gz" "junk.gz: trailing data after the gzip stream \(at byte $n "
cp "$TMP/good.gz" "$TMP/bad.gz"
setbyte "$TMP/bad.gz" 10 255   # the first deflate block (after gzip -n's 10-byte header): type 3

gz_case "damaged gzip stream" "$TMP/bad.gz" "bad.gz: corrupt gzip stream: invalid block type"
grep -q "shorter than its 4-byte magic" "$TMP/err" && fail "damaged gzip stream reported as a short IDX file"
{ cat "$TMP/img.idx"; printf 'x'; } >"$TMP/long.idx"
gz_case "bytes after the IDX array" "$TMP/long.idx" \
        "long.idx: trailing data: the file goes on after the IDX array its header describes"
{ cat "$TMP/good.gz"; printf '' | gzip -nc; } >"$TMP/two.gz"
spec "$TMP/gz.yaml" "format: idx, images: $TMP/two.gz, labels: $TMP/y.idx" 2
expect_rc 0 "two gzip members" "$DTRAIN" check "$TMP/gz.yaml"

finish
