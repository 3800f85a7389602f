/* layers/bnpool.c - batch norm with relu (batchnorm.c) and the 2x2 stride-2 max pool after it
 * (pool.c) as one op each way, where the graph pairs them (graph/pairs.c). Forward: the statistics
 * pass, then each block of planes normalised, relu'd and pooled while in cache: the batch norm's
 * output is never written. Backward: the pool's gradient spread into such a block in place of the
 * batch norm's dy, never written whole either. The same arithmetic in the same order as the two
 * layers one after the other (batchnorm_body.h's kernels with the pool's own), so the same bits;
 * where the kernels cannot (the plain loops, a device, another pool), the two layers' own ops. */
#include "layers/bnpool.h"
#include "layers/batchnorm_int.h"
#include "layers/pool_kern.h"

/* Passes 2 and 3 of cnn-bn's bn1 forward (x read, y written) became one read of x; backward's
 * 5 passes plus the pool's dx write became 3, the pool's outputs a quarter of a pass each. */
static int fusable(const dt_layer *l, const dt_layer *next, struct bn_pool *pl)
{
        const struct bn_cfg *cf = l->cfg;
        const struct bn_priv *p = l->priv;
        if (dt_bn_plain || !dt_bn_kern()->pools || cf->act != DT_ACT_RELU || p->dd.state || l->in.n != 3 ||
            l->place.split != DT_SPLIT_NONE || next->place.split != DT_SPLIT_NONE || !(pl->code = dt_maxpool_codes(next)))
                return 0;
        pl->k = dt_pool_kern_get();
        pl->H = next->in.d[1];
        pl->W = next->in.d[2];
        pl->OH = next->out.d[1];
        pl->OW = next->out.d[2];
        return 1;
}

void dt_bnpool_forward(dt_layer *l, dt_layer *next, const dt_fwd_ctx *c, const float *x, float *mid, float *y, int B)
{
        struct bn_pool pl = { .y = y };
        if (!fusable(l, next, &pl)) {
                l->ops->forward(l, c, x, mid, B);
                next->ops->forward(next, c, mid, y, B);
                return;
        }
        struct bn_job j = { .l = l, .training = c->training, .B = B, .x = x, .pool = &pl };
        dt_bn_run(l, 0, &j);
}

void dt_bnpool_backward(dt_layer *l, dt_layer *next, const dt_fwd_ctx *c, const float *x, const float *mid,
                        const float *y, const float *dy, float *dmid, float *dx, int B)
{
        struct bn_pool pl = { .dy = dy };
        /* the pool's backward spreads one output row at a time: rows of 3 outputs (cnn-bn's pool3)
         * fill 3 of its 16 lanes, and spreading them twice cost more than the dy pass it saves
         * (b256 t2: 0.81 -> 0.87 ms native, 1.06 -> 1.18 ms avx2) */
        if (!fusable(l, next, &pl) || pl.OW < 4) {
                next->ops->backward(next, c, mid, y, dy, dmid, B);
                l->ops->backward(l, c, x, mid, dmid, dx, B);
                return;
        }
        struct bn_job j = { .l = l, .training = c->training, .B = B, .x = x, .out = dx, .pool = &pl };
        dt_bn_run(l, 1, &j);
}
