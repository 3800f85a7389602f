#!/usr/bin/env bash
# tests/cli/data-loader.sh - the data path at scale, on a slice of Fashion-MNIST (a small CNN):
# the loader thread gives weights bitwise identical to synchronous loading; with augmentation
# (crop + flip) 2 and 3 ranks equal 1 rank bitwise in reproducible mode, and a resumed run equals
# the uninterrupted one; augmentation changes what is trained on; one .npy dataset equals the same
# samples cut into shards (a list, a glob); a corrupt or truncated decompressed cache is detected
# and rebuilt, never trained on; mistakes in the new keys are reported at file:line:col.
. "$(dirname "$0")/lib.sh"
command -v "$MPIRUN" >/dev/null || { echo "SKIP: no mpirun"; exit 77; }
FM=/usr/share/datasets/fashion-mnist
[ -r "$FM/train-images-idx3-ubyte.gz" ] || { echo "SKIP: no Fashion-MNIST in $FM"; exit 77; }
# spec NAME [data keys...]: 24 steps of 64 per epoch, 2 epochs
spec() {
  local name=$1; shift
  { cat <<YAML
name: $name
input: [1, 28, 28]
layers:
  - {type: conv, name: conv1, filters: 4, kernel: 3, padding: same, activation: relu, init: he_uniform}
  - {type: maxpool, name: pool1, kernel: 2}
  - {type: flatten, name: flatten}
  - {type: dropout, rate: 0.2}
  - {type: fc, name: fc1, units: 10}
loss: softmax_cross_entropy
data:
  train: {format: idx, images: $FM/train-images-idx3-ubyte.gz, labels: $FM/train-labels-idx1-ubyte.gz, limit: 1536}
  test: {format: idx, images: $FM/t10k-images-idx3-ubyte.gz, labels: $FM/t10k-labels-idx1-ubyte.gz, limit: 512}
  classes: 10
  mean: [0.2860]
  std: [0.3530]
YAML
  for k in "$@"; do echo "  $k"; done
  cat <<YAML
train: {epochs: 2, batch: 64, seed: 9, optimizer: {type: adam, lr: 0.005}}
YAML
  } > "$TMP/$name.yaml"
}
r1() { # r1 NAME SPEC [flags]: one rank, in-process
  local name=$1 sp=$2; shift 2
  "$DTRAIN" run "$TMP/$sp.yaml" --out "$TMP/$name" --threads 1 --quiet "$@" >"$TMP/$name.log" 2>&1 \
    || { fail "$name: exit $?"; sed 's/^/  | /' "$TMP/$name.log" | head; }
}

spec sync 'prefetch: 0'
spec thread 'prefetch: 3'
r1 sync sync
r1 thread thread
same sync thread "loader thread (prefetch 3) = synchronous loading (prefetch 0)"

# check's memory plan counts the data; bench times the model's own batches both ways
"$DTRAIN" check "$TMP/thread.yaml" >"$TMP/out" 2>&1
grep -q 'planned memory per rank: .*dataset caches mapped [0-9.]* MiB.*data [0-9.]* MiB.*; samples read from disk per batch' "$TMP/out" \
  && pass "check: the memory plan counts the data" || fail "check's plan: $(grep planned "$TMP/out")"
"$DTRAIN" bench "$TMP/thread.yaml" --iters 4 --warmup 1 --threads 1 --json >"$TMP/bench.json" 2>"$TMP/err" \
  && python3 - "$TMP/bench.json" <<'PY' && pass "bench: the data figures of real batches" || fail "bench data: $(cat "$TMP/err")"
import json, sys
d = json.load(open(sys.argv[1]))[0]["data"]
assert d["source"] == "disk" and d["samples"] == 1536 and d["prefetch"] == 3, d
assert d["batch_ms"] > 0 and d["loader"] is True and d["row_ms"] >= 0 and 0 <= d["hidden"] <= 1 and d["step_ms_sync"] > 0 and d["step_ms_loader"] > 0, d
PY

spec aug 'augment: {crop: 2, flip: true}'
spec aug0 'augment: {crop: 2, flip: true}' 'prefetch: 0'
r1 aug aug
r1 aug0 aug0
same aug aug0 "with augmentation: loader thread = synchronous"
cmp -s "$TMP/sync/model.safetensors" "$TMP/aug/model.safetensors" && fail "augmentation changed nothing" \
  || pass "augmentation changes the weights"

cluster repro 'partition: {sync: allreduce, reproducible: true, chunks: 16}'
for n in 1 2 3; do mpi_run "repro-$n" $n "$TMP/aug.yaml" repro; done
same repro-1 repro-2 "augmentation, reproducible: 2 ranks = 1 rank"
same repro-1 repro-3 "augmentation, reproducible: 3 ranks = 1 rank"

# resume: 30 steps stop mid-epoch 2, then on to 48 = one run of 48
r1 half aug --max-steps 30
r1 half aug --resume=auto
same aug half "augmentation: resumed at step 30 = uninterrupted"

# shards: the slice as one .npy and as three shards (a list and a glob), same weights
python3 - "$TMP" <<'PY' || fail "writing the shards"
import gzip, struct, sys
t = sys.argv[1]
def npy(path, raw, shape, descr):
    dims = "(%d,)" % shape[0] if len(shape) == 1 else "(%s)" % ", ".join(map(str, shape))
    h = "{'descr': '%s', 'fortran_order': False, 'shape': %s, }" % (descr, dims)
    h += " " * (63 - (10 + len(h)) % 64) + "\n"
    open(path, "wb").write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(h)) + h.encode() + raw)
fm = "/usr/share/datasets/fashion-mnist/"
x = gzip.open(fm + "train-images-idx3-ubyte.gz").read()[16:16 + 1536 * 784]
y = gzip.open(fm + "train-labels-idx1-ubyte.gz").read()[8:8 + 1536]
npy(t + "/all-x.npy", x, (1536, 1, 28, 28), "|u1"); npy(t + "/all-y.npy", y, (1536,), "|u1")
for k, (a, b) in enumerate([(0, 500), (500, 1001), (1001, 1536)]):
    npy(t + "/sh-x-%d.npy" % k, x[a * 784:b * 784], (b - a, 1, 28, 28), "|u1")
    npy(t + "/sh-y-%d.npy" % k, y[a:b], (b - a,), "|u1")
PY
mk_npy() { # mk_npy NAME XKEY YKEY
  sed -e "s|^  train: .*|  train: {format: npy, x: $2, y: $3}|" -e 's/^  mean: .*/  mean: [73.0]/' \
      -e 's/^  std: .*/  std: [90.0]/' "$TMP/sync.yaml" > "$TMP/$1.yaml"
}
mk_npy one all-x.npy all-y.npy
mk_npy list "[sh-x-0.npy, sh-x-1.npy, sh-x-2.npy]" "[sh-y-0.npy, sh-y-1.npy, sh-y-2.npy]"
mk_npy glob "'sh-x-*.npy'" "'sh-y-*.npy'"
r1 one one
r1 list list
r1 glob glob
same one list "npy: three shards listed = one file"
same one glob "npy: three shards by glob = one file"
"$DTRAIN" check "$TMP/list.yaml" >"$TMP/out" 2>&1 && grep -q 'train 1536 samples' "$TMP/out" \
  && pass "check counts the samples of every shard" || fail "check of the shards: $(head -3 "$TMP/out")"

# the decompressed cache: built once, checked every time, rebuilt when corrupt or truncated
export DTRAIN_CACHE_DIR=$TMP/cache
r1 c0 sync
c=$(ls "$TMP"/cache/train-images-idx3-ubyte.gz-*.dtcache 2>/dev/null | head -1)
[ -n "$c" ] && pass "cache built: $(basename "$c") ($(stat -c %s "$c") bytes)" || fail "no cache file in $TMP/cache"
if [ -n "$c" ]; then
  # flip pixel bytes of the first samples (the payload starts at 64: the cache header, then IDX's 16)
  printf '\xff\xff\xff\xff\xff\xff\xff\xff' | dd of="$c" bs=1 seek=$((64 + 16 + 300)) conv=notrunc status=none
  r1 c1 sync
  grep -q 'checksum mismatch (corrupt); rebuilding' "$TMP/c1.log" && pass "corrupt cache detected and rebuilt" \
    || fail "corrupt cache not reported: $(head -3 "$TMP/c1.log")"
  same c0 c1 "after a corrupt cache: the same weights"
  truncate -s $(( $(stat -c %s "$c") - 1000 )) "$c"
  r1 c2 sync
  grep -q 'truncated or extended); rebuilding' "$TMP/c2.log" && pass "truncated cache detected and rebuilt" \
    || fail "truncated cache not reported: $(head -3 "$TMP/c2.log")"
  same c0 c2 "after a truncated cache: the same weights"
  r1 c3 sync
  [ -s "$TMP/c3.log" ] && fail "a valid cache is rebuilt: $(head -2 "$TMP/c3.log")" || pass "a valid cache is reused silently"
  # two processes building the same cache at once (ranks on one node): both train, one valid cache
  rm -f "$TMP"/cache/*.dtcache
  mpi_run c4 2 "$TMP/sync.yaml" repro
  [ "$(ls "$TMP"/cache/*.dtcache | wc -l)" = 2 ] && ! ls "$TMP"/cache/*.tmp.* >/dev/null 2>&1 \
    && pass "2 ranks building the caches at once leave one of each, no temporaries" \
    || fail "caches after a concurrent build: $(ls "$TMP/cache")"
fi

# mistakes in the new keys
spec_err() { # spec_err NAME 'KEY: VALUE' WANT
  spec "$1" "$2"
  expect_rc 2 "$1" "$DTRAIN" check "$TMP/$1.yaml"
  grep -q "$3" "$TMP/err" && pass "$1: $(grep -m1 error "$TMP/err" | sed "s|$TMP/||")" || fail "$1: $(cat "$TMP/err")"
}
spec_err bad-crop 'augment: {crop: 40}' "bad-crop.yaml:[0-9]*:[0-9]*: error: 'crop' padding 40 is larger than the image"
spec_err bad-flip 'augment: {flip: maybe}' "bad-flip.yaml:[0-9]*:[0-9]*: error: .*flip"
spec_err bad-aug-key 'augment: {crop: 2, flop: true}' "bad-aug-key.yaml:[0-9]*:[0-9]*: error: unknown key 'flop'"
spec_err bad-prefetch 'prefetch: -1' "bad-prefetch.yaml:[0-9]*:[0-9]*: error: .*prefetch"
sed -i 's/^  mean: .*/  mean: [0.1, 0.2]/' "$TMP/sync.yaml"
expect_rc 2 "mean list longer than the channels" "$DTRAIN" check "$TMP/sync.yaml"
grep -q "sync.yaml:[0-9]*:[0-9]*: error: 'mean' lists 2 values but the input (1,28,28) has 1 channel" "$TMP/err" \
  && pass "mean per channel: counted against the input" || fail "mean list: $(cat "$TMP/err")"
sed -e 's/^input: .*/input: [784]/' -e '/conv\|pool\|flatten/d' -e 's/^  mean: .*/  mean: 0.286/' \
    -e 's/^  std: .*/  std: 0.353\n  augment: {flip: true}/' "$TMP/sync.yaml" > "$TMP/flat.yaml"
expect_rc 2 "augmentation on a flat input" "$DTRAIN" check "$TMP/flat.yaml"
grep -q "flat.yaml:[0-9]*:[0-9]*: error: augmentation needs an image input" "$TMP/err" \
  && pass "augmentation needs an image input" || fail "flat input: $(cat "$TMP/err")"
finish
