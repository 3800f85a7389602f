/* parallel/compress_bf16.c - partition.compression bf16: each bucket rounded to bfloat16 (nearest
 * even), summed over the ranks in fp32, in rank order, and the sum sent back in bf16.
 *
 * Why not an MPI_Iallreduce with a bf16 user op (as fp16 does): the op would round every partial
 * sum to bf16 (8 bits of mantissa), and the tree it rounds along is Open MPI's choice. Instead the
 * reduce-scatter is written out: a bucket is cut in P equal chunks (padded), an MPI_Ialltoall
 * gives rank r every rank's bf16 copy of chunk r, rank r adds them in fp32 in rank order (so the
 * same bits whatever the timing), rounds the sum once and an all-gather returns it to every rank.
 * Bytes sent per rank and bucket of n entries: 2 (P - 1) / P n halves, 4 (P - 1) / P n bytes, half
 * of the 8 (P - 1) / P n bytes of a ring fp32 all-reduce. */
#include "parallel/compress.h"
#include "parallel/dp.h"

#include <stdlib.h>
#include <string.h>
#include "util/common.h"

uint16_t dt_bf16_round(float f)
{
        uint32_t u;
        memcpy(&u, &f, sizeof u);
        if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
        u += 0x7fffu + ((u >> 16) & 1u);
        return (uint16_t)(u >> 16);
}

float dt_bf16_float(uint16_t h)
{
        uint32_t u = (uint32_t)h << 16;
        float f;
        memcpy(&f, &u, sizeof f);
        return f;
}

typedef struct bf16_st {
        size_t *chunk;          /* per bucket: ceil(len / P) */
        size_t *at;             /* per bucket: offset of its P chunks in send and recv */
        uint16_t *send, *recv;
        MPI_Request *req;
} bf16_st;

static void *bf16_init(dt_cx *c)
{
        bf16_st *s = dt_calloc(1, sizeof *s);
        size_t P = (size_t)c->comm->size, total = 0;
        s->chunk = dt_calloc((size_t)c->nb, sizeof *s->chunk);
        s->at = dt_calloc((size_t)c->nb, sizeof *s->at);
        s->req = dt_calloc((size_t)c->nb, sizeof *s->req);
        for (int j = 0; j < c->nb; j++) {
                s->chunk[j] = (c->b[j].len + P - 1) / P;
                s->at[j] = total;
                total += s->chunk[j] * P;
                s->req[j] = MPI_REQUEST_NULL;
        }
        s->send = dt_calloc(total, sizeof *s->send);
        s->recv = dt_calloc(total, sizeof *s->recv);
        return s;
}

static void bf16_start(dt_cx *c, void *st, int j)
{
        bf16_st *s = st;
        double t0 = dt_now();
        const float *gr = c->g->grads + c->b[j].off;
        uint16_t *h = s->send + s->at[j];
        size_t n = c->b[j].len, padded = s->chunk[j] * (size_t)c->comm->size;
        for (size_t i = 0; i < n; i++) h[i] = dt_bf16_round(gr[i]);
        for (size_t i = n; i < padded; i++) h[i] = 0;
        c->t_encode += dt_now() - t0;
        MPI_Ialltoall(h, (int)s->chunk[j], MPI_UINT16_T, s->recv + s->at[j], (int)s->chunk[j], MPI_UINT16_T,
                      c->comm->comm, &s->req[j]);
}

static void bf16_finish(dt_cx *c, void *st, int j)
{
        bf16_st *s = st;
        int P = c->comm->size;
        size_t k = s->chunk[j], n = c->b[j].len;
        if (s->req[j] == MPI_REQUEST_NULL) bf16_start(c, st, j);
        dt_comm_wait(c->comm, 1, &s->req[j], "bf16 gradient reduce-scatter");
        double t0 = dt_now();
        const uint16_t *in = s->recv + s->at[j];
        uint16_t *mine = s->send + s->at[j] + (size_t)c->comm->rank * k;
        for (size_t i = 0; i < k; i++) {
                float sum = 0.0f;
                for (int r = 0; r < P; r++) sum += dt_bf16_float(in[(size_t)r * k + i]);
                mine[i] = dt_bf16_round(sum);
        }
        c->t_encode += dt_now() - t0;
        MPI_Request r;
        MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, s->send + s->at[j], (int)k, MPI_UINT16_T,
                       c->comm->comm, &r);
        dt_comm_wait(c->comm, 1, &r, "bf16 gradient all-gather");
        t0 = dt_now();
        float *gr = c->g->grads + c->b[j].off;
        const uint16_t *h = s->send + s->at[j];
        for (size_t i = 0; i < n; i++) gr[i] = dt_bf16_float(h[i]);
        c->t_encode += dt_now() - t0;
        s->req[j] = MPI_REQUEST_NULL;
        c->sent += (long)((size_t)P * k * sizeof(uint16_t));
}

static void bf16_free(void *st)
{
        bf16_st *s = st;
        free(s->chunk);
        free(s->at);
        free(s->send);
        free(s->recv);
        free(s->req);
        free(s);
}

const dt_cx_ops dt_cx_bf16 = { bf16_init, bf16_start, bf16_finish, bf16_free, NULL };
