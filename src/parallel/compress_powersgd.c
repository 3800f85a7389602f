/* parallel/compress_powersgd.c - partition.compression powersgd (Vogels, Karimireddy and Jaggi
 * 2019): each weight matrix's gradient M (rows x cols, error feedback added) is sent as two thin
 * factors, P = M Q (rows x r) and Q = M^T P (cols x r), both all-reduced; the rest of the bucket
 * (biases, batch norm, matrices the factors shrink less than twice) is all-reduced dense with Q,
 * in the same step.
 *
 * One power iteration per step, warm-started from the previous step's summed Q (at step 1 a fixed
 * pseudo-random Q, the same on every rank). The summed P is orthogonalised (Gram-Schmidt) before
 * Q = M^T P, so P Q_sum^T is the projection of the summed M onto span(P): what every rank applies.
 * The error feedback keeps what this rank's M lost against the mean: e = M - P Q_sum^T / ranks.
 * Every sum is an MPI_Allreduce of floats, whose order Open MPI fixes by the size, so two runs
 * give the same bits. */
#include "parallel/compress.h"
#include "parallel/dp.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "util/common.h"

typedef struct psgd_mat {
        size_t off;             /* in the flat gradient */
        int rows, cols;
        size_t p, q;            /* offsets of its P in the P buffer and of its Q in qstate */
} psgd_mat;

typedef struct psgd_st {
        int r;
        int nm;
        psgd_mat *m;
        int *first;             /* per bucket: its matrices are m[first[j] .. first[j + 1]) */
        unsigned char *dense;   /* per gradient entry: 1 when it is sent dense */
        float *res;             /* error feedback, matrix entries only */
        float *qstate;          /* each matrix's Q (cols x r, row-major), warm start */
        float *pbuf, *qbuf;     /* one bucket's P, and its Q followed by its dense entries */
} psgd_st;

/* Deterministic N(0, 1) draws for the first Q (splitmix64 and Box-Muller). */
static double unit(uint64_t *s)
{
        uint64_t z = (*s += 0x9e3779b97f4a7c15u);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
        return ((double)((z ^ (z >> 31)) >> 11) + 0.5) / 9007199254740992.0;
}

int dt_powersgd_factors(const dt_param_spec *ps, size_t n, int r, size_t *rows, size_t *cols)
{
        if (!ps->trainable || ps->shape.n < 2) return 0;
        *rows = (size_t)ps->shape.d[0];
        if (!*rows || n % *rows) return 0;
        *cols = n / *rows;
        /* PyTorch's min_compression_rate 2: a matrix the factors shrink less than twice costs the
         * low-rank error for few bytes (cnn's conv1, 32 x 9 at rank 4: 164 floats for 288) */
        return *rows >= 2 && *cols >= 2 && 2 * (size_t)r * (*rows + *cols) < *rows * *cols;
}

/* The gradients of bucket j that are matrices worth factoring (dt_powersgd_factors). */
static void find_matrices(dt_cx *c, psgd_st *s, int j, size_t *np, size_t *nq)
{
        const dt_bucket *b = &c->b[j];
        for (int i = 0; i < c->g->n; i++) {
                const dt_layer *l = &c->g->layers[i];
                for (int k = 0; k < l->np; k++) {
                        size_t rows, cols, n = l->len[k];
                        if (l->off[k] < b->off || l->off[k] >= b->off + b->len ||
                            !dt_powersgd_factors(&l->ps[k], n, s->r, &rows, &cols))
                                continue;
                        s->m = realloc(s->m, (size_t)(s->nm + 1) * sizeof *s->m);
                        DT_ASSERT(s->m);
                        s->m[s->nm++] = (psgd_mat){ .off = l->off[k], .rows = (int)rows, .cols = (int)cols,
                                                    .p = *np, .q = *nq };
                        *np += rows * (size_t)s->r;
                        *nq += cols * (size_t)s->r;
                        memset(s->dense + l->off[k], 0, n);
                }
        }
}

static void *psgd_init(dt_cx *c)
{
        psgd_st *s = dt_calloc(1, sizeof *s);
        s->r = c->cs->powersgd_rank;
        s->first = dt_calloc((size_t)c->nb + 1, sizeof *s->first);
        s->dense = dt_malloc(c->g->nparams);
        memset(s->dense, 1, c->g->nparams);
        size_t qtotal = 0, pmax = 0, bmax = 0;
        for (int j = 0; j < c->nb; j++) {
                size_t np = 0, nq = 0, nd = 0;
                s->first[j] = s->nm;
                find_matrices(c, s, j, &np, &nq);
                for (int m = s->first[j]; m < s->nm; m++) s->m[m].q += qtotal;
                for (size_t i = 0; i < c->b[j].len; i++) nd += s->dense[c->b[j].off + i];
                qtotal += nq;
                if (np > pmax) pmax = np;
                if (nq + nd > bmax) bmax = nq + nd;
        }
        s->first[c->nb] = s->nm;
        s->res = dt_falloc(c->g->nparams);
        s->qstate = dt_falloc(qtotal ? qtotal : 1);
        s->pbuf = dt_falloc(pmax ? pmax : 1);
        s->qbuf = dt_falloc(bmax ? bmax : 1);
        uint64_t seed = 0x70537364u;    /* fixed: every rank starts from the same Q */
        for (size_t i = 0; i < qtotal; i += 2) {
                double u1 = unit(&seed), u2 = unit(&seed), rad = sqrt(-2.0 * log(u1));
                s->qstate[i] = (float)(rad * cos(6.283185307179586 * u2));
                if (i + 1 < qtotal) s->qstate[i + 1] = (float)(rad * sin(6.283185307179586 * u2));
        }
        return s;
}

/* Gram-Schmidt on the r columns of P (rows x r, row-major), in place; a column that vanishes
 * stays (near) zero instead of dividing by zero. */
static void orthogonalise(float *P, int rows, int r)
{
        for (int t = 0; t < r; t++) {
                for (int u = 0; u < t; u++) {
                        double dot = 0;
                        for (int i = 0; i < rows; i++) dot += (double)P[(size_t)i * r + t] * P[(size_t)i * r + u];
                        for (int i = 0; i < rows; i++) P[(size_t)i * r + t] -= (float)dot * P[(size_t)i * r + u];
                }
                double nn = 0;
                for (int i = 0; i < rows; i++) nn += (double)P[(size_t)i * r + t] * P[(size_t)i * r + t];
                float inv = (float)(1.0 / (sqrt(nn) + 1e-8));
                for (int i = 0; i < rows; i++) P[(size_t)i * r + t] *= inv;
        }
}

/* P = M Q (rows x r) for M rows x cols and Q cols x r, row-major; the backend's gemm when there
 * is one (host memory: compression runs only on the cpu path). */
static void mul_mq(dt_backend *be, const float *M, const float *Q, float *P, int rows, int cols, int r)
{
        if (be) {
                be->ops->gemm(be, 0, 0, rows, r, cols, 1.0f, M, cols, Q, r, 0.0f, P, r);
                return;
        }
        for (int i = 0; i < rows; i++) {
                float acc[64] = { 0 };
                const float *mi = M + (size_t)i * cols;
                for (int k = 0; k < cols; k++)
                        for (int t = 0; t < r; t++) acc[t] += mi[k] * Q[(size_t)k * r + t];
                memcpy(P + (size_t)i * r, acc, (size_t)r * sizeof *acc);
        }
}

/* Q = M^T P (cols x r). */
static void mul_mtp(dt_backend *be, const float *M, const float *P, float *Q, int rows, int cols, int r)
{
        if (be) {
                be->ops->gemm(be, 1, 0, cols, r, rows, 1.0f, M, cols, P, r, 0.0f, Q, r);
                return;
        }
        memset(Q, 0, (size_t)cols * (size_t)r * sizeof *Q);
        for (int i = 0; i < rows; i++) {
                const float *mi = M + (size_t)i * cols, *pi = P + (size_t)i * r;
                for (int k = 0; k < cols; k++)
                        for (int t = 0; t < r; t++) Q[(size_t)k * r + t] += mi[k] * pi[t];
        }
}

/* grad = P Q^T (the summed approximation); res = M - grad / ranks (M is in res on entry). */
static void decode(dt_backend *be, const float *P, const float *Q, float *grad, float *res, int rows, int cols,
                   int r, float inv_ranks)
{
        if (be) {
                be->ops->gemm(be, 0, 1, rows, cols, r, 1.0f, P, r, Q, r, 0.0f, grad, cols);
                size_t n = (size_t)rows * (size_t)cols;
                for (size_t e = 0; e < n; e++) res[e] -= grad[e] * inv_ranks;
                return;
        }
        for (int i = 0; i < rows; i++) {
                const float *pi = P + (size_t)i * r;
                for (int k = 0; k < cols; k++) {
                        float a = 0;
                        for (int t = 0; t < r; t++) a += pi[t] * Q[(size_t)k * r + t];
                        size_t e = (size_t)i * cols + k;
                        grad[e] = a;
                        res[e] -= a * inv_ranks;
                }
        }
}

static void psgd_finish(dt_cx *c, void *st, int j)
{
        psgd_st *s = st;
        int r = s->r;
        const dt_bucket *b = &c->b[j];
        float *g = c->g->grads;
        double t0 = dt_now();
        size_t np = 0, nq = 0;
        for (int m = s->first[j]; m < s->first[j + 1]; m++) {
                const psgd_mat *x = &s->m[m];
                size_t n = (size_t)x->rows * (size_t)x->cols;
                for (size_t i = 0; i < n; i++) s->res[x->off + i] += g[x->off + i];
                mul_mq(c->g->be, s->res + x->off, s->qstate + x->q, s->pbuf + x->p, x->rows, x->cols, r);
                np += (size_t)x->rows * (size_t)r;
        }
        c->t_encode += dt_now() - t0;
        if (np) dt_comm_allreduce(c->comm, s->pbuf, (long)np, MPI_FLOAT, "powersgd P allreduce");
        t0 = dt_now();
        for (int m = s->first[j]; m < s->first[j + 1]; m++) {
                const psgd_mat *x = &s->m[m];
                orthogonalise(s->pbuf + x->p, x->rows, r);
                mul_mtp(c->g->be, s->res + x->off, s->pbuf + x->p, s->qbuf + nq, x->rows, x->cols, r);
                nq += (size_t)x->cols * (size_t)r;
        }
        size_t nd = nq;
        for (size_t i = b->off; i < b->off + b->len; i++)
                if (s->dense[i]) s->qbuf[nd++] = g[i];
        c->t_encode += dt_now() - t0;
        dt_comm_allreduce(c->comm, s->qbuf, (long)nd, MPI_FLOAT, "powersgd Q allreduce");
        t0 = dt_now();
        float inv = 1.0f / (float)c->comm->size;
        nq = 0;
        for (int m = s->first[j]; m < s->first[j + 1]; m++) {
                const psgd_mat *x = &s->m[m];
                float *q = s->qstate + x->q;
                memcpy(q, s->qbuf + nq, (size_t)x->cols * (size_t)r * sizeof *q);
                nq += (size_t)x->cols * (size_t)r;
                decode(c->g->be, s->pbuf + x->p, q, g + x->off, s->res + x->off, x->rows, x->cols, r, inv);
        }
        for (size_t i = b->off, k = nq; i < b->off + b->len; i++)
                if (s->dense[i]) g[i] = s->qbuf[k++];
        c->t_encode += dt_now() - t0;
        c->sent += (long)((np + nd) * sizeof(float));
}

static void psgd_free(void *st)
{
        psgd_st *s = st;
        free(s->m);
        free(s->first);
        free(s->dense);
        free(s->res);
        free(s->qstate);
        free(s->pbuf);
        free(s->qbuf);
        free(s);
}

static void psgd_state(dt_cx *c, void *st, dt_cx_state *out)
{
        psgd_st *s = st;
        size_t nq = 0;
        for (int m = 0; m < s->nm; m++) nq += (size_t)s->m[m].cols * (size_t)s->r;
        *out = (dt_cx_state){ .res = s->res, .nres = c->g->nparams, .shared = nq ? s->qstate : NULL, .nshared = nq };
}

const dt_cx_ops dt_cx_powersgd = { psgd_init, NULL, psgd_finish, psgd_free, psgd_state };
