/* plan/profile.c - what each layer costs on this machine: a rank's graph of shards (or a whole
 * stage) allocated at one micro-batch size and timed layer by layer, forward and backward (the
 * split layers' collectives replaced by local stand-ins, their cost being the network model's),
 * remembered per (layer, split, group size, micro-batch, input gradient) for the planner's life.
 * Without measuring, the costs are the layers' FLOPs at the measured SGEMM rate, scaled from one
 * measured reference shape (plan.h's scaling to many ranks). */
#include "plan/profile.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "util/common.h"
#include "bench/bench.h"
#include "optim/optim.h"

/* ---- the stand-in collectives: a rank alone, its shard's columns in place ---- */
static void solo_allreduce(const dt_tp *t, float *buf, size_t n)
{
        (void)t; (void)buf; (void)n;
}

static void solo_allgather(const dt_tp *t, const float *in, float *out, size_t rows, size_t w)
{
        dt_cols_put(out, in, rows, w * (size_t)t->size, (size_t)t->rank * w, w);
}

static double median3(double *v, int n)
{
        return dt_bench_median(v, n);
}

/* Times every layer of lg (unallocated; a copy is allocated here) at micro-batch b. */
static void time_graph(dt_prof *pf, const dt_graph *lg0, int b, dt_layer_cost *out)
{
        dt_graph lg = *lg0;     /* the layers array is shared: restore what alloc changes */
        dt_layer *saved = dt_malloc((size_t)lg.n * sizeof *saved);
        memcpy(saved, lg.layers, (size_t)lg.n * sizeof *saved);
        lg.layers = dt_malloc((size_t)lg.n * sizeof *lg.layers);
        memcpy(lg.layers, saved, (size_t)lg.n * sizeof *saved);
        lg.owned = NULL;
        dt_tp solo = { .size = 1, .rank = 0, .allreduce = solo_allreduce, .allgather_cols = solo_allgather };
        dt_tp tps[8];
        int ntp = 0;
        for (int i = 0; i < lg.n; i++) {
                dt_layer *l = &lg.layers[i];
                if (!l->place.tp) continue;
                int k = 0;      /* one stand-in per (size, rank) */
                while (k < ntp && !(tps[k].size == l->place.nshards && tps[k].rank == l->place.shard)) k++;
                if (k == ntp && ntp < 8) {
                        tps[ntp] = solo;
                        tps[ntp].size = l->place.nshards;
                        tps[ntp].rank = l->place.shard;
                        ntp++;
                }
                l->place.tp = &tps[k < ntp ? k : 0];
        }
        if (dt_graph_alloc(&lg, pf->be, b) < 0) dt_die(DT_EXIT_RUNTIME, "planner: layer setup failed");
        dt_graph_init_params(&lg, 1);
        const dt_backend_ops *o = pf->be->ops;
        o->zero(pf->be, lg.act[0], (size_t)b * dt_shape_size(&lg.input));       /* zeros: valid token ids too */
        for (int i = 0; i <= lg.n; i++)
                if (lg.dact[i]) o->zero(pf->be, lg.dact[i], (size_t)b * (i ? dt_shape_size(&lg.layers[i - 1].out)
                                                                           : dt_shape_size(&lg.input)));
        enum { ITERS = 3 };
        double *tf = dt_malloc((size_t)lg.n * ITERS * sizeof *tf), *tb = dt_malloc((size_t)lg.n * ITERS * sizeof *tb);
        double *tw = dt_calloc((size_t)lg.n * ITERS, sizeof *tw);      /* the weight half, where split */
        dt_fwd_ctx c = { .training = 1, .seed = 1 };
        for (int it = -1; it < ITERS; it++) {   /* one warm-up pass */
                for (int i = 0; i < lg.n; i++) {
                        dt_layer *l = &lg.layers[i];
                        double t0 = dt_now();
                        l->ops->forward(l, &c, lg.act[i], lg.act[i + 1], b);
                        if (it >= 0) tf[(size_t)i * ITERS + it] = dt_now() - t0;
                }
                for (int i = lg.n - 1; i >= 0; i--) {
                        dt_layer *l = &lg.layers[i];
                        size_t ny = (size_t)b * dt_shape_size(&l->out);
                        o->zero(pf->be, lg.dact[i + 1], ny);    /* a layer may consume its dy */
                        float *dx = i || lg.input_grad ? lg.dact[i] : NULL;
                        double t0 = dt_now();
                        if (!l->ops->backward_input) {
                                l->ops->backward(l, &c, lg.act[i], lg.act[i + 1], lg.dact[i + 1], dx, b);
                                if (it >= 0) tb[(size_t)i * ITERS + it] = dt_now() - t0;
                                continue;
                        }
                        /* zb-h1's halves, timed apart (together they are backward) */
                        l->ops->backward_input(l, &c, lg.act[i], lg.act[i + 1], lg.dact[i + 1], dx, b);
                        double t1 = dt_now();
                        l->ops->backward_weight(l, &c, lg.act[i], lg.act[i + 1], lg.dact[i + 1], b);
                        if (it >= 0) {
                                tb[(size_t)i * ITERS + it] = t1 - t0;
                                tw[(size_t)i * ITERS + it] = dt_now() - t1;
                        }
                }
        }
        for (int i = 0; i < lg.n; i++) {
                const dt_layer *l = &lg.layers[i];
                double f = median3(tf + (size_t)i * ITERS, ITERS), bk = median3(tb + (size_t)i * ITERS, ITERS);
                /* the layers without a split backward (recurrent, batch norm) make their parameter
                 * gradients in the input half: zb-h1 has nothing of theirs to defer */
                double bw = l->ops->backward_input ? median3(tw + (size_t)i * ITERS, ITERS) : 0.0;
                out[i] = (dt_layer_cost){ .f = f, .bi = bk, .bw = bw };
        }
        free(tf);
        free(tb);
        free(tw);
        dt_graph_free(&lg);     /* frees lg.layers (the copy), not saved */
        free(saved);
}

/* ---- the cache ---- */

static uint64_t key_of(const dt_layer *l, int index, int b, int dx)
{
        uint64_t h = dt_hash64((uint64_t)index, (uint64_t)b);
        h = dt_hash64(h, (uint64_t)l->place.split | (uint64_t)l->place.nshards << 8 | (uint64_t)l->place.gather << 24 |
                         (uint64_t)dx << 25);
        for (int d = 0; d < l->in.n; d++) h = dt_hash64(h, (uint64_t)l->in.d[d]);
        return h;
}

static dt_layer_cost *find(dt_prof *pf, uint64_t key)
{
        for (int i = 0; i < pf->n; i++)
                if (pf->key[i] == key) return &pf->cost[i];
        return NULL;
}

static void put(dt_prof *pf, uint64_t key, dt_layer_cost c)
{
        if (pf->n == pf->cap) {
                pf->cap = pf->cap ? 2 * pf->cap : 256;
                pf->key = realloc(pf->key, (size_t)pf->cap * sizeof *pf->key);
                pf->cost = realloc(pf->cost, (size_t)pf->cap * sizeof *pf->cost);
                if (!pf->key || !pf->cost) dt_die(DT_EXIT_RUNTIME, "out of memory");
        }
        pf->key[pf->n] = key;
        pf->cost[pf->n++] = c;
}

void dt_prof_init(dt_prof *pf, int threads, int measure)
{
        memset(pf, 0, sizeof *pf);
        pf->measure = measure;
        pf->threads = threads > 0 ? threads : 1;
        pf->be = dt_backend_cpu_new(pf->threads);
        pf->sgemm = dt_bench_sgemm_gflops() * 1e9;
        /* the optimizer step and the gradient norm: memory-bound passes over the parameters */
        size_t n = (size_t)1 << 22;
        float *p = dt_falloc(n), *g = dt_falloc(n), *m = dt_falloc(n), *v = dt_falloc(n);
        memset(p, 0, n * 4); memset(g, 0, n * 4); memset(m, 0, n * 4); memset(v, 0, n * 4);
        dt_optim_hp hp = { .kind = DT_OPT_ADAM, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f };
        double best = 1e30;
        for (int k = 0; k < 3; k++) {
                double t0 = dt_now();
                pf->be->ops->optim_step(pf->be, &hp, 1e-3f, k + 1, p, g, m, v, n);
                (void)pf->be->ops->sumsq(pf->be, g, n);
                double t = dt_now() - t0;
                if (t < best) best = t;
        }
        pf->update_per_param = best / (double)n;
        free(p); free(g); free(m); free(v);
}

void dt_prof_free(dt_prof *pf)
{
        if (pf->be) dt_backend_free(pf->be);
        free(pf->key);
        free(pf->cost);
        memset(pf, 0, sizeof *pf);
}

/* FLOPs at the SGEMM rate, and a floor for memory-bound layers: reading the input and writing the
 * output at about 4 GB/s (elementwise passes measured on this class of machine) */
static dt_layer_cost modelled(const dt_prof *pf, const dt_layer *l, int b, int dx)
{
        double fl = l->ops->flops ? l->ops->flops(l->cfg, &l->in, &l->out) * b : 0;
        double bytes = 4.0 * b * (dt_shape_size(&l->in) + dt_shape_size(&l->out));
        double f = fl / pf->sgemm + bytes / 4e9 + 2e-6;
        int trainable = 0;
        for (int k = 0; k < l->np; k++) trainable |= l->ps[k].trainable;
        double bi = trainable ? (dx ? fl / pf->sgemm : 0) + bytes / 4e9 : f;
        double bw = trainable ? fl / pf->sgemm + 1e-6 : 0;
        if (!l->ops->backward_input) return (dt_layer_cost){ f, bi + bw, 0 };  /* no half zb-h1 can defer */
        return (dt_layer_cost){ f, bi, bw };
}

void dt_prof_graph(dt_prof *pf, const dt_graph *lg, int b, dt_layer_cost *out)
{
        int missing = 0;
        for (int i = 0; i < lg->n; i++) {
                const dt_layer *l = &lg->layers[i];
                int dx = i || lg->input_grad;
                dt_layer_cost *c = find(pf, key_of(l, l->index, b, dx));
                if (c) out[i] = *c;
                else if (!pf->measure) out[i] = modelled(pf, l, b, dx);
                else missing = 1;
        }
        if (!missing) return;
        time_graph(pf, lg, b, out);
        for (int i = 0; i < lg->n; i++) {
                const dt_layer *l = &lg->layers[i];
                put(pf, key_of(l, l->index, b, i || lg->input_grad), out[i]);
        }
}
