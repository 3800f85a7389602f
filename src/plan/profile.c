/* plan/profile.c - what each layer costs on this machine: a rank's graph of shards (or a whole
 * stage) allocated at one micro-batch size and timed layer by layer, forward and backward (the
 * split layers' collectives replaced by local stand-ins, their cost being the network model's),
 * remembered per (layer, split, group size, micro-batch, input gradient) in memory and in
 * $XDG_CACHE_HOME/dtrain/profile.tsv (~/.cache without it), keyed also by this machine (host name,
 * OpenBLAS core, threads, dtrain's version and build), so the next plan of the same shapes measures nothing.
 * Without measuring, the costs are the layers' FLOPs at the measured SGEMM rate, scaled from one
 * measured reference shape (plan.h's scaling to many ranks). The costs remembered, in memory and
 * on disk, are profile_cache.c's. */
#include "plan/profile.h"
#include "plan/profile_int.h"
#include "optim/moments.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "util/common.h"
#include "util/stats.h"
#include "backend/peak.h"
#include "optim/optim.h"
#include "util/cpu_fix.h"
#include "util/pages.h"
#include "config.h"
#include <unistd.h>
#include <mpi.h>

/* ---- the stand-in collectives: a rank alone, its shard's columns in place ---- */
static void solo_allreduce(const dt_tp *t, float *buf, size_t n)
{
        (void)t; (void)buf; (void)n;
}

static void solo_allgather(const dt_tp *t, const float *in, float *out, size_t rows, size_t w)
{
        dt_cols_put(out, in, rows, w * (size_t)t->size, (size_t)t->rank * w, w);
}

void dt_prof_prepare(dt_prof *pf, const dt_graph *lg0, int b, dt_prof_prepared *pg, int plain)
{
        dt_graph *lg = &pg->lg;
        *lg = *lg0;     /* a copy of the layers: alloc writes into them, lg0 stays as it is */
        lg->layers = dt_malloc((size_t)lg->n * sizeof *lg->layers);
        memcpy(lg->layers, lg0->layers, (size_t)lg->n * sizeof *lg->layers);
        for (int i = 0; plain && i < lg->n; i++) lg->layers[i].recompute = 0;    /* its plain twin */
        lg->owned = NULL;
        /* and of the graph's links (extra inputs, outputs), which dt_graph_free frees too */
        lg->x_id = dt_malloc(((size_t)lg->nx + 1) * sizeof *lg->x_id);
        lg->x_shape = dt_malloc(((size_t)lg->nx + 1) * sizeof *lg->x_shape);
        lg->out_t = dt_malloc(((size_t)lg->nout + 1) * sizeof *lg->out_t);
        if (lg->nx) memcpy(lg->x_id, lg0->x_id, (size_t)lg->nx * sizeof *lg->x_id);
        if (lg->nx) memcpy(lg->x_shape, lg0->x_shape, (size_t)lg->nx * sizeof *lg->x_shape);
        if (lg->nout) memcpy(lg->out_t, lg0->out_t, (size_t)lg->nout * sizeof *lg->out_t);
        dt_graph_copy_chunks(lg0, lg);  /* a stage of several chunks: its own copy of their ranges */
        dt_tp solo = { .size = 1, .rank = 0, .allreduce = solo_allreduce, .allgather_cols = solo_allgather };
        int ntp = 0;
        for (int i = 0; i < lg->n; i++) {
                dt_layer *l = &lg->layers[i];
                if (!l->place.tp) continue;
                int k = 0;      /* one stand-in per (size, rank) */
                while (k < ntp && !(pg->tps[k].size == l->place.nshards && pg->tps[k].rank == l->place.shard)) k++;
                if (k == ntp && ntp < 8) {
                        pg->tps[ntp] = solo;
                        pg->tps[ntp].size = l->place.nshards;
                        pg->tps[ntp].rank = l->place.shard;
                        ntp++;
                }
                l->place.tp = &pg->tps[k < ntp ? k : 0];
        }
        if (dt_graph_alloc(lg, pf->be, b) < 0) dt_die(DT_EXIT_RUNTIME, "planner: layer setup failed");
        dt_graph_init_params(lg, 1);
        const dt_backend_ops *o = pf->be->ops;
        /* inputs like data: values decide branches (a max pool's winners, a relu's mask), and all
         * zeros made every max pool's backward 3-4x cheaper than in training. Token ids stay zero. */
        size_t nin = (size_t)b * dt_shape_size(&lg->input);
        o->zero(pf->be, lg->act[0], nin);
        if (strcmp(lg->layers[0].ops->name, "embedding")) {
                float *x = dt_falloc(nin);
                uint64_t h = 0x2545f4914f6cdd1dull;
                for (size_t k = 0; k < nin; k++) {
                        h ^= h << 13, h ^= h >> 7, h ^= h << 17;
                        x[k] = (float)((h >> 40) * (1.0 / 16777216.0)) - 0.5f;
                }
                o->to_device(pf->be, lg->act[0], x, nin);
                free(x);
        }
        for (int k = 0; k < lg->nx; k++) o->zero(pf->be, lg->act[lg->n + 1 + k], (size_t)b * dt_shape_size(&lg->x_shape[k]));
        for (int i = 0; i < dt_graph_ntensors(lg); i++)
                if (lg->dact[i]) o->zero(pf->be, lg->dact[i], (size_t)b * dt_shape_size(dt_graph_tensor_shape(lg, i)));
}

/* The clock time_graph reads: the wall's, or while the neighbours' factor is measured on one thread,
 * this thread's CPU time, so that the machine's other work taking the core in turns does not read
 * as the neighbours' slowdown (only their sharing of caches and memory does). */
double (*dt_prof_layer_clock)(void) = dt_now;

/* Times every layer of lg0 (unallocated; a copy is allocated here) at micro-batch b. A graph that
 * recomputes is walked as the run walks it (graph/recompute.c's region places per walk, each segment
 * remade before the backward that reads it, outside that backward's clock): its layers' costs are
 * those of its own region, and each recomputed layer's forward run again is its r. */
void dt_prof_time_graph(dt_prof *pf, const dt_graph *lg0, int b, dt_layer_cost *out, int plain)
{
        dt_prof_prepared pg;
        dt_prof_prepare(pf, lg0, b, &pg, plain);
        dt_graph lg = pg.lg;
        const dt_backend_ops *o = pf->be->ops;
        enum { ITERS = 3 };
        double *tf = dt_malloc((size_t)lg.n * ITERS * sizeof *tf), *tb = dt_malloc((size_t)lg.n * ITERS * sizeof *tb);
        double *tw = dt_calloc((size_t)lg.n * ITERS, sizeof *tw);      /* the weight half, where split */
        double *tr = dt_calloc((size_t)lg.n * ITERS, sizeof *tr);      /* forward again, where recomputed */
        dt_fwd_ctx c = { .training = 1, .seed = 1 };
        for (int it = -1; it < ITERS; it++) {   /* one warm-up pass */
                dt_graph_walk_begin(&lg, 0);
                for (int i = 0; i < lg.n; i++) {
                        double t0 = dt_prof_layer_clock();
                        dt_graph_layer_forward(&lg, i, &c, b);
                        if (it >= 0) tf[(size_t)i * ITERS + it] = dt_prof_layer_clock() - t0;
                }
                dt_graph_walk_begin(&lg, 1);
                for (int i = lg.n - 1; i >= 0; i--) {
                        dt_layer *l = &lg.layers[i];
                        size_t ny = (size_t)b * dt_shape_size(&l->out);
                        o->zero(pf->be, lg.dact[i + 1], ny);    /* a layer may consume its dy */
                        dt_graph_recompute_for(&lg, i, &c, b);
                        double t0 = dt_prof_layer_clock();
                        if (!l->ops->backward_input) {
                                dt_graph_layer_backward(&lg, i, &c, b, 0);
                                if (it >= 0) tb[(size_t)i * ITERS + it] = dt_prof_layer_clock() - t0;
                                continue;
                        }
                        /* zb-h1's halves, timed apart (together they are backward) */
                        dt_graph_layer_backward(&lg, i, &c, b, 1);
                        double t1 = dt_prof_layer_clock();
                        dt_graph_layer_backward(&lg, i, &c, b, 2);
                        if (it >= 0) {
                                tb[(size_t)i * ITERS + it] = t1 - t0;
                                tw[(size_t)i * ITERS + it] = dt_prof_layer_clock() - t1;
                        }
                }
                for (int i = 0; i < lg.n; i++) {
                        double r = dt_graph_recompute_seconds(&lg, i, 1);
                        if (it >= 0) tr[(size_t)i * ITERS + it] = r;
                }
        }
        for (int i = 0; i < lg.n; i++) {
                const dt_layer *l = &lg.layers[i];
                double f = dt_median(tf + (size_t)i * ITERS, ITERS), bk = dt_median(tb + (size_t)i * ITERS, ITERS);
                /* the layers without a split backward (recurrent, batch norm) make their parameter
                 * gradients in the input half: zb-h1 has nothing of theirs to defer */
                double bw = l->ops->backward_input ? dt_median(tw + (size_t)i * ITERS, ITERS) : 0.0;
                double r = dt_graph_recomputed(&lg, i) ? dt_median(tr + (size_t)i * ITERS, ITERS) : 0.0;
                out[i] = (dt_layer_cost){ .f = f, .bi = bk, .bw = bw, .r = r };
        }
        free(tr);
        free(tf);
        free(tb);
        free(tw);
        dt_graph_free(&lg);     /* frees the copy of the layers, not lg0's */
}

/* A key of the model's own layers (pf->ref at pf->ref_b), for lines that describe the machine as
 * those layers see it */
uint64_t dt_prof_ref_key(const dt_prof *pf, uint64_t seed)
{
        for (int i = 0; i < pf->ref->n; i++) seed = dt_hash64(seed, dt_prof_gkey(pf->ref, i, pf->ref_b));
        return seed;
}

/* g's layers at b samples timed the profile's own way (time_graph) twice, the lesser sum: what the
 * neighbours' factor, the drift calibration and --validate's machine drift all compare. */
double dt_prof_graph_time(dt_prof *pf, const dt_graph *g, int b)
{
        dt_layer_cost *lc = dt_malloc((size_t)g->n * sizeof *lc);
        double best = 1e30;
        for (int r = 0; r < 2; r++) {
                dt_prof_time_graph(pf, g, b, lc, 0);
                double t = 0;
                for (int i = 0; i < g->n; i++) t += lc[i].f + lc[i].bi + lc[i].bw;
                if (t < best) best = t;
        }
        free(lc);
        return best;
}

/* Seconds per byte of pages handed back and made resident again, as shard 3 does each step: the
 * best of three over 48 MiB (a fault and the kernel's clearing per page). Over less the clearing
 * stays in the cache, which a step's tens of MiB do not: on the 2-core Xeon this was written on,
 * 0.11 ns per byte over 16 MiB, 0.21 over 48 and 0.23 over 64. 48 MiB stays below the optimizer
 * measurement's 64 (the planning phase's peak counts against memory_per_rank). Each page is
 * written after, so a kernel without MADV_POPULATE_WRITE is timed by its faults. */
static double page_cost(void)
{
        size_t n = (size_t)12 << 20, step = 1024;      /* floats: 48 MiB, a float per 4 KiB page */
        float *x = dt_pages_alloc(n);
        double best = 1e30;
        for (int k = 0; k < 3; k++) {
                double t0 = dt_now();
                dt_pages_populate(x, n);
                for (size_t i = 0; i < n; i += step) x[i] = 1.0f;
                double t = dt_now() - t0;
                if (t < best) best = t;
                dt_pages_zero(x, n);
        }
        dt_pages_free(x, n);
        return best / (4.0 * (double)n);
}

void dt_prof_init(dt_prof *pf, int threads, int measure)
{
        memset(pf, 0, sizeof *pf);
        pf->measure = measure;
        pf->threads = threads > 0 ? threads : 1;
        pf->be = dt_backend_cpu_new(pf->threads);
        pf->sgemm = dt_peak_sgemm_gflops() * 1e9;
        /* the speed reference reported and stored beside the cache's lines, the least of three
         * taken a few hundred ms apart (here, after the optimizer's sizes and after the pages):
         * one burst of 18 SGEMMs is 7 ms, and a slow moment can cover it */
        double ref0 = measure ? dt_prof_reference(pf) : 0;
        /* the optimizer step and the gradient norm: memory-bound passes over the parameters, cheaper
         * per parameter while the four arrays fit in cache, so measured at four sizes, the moments
         * laid out as training lays them out (dt_moments_alloc: at equal offsets modulo 4 KiB the
         * Adam step took twice its time). The largest, 2^23 (128 MiB in all, a copy's 64 MiB by
         * dt_machine_stream's count), lies past the caches by the machine model's own measure (its
         * copies end at 64 MiB, so intra.far is at most that): larger steps cost its rate a
         * parameter, measured rather than scaled from a smaller size by the copies' ratio, which
         * assumes that size fits the caches. 2^22's 64 MiB fit the 2-vCPU Xeon's caches but not a
         * Zen 3's 32 MiB L3, where 2^22 already streamed from memory (1.2 ns a parameter, 20M at
         * 0.94-1.0) and the copies' ratio (2.0-2.7) priced mlp-4096's 20M step at 58-67 ms against
         * 19-20 timed. Not more than 2^23: this runs before training under strategy auto and its
         * peak counts against memory_per_rank (at 2^24 it alone lifted a 300 MiB rank to 306 MiB);
         * dt_machine_from's copies already take 128 MiB in the same process. */
        /* on one thread in its CPU time, which the machine's other work taking the core does not lengthen */
        double (*clk)(void) = pf->threads == 1 ? dt_thread_cpu : dt_now;
        static const size_t sizes[DT_PROF_UPDATE_SIZES] = { ((size_t)1 << 16) + 1111, ((size_t)1 << 20) + 11111,
                                                            ((size_t)1 << 22) + 44444, ((size_t)1 << 23) + 88888 };
        for (int z = 0; z < DT_PROF_UPDATE_SIZES; z++) {
                size_t n = sizes[z];
                dt_moments mo = { .n = 2 };
                dt_moments_alloc(&mo, n);
                float *p = dt_falloc(n), *g = dt_falloc(n), *m = mo.m, *v = mo.v;
                memset(p, 0, n * 4); memset(g, 0, n * 4); memset(m, 0, n * 4); memset(v, 0, n * 4);
                dt_optim_hp hp = { .kind = DT_OPT_ADAM, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f };
                double best = 1e30, zbest = 1e30;
                for (int k = 0; k < 3; k++) {
                        double t0 = clk();
                        pf->be->ops->optim_step(pf->be, &hp, 1e-3f, k + 1, p, g, m, v, n);
                        (void)pf->be->ops->sumsq(pf->be, g, n);
                        double t1 = clk();
                        pf->be->ops->zero(pf->be, g, n);
                        double t = clk() - t0;
                        if (t < best) best = t;
                        if (t - (t1 - t0) < zbest) zbest = t - (t1 - t0);
                }
                pf->update_per_param[z] = best / (double)n;
                pf->zero_per_param[z] = zbest / (double)n;
                free(p); free(g); free(mo.blk);
        }
        double ref1 = measure ? dt_prof_reference(pf) : 0;
        pf->page_per_byte = page_cost();
        pf->machine = dt_prof_machine_key(pf->threads);
        pf->drift = 1.0;
        if (measure) pf->ref_now = DT_MIN(DT_MIN(ref0, ref1), dt_prof_reference(pf));
        if (measure) dt_prof_cache_load(pf);
}

void dt_prof_free(dt_prof *pf)
{
        if (pf->be) dt_backend_free(pf->be);
        free(pf->key);
        free(pf->cost);
        free(pf->samp);
        free(pf->ns);
        free(pf->timed);
        free(pf->scale_key);
        free(pf->scale);
        memset(pf, 0, sizeof *pf);
}

static uint64_t name_key(const char *name)
{
        uint64_t h = 0x6e616d65ull;
        for (const char *s = name ? name : ""; *s; s++) h = dt_hash64(h, (unsigned char)*s);
        return h;
}

/* FLOPs at the SGEMM rate, and a floor for memory-bound layers: reading the input and writing the
 * output at about 4 GB/s (elementwise passes measured on this class of machine) */
static dt_layer_cost flop_model(const dt_prof *pf, const dt_layer *l, int b, int dx)
{
        double fl = l->ops->flops ? l->ops->flops(l->cfg, &l->in, &l->out) * b : 0;
        double bytes = 4.0 * b * (dt_shape_size(&l->in) + dt_shape_size(&l->out));
        double f = fl / pf->sgemm + bytes / 4e9 + 2e-6;
        int trainable = 0;
        for (int k = 0; k < l->np; k++) trainable |= l->ps[k].trainable;
        double bi = trainable ? (dx ? fl / pf->sgemm : 0) + bytes / 4e9 : f;
        double bw = trainable ? fl / pf->sgemm + 1e-6 : 0;
        if (!l->ops->backward_input) return (dt_layer_cost){ f, bi + bw, 0, 0 };  /* no half zb-h1 can defer */
        return (dt_layer_cost){ f, bi, bw, 0 };
}

/* The FLOP model, scaled to this layer's measurement where dt_prof_anchor has one */
static dt_layer_cost modelled(const dt_prof *pf, const dt_layer *l, int b, int dx)
{
        dt_layer_cost c = flop_model(pf, l, b, dx);
        double x = pf->scale_all;
        uint64_t k = name_key(l->name);
        for (int i = 0; i < pf->nscale; i++)
                if (pf->scale_key[i] == k) x = pf->scale[i];
        if (x > 0) c.f *= x, c.bi *= x, c.bw *= x;
        return c;
}

void dt_prof_anchor(dt_prof *pf, const dt_prof *src, const dt_graph *g, int b)
{
        for (int i = 0; i < src->n; i++) dt_prof_put(pf, src->key[i], src->cost[i], src->timed[i]);
        pf->neigh = src->neigh;
        pf->neigh_mem = src->neigh_mem;
        pf->neigh_busy = src->neigh_busy;
        /* the update too: timed again here it came out 0.3% apart, and so did the 1-rank step */
        memcpy(pf->update_per_param, src->update_per_param, sizeof pf->update_per_param);
        memcpy(pf->zero_per_param, src->zero_per_param, sizeof pf->zero_per_param);
        pf->page_per_byte = src->page_per_byte;
        pf->feed_a = src->feed_a, pf->feed_c = src->feed_c, pf->loss_a = src->loss_a, pf->loss_c = src->loss_c;
        free(pf->scale_key);
        free(pf->scale);
        pf->scale_key = dt_malloc((size_t)(g->n + 1) * sizeof *pf->scale_key);
        pf->scale = dt_malloc((size_t)(g->n + 1) * sizeof *pf->scale);
        pf->nscale = 0;
        pf->scale_all = 0;
        double timed = 0, model = 0;
        for (int i = 0; i < g->n; i++) {
                const dt_layer *l = &g->layers[i];
                int dx = i || g->input_grad;
                const dt_layer_cost *c = dt_prof_find((dt_prof *)src, dt_prof_gkey(g, i, b));
                if (!c) continue;
                dt_layer_cost m = flop_model(pf, l, b, dx);
                double cm = c->f + c->bi + c->bw, mm = m.f + m.bi + m.bw;
                if (!(cm > 0 && mm > 0)) continue;
                pf->scale_key[pf->nscale] = name_key(l->name);
                pf->scale[pf->nscale++] = cm / mm;
                timed += cm, model += mm;
        }
        if (model > 0) pf->scale_all = timed / model;
}

void dt_prof_forget(dt_prof *pf, const dt_graph *lg, int b)
{
        for (int i = 0; i < lg->n; i++) {
                uint64_t k = dt_prof_gkey(lg, i, b);
                for (int j = 0; j < pf->n; j++)
                        if (pf->key[j] == k) pf->ns[j] = 0;
        }
}

static void measure_graph(dt_prof *pf, const dt_graph *lg, int b, int only_missing, int plain);

static int recomputes(const dt_graph *g)
{
        for (int i = 0; i < g->n; i++)
                if (dt_graph_recomputed(g, i)) return 1;
        return 0;
}

/* A recomputing graph's costs in the profile's units, into out: TWIN_ROUNDS rounds of its plain twin
 * timed, then it, each round's timings scaled by the costs the profile holds for the twin (measured
 * first where missing) over the twin's now, and per layer the median round. Timed apart from the
 * plain graph, under load (12-14 on 2 cores, nice 19) a deep MLP's recompute layout came out 45%
 * faster than its plain one, which side by side it is not (+15-19%). 0 when the twin has no costs. */
enum { TWIN_ROUNDS = 3 };
static int twin_scaled(dt_prof *pf, const dt_graph *lg, int b, dt_layer_cost *out)
{
        measure_graph(pf, lg, b, 1, 1);
        double held = 0;
        for (int i = 0; i < lg->n; i++) {
                const dt_layer_cost *c = dt_prof_find(pf, dt_prof_key(&lg->layers[i], b, i || lg->input_grad));
                held += c ? c->f + c->bi + c->bw : 0;
        }
        dt_layer_cost *t = dt_malloc((size_t)lg->n * sizeof *t), *o = dt_malloc((size_t)lg->n * TWIN_ROUNDS * sizeof *o);
        int ok = held > 0;
        for (int k = 0; k < TWIN_ROUNDS && ok; k++) {
                dt_layer_cost *rk = o + (size_t)k * lg->n;
                dt_prof_time_graph(pf, lg, b, t, 1);
                dt_prof_time_graph(pf, lg, b, rk, 0);
                double now = 0;
                for (int i = 0; i < lg->n; i++) now += t[i].f + t[i].bi + t[i].bw;
                double y = now > 0 ? held / now : 0;
                ok = y > 0;
                for (int i = 0; i < lg->n; i++) rk[i].f *= y, rk[i].bi *= y, rk[i].bw *= y, rk[i].r *= y;
        }
        for (int i = 0; i < lg->n && ok; i++) {
                double v[4][TWIN_ROUNDS];
                for (int k = 0; k < TWIN_ROUNDS; k++) {
                        const dt_layer_cost *c = &o[(size_t)k * lg->n + i];
                        v[0][k] = c->f, v[1][k] = c->bi, v[2][k] = c->bw, v[3][k] = c->r;
                }
                out[i] = (dt_layer_cost){ dt_median(v[0], TWIN_ROUNDS), dt_median(v[1], TWIN_ROUNDS),
                                          dt_median(v[2], TWIN_ROUNDS), dt_median(v[3], TWIN_ROUNDS) };
        }
        free(t);
        free(o);
        return ok;
}

/* Times lg at micro-batch b now (plain: its twin without recomputation) and adds a sample to each
 * shape's timings (every shape, or only those not known yet): the median of a shape's instances in
 * lg, scaled to the loaded costs' units, or a recomputing graph's to its plain twin's costs. */
static void measure_graph(dt_prof *pf, const dt_graph *lg, int b, int only_missing, int plain)
{
        dt_layer_cost *out = dt_malloc((size_t)lg->n * sizeof *out);
        double r0 = dt_prof_reference(pf);
        int twin = !plain && recomputes(lg) && twin_scaled(pf, lg, b, out);
        if (!twin) dt_prof_time_graph(pf, lg, b, out, plain);
        double r1 = dt_prof_reference(pf), ref = r0 < r1 ? r0 : r1;
        /* A shape the graph holds several times (a ResNet's blocks) gets the median of its
         * instances, and every instance is costed by what is stored: costing each by its own
         * timing now and by the first one's later made one model's 1-rank step 432 ms in the
         * first search and 333 ms in the next. */
        uint64_t *key = dt_malloc((size_t)lg->n * sizeof *key);
        unsigned char *done = dt_calloc((size_t)lg->n, 1);
        double *v = dt_malloc((size_t)lg->n * 4 * sizeof *v);
        for (int i = 0; i < lg->n; i++) {
                key[i] = plain ? dt_prof_key(&lg->layers[i], b, i || lg->input_grad) : dt_prof_gkey(lg, i, b);
                if (only_missing && dt_prof_find(pf, key[i])) done[i] = 1;
        }
        for (int i = 0; i < lg->n; i++) {
                if (done[i]) continue;
                int n = 0;
                for (int j = i; j < lg->n; j++)
                        if (key[j] == key[i]) {
                                v[n] = out[j].f, v[lg->n + n] = out[j].bi, v[2 * lg->n + n] = out[j].bw;
                                v[3 * lg->n + n++] = out[j].r;
                                done[j] = 1;
                        }
                dt_layer_cost m = { dt_median(v, n), dt_median(v + lg->n, n), dt_median(v + 2 * lg->n, n),
                                    dt_median(v + 3 * lg->n, n) };
                dt_prof_cache_save(pf, key[i], m, ref);
                dt_prof_put(pf, key[i], m, 1);
        }
        free(v);
        free(done);
        free(key);
        free(out);
}

void dt_prof_graph(dt_prof *pf, const dt_graph *lg, int b, dt_layer_cost *out)
{
        int missing = 0;
        for (int i = 0; i < lg->n; i++) {
                const dt_layer *l = &lg->layers[i];
                int dx = i || lg->input_grad;
                dt_layer_cost *c = dt_prof_find(pf, dt_prof_gkey(lg, i, b));
                if (c) out[i] = *c;
                else if (!pf->measure) {
                        out[i] = modelled(pf, l, b, dx);
                        out[i].r = dt_graph_recomputed(lg, i) ? out[i].f : 0;  /* its forward again */
                } else missing = 1;
        }
        if (!missing) return;
        measure_graph(pf, lg, b, 1, 0);
        for (int i = 0; i < lg->n; i++) out[i] = *dt_prof_find(pf, dt_prof_gkey(lg, i, b));
}

void dt_prof_refine(dt_prof *pf, const dt_graph *lg, int b)
{
        if (pf->measure) measure_graph(pf, lg, b, 0, 0);
}

void dt_prof_calibrate(dt_prof *pf)
{
        const dt_graph *g = pf->ref;
        pf->drift = 1.0;
        int mpi = 0;
        MPI_Initialized(&mpi);
        /* inside a job every rank would time at once, each slowed by the others (as for the
         * neighbours' factor, which is 1 there too) */
        if (!pf->measure || !g || g->n <= 0 || mpi) return;
        double tc = 0;
        int all = 1;
        for (int i = 0; i < g->n && all; i++) {
                dt_layer_cost *c = dt_prof_find(pf, dt_prof_gkey(g, i, pf->ref_b));
                if (c) tc += c->f + c->bi + c->bw;
                all = c != NULL;
        }
        /* The model's layers now, kept with the last few starts' timings under a key of their own
         * (a ratio line), their median the machine's usual state, which --validate's machine drift
         * (dt_prof_speed) compares each run against. The cached costs are not scaled by this
         * start's timing against them (pf->drift only reports it): one timing of a few ms is a
         * moment of a machine whose speed moves by a third within minutes, and scaling every cost
         * by it (after the reference's own scaling) put 2-rank predictions 24-38% off in turn both
         * ways, where the runs' compute kept within 10% (profile_cache.c's median). */
        double now = dt_prof_graph_time(pf, g, pf->ref_b);
        uint64_t ck = dt_prof_ref_key(pf, 0x63616c6962ull);
        dt_prof_put(pf, ck, (dt_layer_cost){ now, 0, 0, 0 }, 0);
        dt_prof_cache_save(pf, ck, (dt_layer_cost){ now, 0, 0, 0 }, 0);
        pf->ref_t = dt_prof_find(pf, ck)->f;
        if (all && tc > 0 && now > 0) pf->drift = now / tc;
}

double dt_prof_speed(dt_prof *pf)
{
        int mpi = 0;
        MPI_Initialized(&mpi);
        if (!pf->measure || !pf->ref || pf->ref_t <= 0 || mpi) return 0;
        /* the median of three, each as dt_prof_calibrate times it: one best-of-two of mlp's
         * layers is a millisecond, and this machine's speed moves by a quarter within one */
        double t[3];
        for (int k = 0; k < 3; k++) t[k] = dt_prof_graph_time(pf, pf->ref, pf->ref_b);
        return dt_median(t, 3) / pf->ref_t;
}

double dt_prof_pages(const dt_prof *pf, double bytes)
{
        return pf->page_per_byte * bytes;
}

/* per-parameter cost interpolated in log2(n) between the measured sizes 2^16, 2^20, 2^22 and 2^23;
 * past the last, its rate (from memory) */
static double per_param(const double *u, double n)
{
        static const double at[DT_PROF_UPDATE_SIZES] = { 16, 20, 22, 23 };
        double x = n > 1 ? log2(n) : 0;
        if (x <= at[0]) return u[0];
        for (int z = 1; z < DT_PROF_UPDATE_SIZES; z++)
                if (x <= at[z]) return u[z - 1] + (u[z] - u[z - 1]) * (x - at[z - 1]) / (at[z] - at[z - 1]);
        return u[DT_PROF_UPDATE_SIZES - 1];
}

double dt_prof_zero(const dt_prof *pf, double n)
{
        return n > 0 ? per_param(pf->zero_per_param, n) * n : 0;
}

double dt_prof_update(const dt_prof *pf, double n)
{
        return per_param(pf->update_per_param, n) * n;
}
