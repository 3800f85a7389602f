#!/usr/bin/env python3
# bench/rows.py - two builds' `dtrain bench` rows side by side: each layer's forward and backward,
# the data, loss and update rows and the step, run alternately (A B A B ...) and each row's
# minimum over the rounds kept, so a busy moment slows both builds alike and a row that one build
# really runs slower stands out (marked <<< beyond 15%).
#   bench/rows.py OLD_DTRAIN NEW_DTRAIN MODEL [ROUNDS] [-- BENCH ARGS]
# (BENCH ARGS default: --threads 1 --batch 64 --iters 10; OPENBLAS_CORETYPE is unset for the run)
import json, os, subprocess, sys

def rows(binary, model, extra, env):
    out = subprocess.run([binary, 'bench', model, '--json'] + extra, capture_output=True, text=True, env=env)
    if out.returncode:
        sys.exit(f"{binary} bench {model} failed:\n{out.stderr}")
    d = json.loads(out.stdout)[0]
    r = {l['name'] + ' f': l['fwd_ms'] for l in d['layers']}
    r.update({l['name'] + ' b': l['bwd_ms'] for l in d['layers']})
    r.update({'(data)': d['data_ms'], '(loss)': d['loss_ms'], '(update)': d['update_ms'], 'STEP': d['step_ms']})
    return r

def main():
    args = sys.argv[1:]
    extra = ['--threads', '1', '--batch', '64', '--iters', '10']
    if '--' in args:
        extra = args[args.index('--') + 1:]
        args = args[:args.index('--')]
    if len(args) < 3:
        sys.exit(__doc__ or "usage: bench/rows.py OLD NEW MODEL [ROUNDS] [-- BENCH ARGS]")
    old, new, model = args[:3]
    rounds = int(args[3]) if len(args) > 3 else 3
    env = dict(os.environ)
    env.pop('OPENBLAS_CORETYPE', None)
    best = {}
    for _ in range(rounds):
        for tag, b in (('old', old), ('new', new)):
            for n, v in rows(b, model, extra, env).items():
                best.setdefault(n, {}).setdefault(tag, v)
                best[n][tag] = min(best[n][tag], v)
    print(f"{'row':20s} {'old ms':>9s} {'new ms':>9s}  new/old  ({model}, min of {rounds} alternated rounds)")
    for n, v in best.items():
        if 'old' not in v or 'new' not in v:
            continue
        ratio = v['new'] / v['old'] if v['old'] > 0 else 0.0
        flag = '  <<<' if ratio > 1.15 and v['new'] > 0.02 else ''
        print(f"{n:20s} {v['old']:9.3f} {v['new']:9.3f}  x{ratio:5.2f}{flag}")

if __name__ == '__main__':
    main()
