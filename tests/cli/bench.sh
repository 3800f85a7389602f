#!/usr/bin/env bash
# tests/cli/bench.sh - `dtrain bench`: the table and the --json document (valid JSON with every
# field, one object per model), usage errors, the allreduce fields under `mpirun -np 2`, and the
# bench flags documented in dtrain(1). No timing is asserted: only that the figures exist.
. "$(dirname "$0")/lib.sh"
cd "$top_srcdir"
MPIRUN=${MPIRUN:-mpirun}
SPEC=tests/cli/dp-mlp.yaml
PY=$(command -v python3 || true)

expect_rc 0 "bench --help" "$DTRAIN" bench --help
expect_rc 2 "bench --iters 0" "$DTRAIN" bench "$SPEC" --iters 0
expect_rc 2 "bench unknown flag" "$DTRAIN" bench "$SPEC" --itres 3
expect_rc 2 "bench missing spec" "$DTRAIN" bench no/such.yaml
expect_rc 2 "bench without models here" sh -c "cd '$TMP' && exec '$DTRAIN' bench --iters 1"
grep -q 'models/mlp.yaml not found; skipped' "$TMP/err" || fail "bench names the bundled models it skips"

expect_rc 0 "bench table" "$DTRAIN" bench "$SPEC" --iters 3 --warmup 1 --threads 1
for w in 'fwd ms' 'fc1' '(update)' 'step:' 'samples/s' 'SGEMM' 'peak RSS'; do
  grep -qF "$w" "$TMP/out" || fail "bench table lacks '$w'"
done

# check_json FILE NMODELS RANKS: the document parses and has every field
check_json() {
  "$PY" - "$@" <<'PY'
import json, sys
path, nmodels, ranks = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
doc = json.load(open(path))
assert isinstance(doc, list) and len(doc) == nmodels, f"{len(doc)} objects, wanted {nmodels}"
top = ["model", "file", "batch", "local_batch", "ranks", "threads", "iters", "warmup", "params",
       "flops_per_sample", "blas_core", "sgemm_gflops", "sgemm_gflops_all_ranks", "fma_gflops_per_thread",
       "fma_gflops", "layers", "data_ms", "loss_ms", "update_ms", "step_ms", "samples_per_sec", "gflops",
       "peak_fraction", "peak_rss_mib", "planned_mib", "allreduce"]
lay = ["name", "type", "output", "flops_per_sample", "fwd_ms", "bwd_ms", "share", "fwd_gflops", "bwd_gflops"]
ar = ["bytes", "buckets", "mpi_ms", "mpi_gbs", "dtrain_ms", "dtrain_gbs", "ratio", "backward_ms",
      "overlapped_ms", "hidden", "exposed_ms"]
for m in doc:
    miss = [k for k in top if k not in m]
    assert not miss, f"missing {miss}"
    assert m["ranks"] == ranks and m["samples_per_sec"] > 0 and m["step_ms"] > 0 and m["peak_rss_mib"] > 0
    assert m["sgemm_gflops"] > 0 and m["fma_gflops_per_thread"] > 0
    assert [l["name"] for l in m["layers"]][:1] == ["fc1"] or m["model"] != "dp-mlp"
    for l in m["layers"]:
        miss = [k for k in lay if k not in l]
        assert not miss, f"layer {l.get('name')} misses {miss}"
    assert 0.99 < sum(l["share"] for l in m["layers"]) + (m["data_ms"] + m["loss_ms"] + m["update_ms"]) / \
        (sum(l["fwd_ms"] + l["bwd_ms"] for l in m["layers"]) + m["data_ms"] + m["loss_ms"] + m["update_ms"]) < 1.01
    if ranks == 1:
        assert m["allreduce"] is None, "allreduce must be null on one rank"
    else:
        a = m["allreduce"]
        miss = [k for k in ar if k not in a]
        assert not miss, f"allreduce misses {miss}"
        assert a["bytes"] == 4 * m["params"] and a["buckets"] >= 1 and 0 <= a["hidden"] <= 1
        assert a["mpi_gbs"] > 0 and a["dtrain_gbs"] > 0
PY
}

if [ -z "$PY" ]; then
  echo "note: no python3; the JSON is not parsed"
else
  expect_rc 0 "bench --json (2 models)" "$DTRAIN" bench "$SPEC" tests/cli/dp-cnn.yaml --iters 3 --warmup 1 --threads 1 --json
  if check_json "$TMP/out" 2 1 2>"$TMP/py.err"; then pass "bench --json has every field"
  else fail "bench --json document:"; sed 's/^/  | /' "$TMP/py.err" | tail -5; fi
  grep -q 'note\|error' "$TMP/out" && fail "bench --json prints only JSON on stdout"

  if command -v "$MPIRUN" >/dev/null; then
    expect_rc 0 "mpirun -np 2 bench --json" timeout 120 "$MPIRUN" -np 2 "$DTRAIN" bench "$SPEC" --iters 3 --warmup 1 --threads 1 --json
    if check_json "$TMP/out" 1 2 2>"$TMP/py.err"; then pass "bench --json under mpirun has the allreduce fields"
    else fail "bench --json under mpirun:"; sed 's/^/  | /' "$TMP/py.err" | tail -5; fi
  else
    echo "note: no mpirun; the allreduce fields are not checked"
  fi
fi

# every flag of `dtrain bench --help` is in dtrain(1)
for flag in $("$DTRAIN" bench --help | grep -oE -- '--[A-Za-z0-9][A-Za-z0-9-]*' | sort -u); do
  esc=$(printf '%s' "$flag" | sed 's/-/\\-/g')
  grep -qF -- "$esc" man/dtrain.1 || fail "dtrain.1 does not document bench $flag"
done
finish
