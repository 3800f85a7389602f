/* parallel/compress.c - dispatch to the compressor named by partition.compression, and the
 * encode/decode clock and byte count dtrain bench reports. */
#include "parallel/compress.h"
#include "parallel/dp.h"

#include <stdlib.h>
#include "util/common.h"

dt_cx *dt_cx_new(const dt_cluster_spec *cs, dt_comm *comm, dt_graph *g, const dt_bucket *b, int nb)
{
        const dt_cx_ops *ops = cs->compression == DT_COMP_BF16 ? &dt_cx_bf16
                             : cs->compression == DT_COMP_POWERSGD ? &dt_cx_powersgd
                             : cs->compression == DT_COMP_THRESHOLD ? &dt_cx_threshold : NULL;
        if (!ops) return NULL;
        dt_cx *c = dt_calloc(1, sizeof *c);
        *c = (dt_cx){ .ops = ops, .cs = cs, .comm = comm, .g = g, .b = b, .nb = nb };
        c->st = ops->init(c);
        c->bucket_sent = dt_calloc((size_t)nb, sizeof *c->bucket_sent);
        c->bucket_encode = dt_calloc((size_t)nb, sizeof *c->bucket_encode);
        return c;
}

void dt_cx_free(dt_cx *c)
{
        if (!c) return;
        c->ops->free(c->st);
        free(c->bucket_sent);
        free(c->bucket_encode);
        free(c);
}

void dt_cx_start(dt_cx *c, int j)
{
        if (!c->ops->start) return;
        double e0 = c->t_encode;
        c->ops->start(c, c->st, j);
        c->bucket_encode[j] += c->t_encode - e0;
}

void dt_cx_finish(dt_cx *c)
{
        c->sent = 0;
        for (int j = 0; j < c->nb; j++) {
                long s0 = c->sent;
                double e0 = c->t_encode;
                c->ops->finish(c, c->st, j);
                c->bucket_sent[j] = c->sent - s0;
                c->bucket_encode[j] += c->t_encode - e0;
        }
        c->steps++;
}

void dt_cx_state_of(dt_cx *c, dt_cx_state *out)
{
        *out = (dt_cx_state){ 0 };
        if (c && c->ops->state) c->ops->state(c, c->st, out);
}
