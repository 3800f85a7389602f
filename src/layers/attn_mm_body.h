/* layers/attn_mm_body.h - attn_mm.h's kernel, included once per CPU path by attn_mm.c with MM_VB
 * (vector bytes), MM_MR (rows), MM_FMA(a, b, c), MM_SPLAT(x) and MM_NAME(x) set: MR rows x 2
 * vectors of C held in registers while p runs; B^T packed 2 vectors wide so every product reads B
 * by rows, a VL x VL block at a time through MM_PACKT(src, lds, dst, ldd) where the path has one
 * (dst[q ldd + r] = src[r lds + q]; a copy, so the bits do not depend on it). It undefines those
 * at its end. */
#define MM_VL (MM_VB / 4)
#define MM_NR (2 * MM_VL)

typedef float MM_NAME(v) __attribute__((vector_size(MM_VB)));

static inline MM_NAME(v) MM_NAME(ld)(const float *p)
{
        MM_NAME(v) x;
        memcpy(&x, p, sizeof x);
        return x;
}

/* the sum's range for rows [i0, i1) under p->tri */
static inline void MM_NAME(krange)(const dt_attn_mm *p, int i0, int i1, int *kb, int *ke)
{
        *kb = p->tri == DT_MM_KGE ? i0 : 0;
        *ke = p->tri == DT_MM_KLE && i1 < p->k ? i1 : p->k;
}

/* C(i0..i0+MR-1, j0..j0+NR) from bp: B(p, j0 + jj) at bp[p ldb + jj] */
static void MM_NAME(block)(const dt_attn_mm *p, int i0, int j0, const float *bp, size_t ldb)
{
        typedef MM_NAME(v) V;
        V c[MM_MR][2];
        const size_t ars = p->ars, acs = p->acs;
#pragma GCC unroll 16
        for (int r = 0; r < MM_MR; r++) c[r][0] = c[r][1] = (V){ 0 };
        int kb, ke;
        MM_NAME(krange)(p, i0, i0 + MM_MR, &kb, &ke);
        const float *a = p->a + (size_t)i0 * ars;
        for (int q = kb; q < ke; q++) {
                const float *br = bp + (size_t)q * ldb, *ar = a + (size_t)q * acs;
                V b0 = MM_NAME(ld)(br), b1 = MM_NAME(ld)(br + MM_VL);
#pragma GCC unroll 16
                for (int r = 0; r < MM_MR; r++) {
                        V x = MM_SPLAT(ar[r * ars]);
                        c[r][0] = MM_FMA(x, b0, c[r][0]);
                        c[r][1] = MM_FMA(x, b1, c[r][1]);
                }
        }
#pragma GCC unroll 16
        for (int r = 0; r < MM_MR; r++)
                for (int h = 0; h < 2; h++) {
                        float *o = p->c + (size_t)(i0 + r) * p->ldc + j0 + h * MM_VL;
                        V x = c[r][h] * p->alpha;
                        if (p->beta != 0.0f) x += MM_NAME(ld)(o);
                        memcpy(o, &x, sizeof x);
                }
}

/* C(i, j) one at a time: the rows and columns the blocks leave */
static void MM_NAME(one)(const dt_attn_mm *p, int i, int j)
{
        int kb, ke;
        MM_NAME(krange)(p, i, i + 1, &kb, &ke);
        float s = 0;
        for (int q = kb; q < ke; q++) {
                float b = p->bt ? p->b[(size_t)j * p->ldb + q] : p->b[(size_t)q * p->ldb + j];
                s += p->a[(size_t)i * p->ars + (size_t)q * p->acs] * b;
        }
        float *c = p->c + (size_t)i * p->ldc + j;
        *c = p->alpha * s + (p->beta != 0.0f ? *c : 0.0f);
}

static void MM_NAME(mm)(const dt_attn_mm *p)
{
        float pk[DT_MM_KMAX * MM_NR];
        const int m4 = p->m - p->m % MM_MR, nn = p->n - p->n % MM_NR;
        for (int j0 = 0; j0 < nn; j0 += MM_NR) {
                const float *bp = p->b + j0;
                size_t ldb = p->ldb;
                if (p->bt) {
                        int q0 = 0;
#ifdef MM_PACKT
                        for (; q0 + MM_VL <= p->k; q0 += MM_VL)
                                for (int h = 0; h < 2; h++)
                                        MM_PACKT(p->b + (size_t)(j0 + h * MM_VL) * p->ldb + q0, p->ldb,
                                                 pk + (size_t)q0 * MM_NR + h * MM_VL, MM_NR);
#endif
                        for (int jj = 0; jj < MM_NR; jj++) {
                                const float *br = p->b + (size_t)(j0 + jj) * p->ldb;
                                for (int q = q0; q < p->k; q++) pk[q * MM_NR + jj] = br[q];
                        }
                        bp = pk, ldb = MM_NR;
                }
                /* rows above j0 want none of these columns: the causal scores' upper tiles */
                int ib = p->tri == DT_MM_JLE ? j0 - j0 % MM_MR : 0;
                for (int i0 = ib; i0 < m4; i0 += MM_MR) MM_NAME(block)(p, i0, j0, bp, ldb);
                for (int i = m4 > ib ? m4 : ib; i < p->m; i++)
                        for (int j = j0; j < j0 + MM_NR; j++) MM_NAME(one)(p, i, j);
        }
        for (int i = 0; i < p->m; i++)
                for (int j = nn; j < p->n; j++) MM_NAME(one)(p, i, j);
}

static const dt_attn_mm_kern MM_NAME(k) = { .mm = MM_NAME(mm) };

#undef MM_VL
#undef MM_NR
/* the includer's parameters too, so the next variant defines its own */
#undef MM_VB
#undef MM_MR
#undef MM_SPLAT
#undef MM_FMA
#undef MM_NAME
#undef MM_PACKT
