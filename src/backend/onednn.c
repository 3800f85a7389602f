/* backend/onednn.c - conv forward, backward-data and backward-weights through oneDNN's C API for the
 * cpu backend (contract in onednn.h): libdnnl loaded at first use, one set of primitives per
 * sub-batch size, created once and kept, per-thread copies in the formats oneDNN chose.
 *
 * Why dlopen and not a link: libdnnl (40 MB) brings libstdc++, libgomp and libOpenCL; linked in,
 * every dtrain start (--version, check, an MLP run) would map them (~2 ms, 5 MB resident measured).
 *
 * Why oneDNN runs on one thread per call: Debian's libdnnl is the OpenMP build. Its own team would
 * be a second set of threads beside the backend's pool, and libgomp's idle threads spin after each
 * region (the wait policy is read once, before main) on cores the pool needs. Instead each of the
 * pool's threads calls oneDNN on its own samples with omp_set_num_threads(1), which oneDNN also
 * reads when it plans a primitive: no OpenMP team ever forms, nothing oversubscribes under mpirun,
 * and the per-thread weight gradients are added in thread order by the layer, as with im2col.
 * Measured on the 2-core AVX-512 machine this ran at least as fast as oneDNN's own 2-thread team.
 *
 * Formats: the primitives are created with format 'any' and oneDNN picks its blocked layouts
 * (nChw16c, OIhw16i16o ...); x, dy and the weights are reordered into them per call and y, dx and
 * dW back. Measured on cnn's conv2 (2 threads, reorders included): 200-290 GFLOP/s blocked against
 * ~100 with plain NCHW, where oneDNN falls back to its own im2col + GEMM. One exception: backward-
 * data into a single input channel (C = 1, a first layer's shape) ran 2x slower blocked than
 * plain, so there dx stays NCHW; with C = 6 (lenet's conv2) blocked was 1.5x faster.
 *
 * Chunks: a call takes a chunk of the thread's samples (dt_onednn_conv_chunk) whose blocked x and
 * y fit in dt_onednn_chunk_bytes, so that the copies stay in the core's cache between the
 * conversions and the convolution. Measured on cnn-bn at batch 256: budgets of 0.5-2 MiB (the
 * core's L2 is 2 MiB) ran the first layer 1.5-2x faster than one call for a thread's 128 samples,
 * and the other layers as fast. */
#include "backend/onednn.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "config.h"
#include "util/common.h"

size_t dt_onednn_chunk_bytes = (size_t)1 << 20;

#ifndef DT_HAVE_ONEDNN

int dt_onednn_available(const char **why)
{
        *why = "this dtrain was built without oneDNN (install libdnnl-dev and run configure again)";
        return 0;
}
const char *dt_onednn_version(void) { return ""; }
dt_onednn_conv *dt_onednn_conv_new(const dt_conv_desc *d, int bias, int relu, int max_mb, int nt, const char **why)
{
        (void)d; (void)bias; (void)relu; (void)max_mb; (void)nt;
        dt_onednn_available(why);
        return NULL;
}
void dt_onednn_conv_free(dt_onednn_conv *c) { (void)c; }
void dt_onednn_conv_fwd(dt_onednn_conv *c, int t, const float *x, const float *w, const float *b, float *y, int mb)
{
        (void)c; (void)t; (void)x; (void)w; (void)b; (void)y; (void)mb;
        DT_ASSERT(!"oneDNN is not built in");
}
void dt_onednn_conv_bwd(dt_onednn_conv *c, int t, const float *x, const float *w, const float *dy, float *dx,
                        float *dw, float *db, int mb)
{
        (void)c; (void)t; (void)x; (void)w; (void)dy; (void)dx; (void)dw; (void)db; (void)mb;
        DT_ASSERT(!"oneDNN is not built in");
}
void dt_onednn_conv_forget(dt_onednn_conv *c) { (void)c; }
const char *dt_onednn_conv_impl(const dt_onednn_conv *c) { (void)c; return ""; }
int dt_onednn_conv_chunk(const dt_onednn_conv *c) { (void)c; return 1; }

#else

#include <dlfcn.h>
#include <pthread.h>
#include <dnnl.h>
#include <dnnl_debug.h>

/* ---- the library, loaded once ---- */

#define DNNL_FNS(X) \
        X(dnnl_version) X(dnnl_status2str) X(dnnl_engine_create) X(dnnl_stream_create) X(dnnl_stream_destroy) \
        X(dnnl_memory_desc_init_by_tag) X(dnnl_memory_desc_equal) X(dnnl_memory_desc_get_size) \
        X(dnnl_memory_create) X(dnnl_memory_destroy) \
        X(dnnl_dilated_convolution_forward_desc_init) X(dnnl_dilated_convolution_backward_data_desc_init) \
        X(dnnl_dilated_convolution_backward_weights_desc_init) X(dnnl_reorder_primitive_desc_create) \
        X(dnnl_primitive_desc_create) X(dnnl_primitive_desc_destroy) X(dnnl_primitive_desc_query) \
        X(dnnl_primitive_desc_query_md) X(dnnl_primitive_create) X(dnnl_primitive_destroy) \
        X(dnnl_primitive_execute) X(dnnl_primitive_get_primitive_desc) X(dnnl_primitive_attr_create) \
        X(dnnl_primitive_attr_destroy) X(dnnl_primitive_attr_set_scratchpad_mode) \
        X(dnnl_primitive_attr_set_post_ops) X(dnnl_post_ops_create) X(dnnl_post_ops_destroy) \
        X(dnnl_post_ops_append_eltwise) X(dnnl_post_ops_append_sum)

static struct {
        pthread_once_t once;
        int ok;
        char why[512];
        char version[32];
        void *h;
        dnnl_engine_t eng;
        void (*omp_set_num_threads)(int);
#define FN_PTR(f) __typeof__(f) *f;
        DNNL_FNS(FN_PTR)
#undef FN_PTR
} L = { .once = PTHREAD_ONCE_INIT };

#define D(f) (L.f)

static void load(void)
{
        char so[32];
        snprintf(so, sizeof so, "libdnnl.so.%d", DNNL_VERSION_MAJOR);
        L.h = dlopen(so, RTLD_NOW | RTLD_LOCAL);
        if (!L.h) {
                snprintf(L.why, sizeof L.why, "cannot load oneDNN (%s): %s", so, dlerror());
                return;
        }
#define FN_SYM(f) if (!(*(void **)&L.f = dlsym(L.h, #f))) { \
                snprintf(L.why, sizeof L.why, "%s lacks %s: not the oneDNN %d.x this dtrain was built for", \
                         so, #f, DNNL_VERSION_MAJOR); \
                return; }
        DNNL_FNS(FN_SYM)
#undef FN_SYM
        const dnnl_version_t *v = L.dnnl_version();
        snprintf(L.version, sizeof L.version, "%d.%d.%d", v->major, v->minor, v->patch);
        if (v->cpu_runtime == DNNL_RUNTIME_OMP) {
                /* libgomp, which libdnnl pulled in: found through the library's own dependencies */
                *(void **)&L.omp_set_num_threads = dlsym(L.h, "omp_set_num_threads");
                if (!L.omp_set_num_threads) {
                        snprintf(L.why, sizeof L.why, "oneDNN %s is an OpenMP build but omp_set_num_threads "
                                 "is not found", L.version);
                        return;
                }
        } else if (v->cpu_runtime != DNNL_RUNTIME_SEQ && v->cpu_runtime != DNNL_RUNTIME_THREADPOOL) {
                /* TBB: its threads cannot be limited per calling thread through the C API */
                snprintf(L.why, sizeof L.why, "oneDNN %s uses a threading runtime (%#x) dtrain cannot hold to "
                         "one thread per call; an OpenMP or sequential build is needed", L.version, v->cpu_runtime);
                return;
        }
        dnnl_status_t s = L.dnnl_engine_create(&L.eng, dnnl_cpu, 0);
        if (s != dnnl_success) {
                snprintf(L.why, sizeof L.why, "oneDNN %s: no CPU engine: %s", L.version, L.dnnl_status2str(s));
                return;
        }
        L.ok = 1;
}

int dt_onednn_available(const char **why)
{
        pthread_once(&L.once, load);
        if (!L.ok) *why = L.why;
        return L.ok;
}

const char *dt_onednn_version(void)
{
        const char *why;
        return dt_onednn_available(&why) ? L.version : "";
}

/* Every thread that calls oneDNN does so with one OpenMP thread (see the top). */
static _Thread_local int omp_one;
static void one_thread(void)
{
        if (omp_one) return;
        if (L.omp_set_num_threads) L.omp_set_num_threads(1);
        omp_one = 1;
}

#define CK(call) do { dnnl_status_t s_ = (call); \
        if (s_ != dnnl_success) dt_die(DT_EXIT_RUNTIME, "oneDNN: %s: %s (%s:%d)", #call, D(dnnl_status2str)(s_), \
                                       __FILE__, __LINE__); } while (0)

/* ---- one convolution ---- */

enum { FWD = 1, BWDD = 2, BWDW = 4 };

/* A reorder between two formats (NULL when they are the same and nothing is added). */
typedef struct reorder { dnnl_primitive_t p; size_t scratch; } reorder;

/* The primitives for one sub-batch size, made as they are first needed (a forward-only use makes
 * no backward ones). Memory descriptors: the plain ones (x, y NCHW; w OIHW or GOIHW) and the ones
 * each primitive chose. */
struct set {
        int mb;
        unsigned have;                  /* FWD | BWDD | BWDW made */
        dnnl_memory_desc_t px, py;
        dnnl_primitive_desc_t fpd;      /* the forward's, the hint the backward ones need */
        dnnl_primitive_t fwd, bwdd, bwdw;
        dnnl_memory_desc_t f_x, f_w, f_y;       /* forward: src, weights, dst */
        dnnl_memory_desc_t d_dy, d_w, d_dx;     /* backward-data: diff_dst, weights, diff_src */
        dnnl_memory_desc_t w_x, w_dy, w_dw;     /* backward-weights: src, diff_dst, diff_weights */
        reorder r_fx, r_fw, r_fy, r_ddy, r_dw, r_ddx, r_wx, r_wdy, r_wdw;
        size_t scratch;                 /* the largest scratchpad of the primitives above */
        struct set *next;
};

enum { B_X, B_Y, B_FW, B_DY, B_DW, B_DX, B_WX, B_WDY, B_WDW, B_DB, B_SCRATCH, NBUF };

/* A copy of the weights in one format, made from 'of' since the last dt_onednn_conv_forget. */
struct wcopy {
        const float *of;                /* NULL: none */
        dnnl_memory_desc_t md;
};

/* Thread t's buffers (grown as needed) and stream. x_of/x_mb/x_set: B_X (or x itself, when the
 * forward takes plain x) holds those samples in x_set's forward format. wf, wd: B_FW and B_DW hold
 * the weights in a forward's and a backward-data's format (chunks of one pass share them). */
struct tbuf {
        dnnl_stream_t st;
        void *b[NBUF];
        size_t cap[NBUF];
        const float *x_of;
        int x_mb;
        const struct set *x_set;
        struct wcopy wf, wd;
};

struct dt_onednn_conv {
        dt_conv_desc d;
        int bias, relu, nt;
        int chunk;                      /* samples per call (dt_onednn_conv_chunk) */
        dnnl_memory_desc_t pw, pb;      /* plain weights and bias */
        pthread_mutex_t mu;             /* guards the list of sets */
        struct set *sets;
        struct tbuf *tb;
        char impl[128];
};

static void *tbuf_get(struct tbuf *tb, int k, size_t bytes)
{
        if (tb->cap[k] < bytes) {
                free(tb->b[k]);
                tb->b[k] = dt_falloc((bytes + sizeof(float) - 1) / sizeof(float));
                tb->cap[k] = bytes;
        }
        return tb->b[k];
}

static void md_plain(dnnl_memory_desc_t *md, int n, const dnnl_dim_t *dims, dnnl_format_tag_t tag)
{
        dnnl_dims_t d;
        for (int i = 0; i < n; i++) d[i] = dims[i];
        CK(D(dnnl_memory_desc_init_by_tag)(md, n, d, dnnl_f32, tag));
}

static dnnl_primitive_attr_t attr_new(int relu, int sum)
{
        dnnl_primitive_attr_t a;
        CK(D(dnnl_primitive_attr_create)(&a));
        CK(D(dnnl_primitive_attr_set_scratchpad_mode)(a, dnnl_scratchpad_mode_user));
        if (relu || sum) {
                dnnl_post_ops_t po;
                CK(D(dnnl_post_ops_create)(&po));
                if (sum) CK(D(dnnl_post_ops_append_sum)(po, 1.0f));
                if (relu) CK(D(dnnl_post_ops_append_eltwise)(po, 1.0f, dnnl_eltwise_relu, 0.0f, 0.0f));
                CK(D(dnnl_primitive_attr_set_post_ops)(a, po));
                D(dnnl_post_ops_destroy)(po);
        }
        return a;
}

static size_t scratch_of(const_dnnl_primitive_desc_t pd)
{
        const dnnl_memory_desc_t *md = D(dnnl_primitive_desc_query_md)(pd, dnnl_query_scratchpad_md, 0);
        return md ? D(dnnl_memory_desc_get_size)(md) : 0;
}

static const dnnl_memory_desc_t *md_of(const_dnnl_primitive_desc_t pd, dnnl_query_t what)
{
        return D(dnnl_primitive_desc_query_md)(pd, what, 0);
}

/* to = from (+ to, when sum); no primitive when the formats are equal and nothing is added */
static void reorder_make(reorder *r, const dnnl_memory_desc_t *from, const dnnl_memory_desc_t *to, int sum)
{
        r->p = NULL;
        r->scratch = 0;
        if (!sum && D(dnnl_memory_desc_equal)(from, to)) return;
        dnnl_primitive_attr_t a = attr_new(0, sum);
        dnnl_primitive_desc_t pd;
        CK(D(dnnl_reorder_primitive_desc_create)(&pd, from, L.eng, to, L.eng, a));
        D(dnnl_primitive_attr_destroy)(a);
        r->scratch = scratch_of(pd);
        CK(D(dnnl_primitive_create)(&r->p, pd));
        D(dnnl_primitive_desc_destroy)(pd);
}

static void reorder_free(reorder *r)
{
        if (r->p) D(dnnl_primitive_destroy)(r->p);
        r->p = NULL;
}

/* Runs a primitive on pointers: the memory objects are made for the call (a few hundred bytes
 * each, microseconds against the milliseconds of a convolution). */
typedef struct { int arg; const dnnl_memory_desc_t *md; const void *p; } arg;

static void exec(struct tbuf *tb, dnnl_primitive_t p, size_t scratch, const arg *a, int n)
{
        dnnl_exec_arg_t ea[8];
        dnnl_memory_desc_t smd;
        int k = 0;
        for (int i = 0; i < n; i++) {
                if (!a[i].p) continue;  /* an optional argument left out (no bias) */
                ea[k].arg = a[i].arg;
                CK(D(dnnl_memory_create)(&ea[k].memory, a[i].md, L.eng, (void *)a[i].p));
                k++;
        }
        if (scratch) {
                dnnl_dims_t sd = { (dnnl_dim_t)scratch };
                CK(D(dnnl_memory_desc_init_by_tag)(&smd, 1, sd, dnnl_u8, dnnl_x));
                ea[k].arg = DNNL_ARG_SCRATCHPAD;
                CK(D(dnnl_memory_create)(&ea[k].memory, &smd, L.eng, tbuf_get(tb, B_SCRATCH, scratch)));
                k++;
        }
        CK(D(dnnl_primitive_execute)(p, tb->st, k, ea));
        for (int i = 0; i < k; i++) D(dnnl_memory_destroy)(ea[i].memory);
}

static void reorder_run(struct tbuf *tb, const reorder *r, const dnnl_memory_desc_t *from, const void *src,
                        const dnnl_memory_desc_t *to, void *dst)
{
        const arg a[] = { { DNNL_ARG_FROM, from, src }, { DNNL_ARG_TO, to, dst } };
        exec(tb, r->p, r->scratch, a, 2);
}

/* src in the format 'to' wants: src itself when no reorder is needed, else a copy in buffer k */
static const void *in_format(struct tbuf *tb, const reorder *r, const dnnl_memory_desc_t *from, const void *src,
                             const dnnl_memory_desc_t *to, int k)
{
        if (!r->p) return src;
        void *d = tbuf_get(tb, k, D(dnnl_memory_desc_get_size)(to));
        reorder_run(tb, r, from, src, to, d);
        return d;
}

/* The weights in format 'to': the copy in buffer k when it is of w in that format, else made. */
static const void *weights_in(struct tbuf *tb, struct wcopy *wc, const reorder *r, const dnnl_memory_desc_t *pw,
                              const float *w, const dnnl_memory_desc_t *to, int k)
{
        if (!r->p) return w;
        if (wc->of == w && D(dnnl_memory_desc_equal)(&wc->md, to)) return tb->b[k];
        const void *c = in_format(tb, r, pw, w, to, k);
        wc->of = w;
        wc->md = *to;
        return c;
}

static void conv_dims(const dt_conv_desc *d, dnnl_dims_t st, dnnl_dims_t dil, dnnl_dims_t pl, dnnl_dims_t pr)
{
        st[0] = d->SH; st[1] = d->SW;
        dil[0] = d->DH - 1; dil[1] = d->DW - 1;         /* oneDNN counts the gaps */
        pl[0] = d->pt; pl[1] = d->pl;
        pr[0] = d->pb; pr[1] = d->pr;                   /* floor division: extra padding is allowed */
}

static size_t grow_scratch(struct set *s, size_t n)
{
        if (n > s->scratch) s->scratch = n;
        return n;
}

/* The primitive of descriptor cd (its scratch counted in s); 0, or -1 with 'what' in *why when
 * oneDNN has no implementation for it. */
static int prim_make(struct set *s, const dnnl_convolution_desc_t *cd, int relu, const_dnnl_primitive_desc_t hint,
                     dnnl_primitive_desc_t *pd, dnnl_primitive_t *prim, const char *what, const char **why)
{
        dnnl_primitive_attr_t a = attr_new(relu, 0);
        dnnl_status_t rc = D(dnnl_primitive_desc_create)(pd, cd, a, L.eng, hint);
        D(dnnl_primitive_attr_destroy)(a);
        if (rc != dnnl_success) {
                *why = what;
                return -1;
        }
        grow_scratch(s, scratch_of(*pd));
        CK(D(dnnl_primitive_create)(prim, *pd));
        return 0;
}

/* A reorder between the plain and the primitive's layout, its scratch counted in s. */
static void set_reorder(struct set *s, reorder *r, const dnnl_memory_desc_t *from, const dnnl_memory_desc_t *to, int sum)
{
        reorder_make(r, from, to, sum);
        grow_scratch(s, r->scratch);
}

/* Makes the primitives of 'need' that s lacks. Returns 0, or -1 with the status of the creation
 * that failed (an implementation oneDNN lacks) in *why. */
static int set_make(dt_onednn_conv *c, struct set *s, unsigned need, const char **why)
{
        const dt_conv_desc *d = &c->d;
        dnnl_dims_t st, dil, pl, pr;
        conv_dims(d, st, dil, pl, pr);
        dnnl_memory_desc_t ax, ay, aw;
        const dnnl_dim_t xd[] = { s->mb, d->C, d->H, d->W }, yd[] = { s->mb, d->F, d->OH, d->OW };
        md_plain(&ax, 4, xd, dnnl_format_tag_any);
        md_plain(&ay, 4, yd, dnnl_format_tag_any);
        CK(D(dnnl_memory_desc_init_by_tag)(&aw, c->pw.ndims, c->pw.dims, dnnl_f32, dnnl_format_tag_any));
        dnnl_convolution_desc_t cd;
        dnnl_primitive_desc_t pd;
        if (!(s->have & FWD)) {
                CK(D(dnnl_dilated_convolution_forward_desc_init)(&cd, dnnl_forward_training, dnnl_convolution_direct,
                                                                 &ax, &aw, c->bias ? &c->pb : NULL, &ay, st, dil, pl, pr));
                if (prim_make(s, &cd, c->relu, NULL, &s->fpd, &s->fwd, "oneDNN has no forward convolution for this shape",
                              why))
                        return -1;
                s->f_x = *md_of(s->fpd, dnnl_query_src_md);
                s->f_w = *md_of(s->fpd, dnnl_query_weights_md);
                s->f_y = *md_of(s->fpd, dnnl_query_dst_md);
                set_reorder(s, &s->r_fx, &s->px, &s->f_x, 0);
                set_reorder(s, &s->r_fw, &c->pw, &s->f_w, 0);
                set_reorder(s, &s->r_fy, &s->f_y, &s->py, 0);
                s->have |= FWD;
        }
        if ((need & BWDD) && !(s->have & BWDD)) {
                dnnl_memory_desc_t dx = ax;
                if (d->C == 1) dx = s->px;
                CK(D(dnnl_dilated_convolution_backward_data_desc_init)(&cd, dnnl_convolution_direct, &dx, &aw, &ay,
                                                                       st, dil, pl, pr));
                if (prim_make(s, &cd, 0, s->fpd, &pd, &s->bwdd, "oneDNN has no backward-data convolution for this shape",
                              why))
                        return -1;
                s->d_dy = *md_of(pd, dnnl_query_diff_dst_md);
                s->d_w = *md_of(pd, dnnl_query_weights_md);
                s->d_dx = *md_of(pd, dnnl_query_diff_src_md);
                D(dnnl_primitive_desc_destroy)(pd);
                set_reorder(s, &s->r_ddy, &s->py, &s->d_dy, 0);
                set_reorder(s, &s->r_dw, &c->pw, &s->d_w, 0);
                set_reorder(s, &s->r_ddx, &s->d_dx, &s->px, 0);
                s->have |= BWDD;
        }
        if ((need & BWDW) && !(s->have & BWDW)) {
                CK(D(dnnl_dilated_convolution_backward_weights_desc_init)(&cd, dnnl_convolution_direct, &ax, &aw,
                                                                          c->bias ? &c->pb : NULL, &ay, st, dil, pl, pr));
                if (prim_make(s, &cd, 0, s->fpd, &pd, &s->bwdw,
                              "oneDNN has no backward-weights convolution for this shape", why))
                        return -1;
                s->w_x = *md_of(pd, dnnl_query_src_md);
                s->w_dy = *md_of(pd, dnnl_query_diff_dst_md);
                s->w_dw = *md_of(pd, dnnl_query_diff_weights_md);
                D(dnnl_primitive_desc_destroy)(pd);
                set_reorder(s, &s->r_wx, &s->px, &s->w_x, 0);
                set_reorder(s, &s->r_wdy, &s->py, &s->w_dy, 0);
                set_reorder(s, &s->r_wdw, &s->w_dw, &c->pw, 1);   /* dW += this call's sum */
                s->have |= BWDW;
        }
        return 0;
}

static void set_free(struct set *s)
{
        reorder *r[] = { &s->r_fx, &s->r_fw, &s->r_fy, &s->r_ddy, &s->r_dw, &s->r_ddx, &s->r_wx, &s->r_wdy, &s->r_wdw };
        for (size_t i = 0; i < sizeof r / sizeof *r; i++) reorder_free(r[i]);
        if (s->fwd) D(dnnl_primitive_destroy)(s->fwd);
        if (s->bwdd) D(dnnl_primitive_destroy)(s->bwdd);
        if (s->bwdw) D(dnnl_primitive_destroy)(s->bwdw);
        if (s->fpd) D(dnnl_primitive_desc_destroy)(s->fpd);
        free(s);
}

static struct set *set_new(const dt_onednn_conv *c, int mb)
{
        struct set *s = dt_calloc(1, sizeof *s);
        s->mb = mb;
        const dnnl_dim_t xd[] = { mb, c->d.C, c->d.H, c->d.W }, yd[] = { mb, c->d.F, c->d.OH, c->d.OW };
        md_plain(&s->px, 4, xd, dnnl_nchw);
        md_plain(&s->py, 4, yd, dnnl_nchw);
        return s;
}

/* The set for mb samples with the primitives of 'need'; made under the lock the first time. */
static struct set *set_for(dt_onednn_conv *c, int mb, unsigned need)
{
        pthread_mutex_lock(&c->mu);
        struct set *s = c->sets;
        while (s && s->mb != mb) s = s->next;
        if (!s) {
                s = set_new(c, mb);
                s->next = c->sets;
                c->sets = s;
        }
        const char *why;
        if ((need & ~s->have) && set_make(c, s, need, &why) < 0)
                dt_die(DT_EXIT_RUNTIME, "oneDNN: %s (%d samples; other batch sizes had one)", why, mb);
        pthread_mutex_unlock(&c->mu);
        return s;
}

static const char *impl_of(dnnl_primitive_t p)
{
        const_dnnl_primitive_desc_t pd;
        const char *s = "?";
        if (D(dnnl_primitive_get_primitive_desc)(p, &pd) == dnnl_success &&
            D(dnnl_primitive_desc_query)(pd, dnnl_query_impl_info_str, 0, &s) != dnnl_success)
                s = "?";
        return s;
}

dt_onednn_conv *dt_onednn_conv_new(const dt_conv_desc *d, int bias, int relu, int max_mb, int nt, const char **why)
{
        if (!dt_onednn_available(why)) return NULL;
        one_thread();
        dt_onednn_conv *c = dt_calloc(1, sizeof *c);
        c->d = *d;
        c->d.state = NULL;
        c->bias = bias;
        c->relu = relu;
        c->nt = nt < 1 ? 1 : nt;
        pthread_mutex_init(&c->mu, NULL);
        if (d->G > 1) {
                const dnnl_dim_t wd[] = { d->G, d->F / d->G, d->C / d->G, d->KH, d->KW };
                md_plain(&c->pw, 5, wd, dnnl_goihw);
        } else {
                const dnnl_dim_t wd[] = { d->F, d->C, d->KH, d->KW };
                md_plain(&c->pw, 4, wd, dnnl_oihw);
        }
        const dnnl_dim_t bd[] = { d->F };
        md_plain(&c->pb, 1, bd, dnnl_x);
        c->tb = dt_calloc((size_t)c->nt, sizeof *c->tb);
        /* a call's blocked x and y (channels padded to 16) within dt_onednn_chunk_bytes */
        size_t per = ((size_t)(d->C + 15) / 16 * 16 * d->H * d->W + (size_t)(d->F + 15) / 16 * 16 * d->OH * d->OW) *
                     sizeof(float);
        size_t ch = dt_onednn_chunk_bytes / per;
        c->chunk = ch < 1 ? 1 : ch > (size_t)max_mb ? (max_mb < 1 ? 1 : max_mb) : (int)ch;
        for (int t = 0; t < c->nt; t++) CK(D(dnnl_stream_create)(&c->tb[t].st, L.eng, dnnl_stream_default_flags));
        /* every direction at the usual sub-batch size now: a shape oneDNN cannot run is refused
         * here, at setup, where the layer can still take im2col */
        struct set *s = set_new(c, c->chunk);
        c->sets = s;
        if (set_make(c, s, FWD | BWDD | BWDW, why) < 0) {
                dt_onednn_conv_free(c);
                return NULL;
        }
        const char *f = impl_of(s->fwd), *bd_ = impl_of(s->bwdd), *bw = impl_of(s->bwdw);
        if (!strcmp(f, bd_) && !strcmp(f, bw)) snprintf(c->impl, sizeof c->impl, "%s", f);
        else snprintf(c->impl, sizeof c->impl, "%s, data %s, weights %s", f, bd_, bw);
        return c;
}

void dt_onednn_conv_free(dt_onednn_conv *c)
{
        if (!c) return;
        while (c->sets) {
                struct set *n = c->sets->next;
                set_free(c->sets);
                c->sets = n;
        }
        for (int t = 0; t < c->nt; t++) {
                if (c->tb[t].st) D(dnnl_stream_destroy)(c->tb[t].st);
                for (int k = 0; k < NBUF; k++) free(c->tb[t].b[k]);
        }
        free(c->tb);
        pthread_mutex_destroy(&c->mu);
        free(c);
}

const char *dt_onednn_conv_impl(const dt_onednn_conv *c)
{
        return c->impl;
}

int dt_onednn_conv_chunk(const dt_onednn_conv *c)
{
        return c->chunk;
}

void dt_onednn_conv_forget(dt_onednn_conv *c)
{
        for (int t = 0; t < c->nt; t++) c->tb[t].x_of = c->tb[t].wf.of = c->tb[t].wd.of = NULL;
}

void dt_onednn_conv_fwd(dt_onednn_conv *c, int t, const float *x, const float *w, const float *b, float *y, int mb)
{
        one_thread();
        DT_ASSERT(t >= 0 && t < c->nt && mb > 0);
        struct tbuf *tb = &c->tb[t];
        struct set *s = set_for(c, mb, FWD);
        const void *xs = in_format(tb, &s->r_fx, &s->px, x, &s->f_x, B_X);
        const void *ws = weights_in(tb, &tb->wf, &s->r_fw, &c->pw, w, &s->f_w, B_FW);
        void *yd = s->r_fy.p ? tbuf_get(tb, B_Y, D(dnnl_memory_desc_get_size)(&s->f_y)) : y;
        const arg a[] = { { DNNL_ARG_SRC, &s->f_x, xs }, { DNNL_ARG_WEIGHTS, &s->f_w, ws },
                          { DNNL_ARG_BIAS, &c->pb, c->bias ? b : NULL }, { DNNL_ARG_DST, &s->f_y, yd } };
        exec(tb, s->fwd, s->scratch, a, 4);
        if (s->r_fy.p) reorder_run(tb, &s->r_fy, &s->f_y, yd, &s->py, y);
        tb->x_of = x;
        tb->x_mb = mb;
        tb->x_set = s;
}

void dt_onednn_conv_bwd(dt_onednn_conv *c, int t, const float *x, const float *w, const float *dy, float *dx,
                        float *dw, float *db, int mb)
{
        if (!dx && !dw) return;
        one_thread();
        DT_ASSERT(t >= 0 && t < c->nt && mb > 0);
        struct tbuf *tb = &c->tb[t];
        struct set *s = set_for(c, mb, (dx ? BWDD : 0) | (dw ? BWDW : 0));
        const void *dyd = NULL;
        if (dx) {
                dyd = in_format(tb, &s->r_ddy, &s->py, dy, &s->d_dy, B_DY);
                const void *ws = weights_in(tb, &tb->wd, &s->r_dw, &c->pw, w, &s->d_w, B_DW);
                void *dxd = s->r_ddx.p ? tbuf_get(tb, B_DX, D(dnnl_memory_desc_get_size)(&s->d_dx)) : dx;
                const arg a[] = { { DNNL_ARG_DIFF_DST, &s->d_dy, dyd }, { DNNL_ARG_WEIGHTS, &s->d_w, ws },
                                  { DNNL_ARG_DIFF_SRC, &s->d_dx, dxd } };
                exec(tb, s->bwdd, s->scratch, a, 3);
                if (s->r_ddx.p) reorder_run(tb, &s->r_ddx, &s->d_dx, dxd, &s->px, dx);
        }
        if (!dw) return;
        /* dy in the weights' format: the data half's copy when the formats agree */
        const void *dyw = dyd && D(dnnl_memory_desc_equal)(&s->d_dy, &s->w_dy) ? dyd
                          : in_format(tb, &s->r_wdy, &s->py, dy, &s->w_dy, B_WDY);
        /* x likewise: the forward's copy of the same samples when the formats agree */
        const void *xw;
        if (tb->x_of == x && tb->x_mb == mb && tb->x_set == s && D(dnnl_memory_desc_equal)(&s->f_x, &s->w_x))
                xw = s->r_fx.p ? tb->b[B_X] : x;
        else
                xw = in_format(tb, &s->r_wx, &s->px, x, &s->w_x, B_WX);
        void *dwd = tbuf_get(tb, B_WDW, D(dnnl_memory_desc_get_size)(&s->w_dw));
        float *dbd = c->bias ? tbuf_get(tb, B_DB, (size_t)c->d.F * sizeof(float)) : NULL;
        const arg a[] = { { DNNL_ARG_SRC, &s->w_x, xw }, { DNNL_ARG_DIFF_DST, &s->w_dy, dyw },
                          { DNNL_ARG_DIFF_WEIGHTS, &s->w_dw, dwd }, { DNNL_ARG_DIFF_BIAS, &c->pb, dbd } };
        exec(tb, s->bwdw, s->scratch, a, 4);
        reorder_run(tb, &s->r_wdw, &s->w_dw, dwd, &c->pw, dw);      /* dw += */
        if (db && dbd)
                for (int f = 0; f < c->d.F; f++) db[f] += dbd[f];
}

#endif
