/* bench/bench_pool.c - the random samples `dtrain bench` feeds where a model's data cannot be read
 * (and to the micro-batches of a cluster spec): a pool of up to 2 batches of inputs of variance 1
 * (token ids for an embedding), labels and targets, drawn from at random (bench_int.h). */
#include "bench/bench_int.h"

#include <stdlib.h>
#include <string.h>
#include "util/common.h"
#include "layers/layer.h"

static uint64_t rnd(dt_bench_pool *p)
{
        p->rng = p->rng * 6364136223846793005ull + 1442695040888963407ull;
        return p->rng >> 11;
}
static float rnd_unit(dt_bench_pool *p) { return (float)rnd(p) * (1.0f / 9007199254740992.0f); }  /* [0, 1) */

void dt_bench_pool_make(dt_bench_pool *p, const dt_setup *su, int b, uint64_t seed, int inputs, int labels)
{
        const dt_graph *g = dt_setup_model_graph(su);
        const dt_layer *l0 = &g->layers[0];
        int vocab = l0->ops == dt_layer_find("embedding") ? l0->ps[0].shape.d[0] : 0;
        size_t in = dt_shape_size(&g->input);
        size_t cap = (64u << 20) / (in * sizeof(float) + 1);
        memset(p, 0, sizeof *p);
        p->rng = seed;
        p->n = (int)DT_MAX((size_t)b, DT_MIN((size_t)2 * b, cap));
        p->rows = su->rows;
        p->C = su->C;
        if (inputs) {
                p->in = in;
                p->x = dt_falloc((size_t)p->n * in);
                for (size_t i = 0; i < (size_t)p->n * in; i++)      /* var 1, or token ids */
                        p->x[i] = vocab ? (float)(rnd(p) % (uint64_t)vocab) : 3.4641f * (rnd_unit(p) - 0.5f);
        }
        if (!labels) return;
        size_t nr = (size_t)p->n * p->rows;
        p->lab = dt_malloc(nr * sizeof *p->lab);
        for (size_t i = 0; i < nr; i++) p->lab[i] = (int32_t)(rnd(p) % (uint64_t)p->C);
        if (su->spec.loss == DT_LOSS_MSE) {
                p->tgt = dt_falloc(nr * p->C);
                for (size_t i = 0; i < nr * p->C; i++) p->tgt[i] = rnd_unit(p);
        }
}

void dt_bench_pool_draw(dt_bench_pool *p, dt_backend *be, int b, float *x, int32_t *lab, float *tgt)
{
        size_t R = (size_t)p->rows, RC = R * p->C;
        for (int i = 0; i < b; i++) {
                size_t k = (size_t)(rnd(p) % (uint64_t)p->n);
                if (x && p->x) be->ops->to_device(be, x + i * p->in, p->x + k * p->in, p->in);
                if (lab && p->lab) memcpy(lab + i * R, p->lab + k * R, R * sizeof *lab);
                if (tgt && p->tgt) memcpy(tgt + i * RC, p->tgt + k * RC, RC * sizeof *tgt);
        }
}

void dt_bench_pool_free(dt_bench_pool *p)
{
        free(p->x);
        free(p->lab);
        free(p->tgt);
        memset(p, 0, sizeof *p);
}

size_t dt_bench_pool_bytes(const dt_bench_pool *p)
{
        size_t nr = (size_t)p->n * (size_t)p->rows;
        return (p->x ? (size_t)p->n * p->in * sizeof(float) : 0) + (p->lab ? nr * sizeof(int32_t) : 0) +
               (p->tgt ? nr * (size_t)p->C * sizeof(float) : 0);
}
