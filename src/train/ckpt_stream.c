/* train/ckpt_stream.c - checkpoints of a run whose ranks hold parts of the model (pipeline stages,
 * tensor shards, partition.shard's parts on the data axis), with the whole on no rank: every rank
 * walks the files' tensors in file order, in the writer's pieces (DT_ST_CHUNK floats), and sends
 * world rank 0 the runs of each piece it holds (a copy held by several ranks is sent by one: tensor
 * member 0, data rank 0); rank 0 puts the piece together and the writer puts it in the file
 * (dt_st_write_stream). No rank holds more than its parts and a piece or two, and the files are the
 * same whole-tensor safetensors any layout resumes from. A resume maps the files, the ranks sum
 * their crc32 together (a share each), and each copies out only what it holds. */
#include "train/trainer.h"

#include <zlib.h>
#include "train/ckpt_stream.h"

#define TAG 0x5c4b      /* TAG: a piece's counts, TAG + 1 its runs, TAG + 2 its values */

/* ---- what this rank holds of a whole tensor ---- */

/* fn(ud, lo, hi, at): whole elements [lo, hi) of the tensor are this rank's at 'at'. */
typedef void (*hold_fn)(void *ud, size_t lo, size_t hi, float *at);

typedef struct holding {
        trainer *t;
        int kind;               /* 0 parameters, 1 buffers, 2 and 3 the moments */
        int sole;               /* one holder per element (a write), else every holder (a read) */
        size_t flat;            /* the tensor's offset in this rank's flat buffers */
        size_t wlo, flo;        /* a tensor run's first whole element and its flat offset */
        hold_fn fn;
        void *ud;
} holding;

/* Tensor x of file 'optim' (ckpt.c's names: "layer.suffix", "layer.suffix.exp_avg[_sq]") in g:
 * layer and parameter index, *kind as in holding; -1 when g has no such tensor. */
static int find(const dt_graph *g, const dt_st_tensor *x, int optim, int *kind, int *li, int *pi)
{
        char name[sizeof x->name];
        snprintf(name, sizeof name, "%s", x->name);
        int k = 0;
        if (optim) {
                char *dot = strrchr(name, '.');
                DT_ASSERT(dot);
                k = !strcmp(dot + 1, "exp_avg_sq");
                *dot = 0;
        }
        if (dt_graph_find_tensor(g, name, li, pi)) return -1;
        *kind = optim ? 2 + k : g->layers[*li].ps[*pi].trainable ? 0 : 1;
        return 0;
}

static void shard_run(void *ud, int owner, size_t lo, size_t hi, size_t cpos)
{
        holding *h = ud;
        trainer *t = h->t;
        if (owner != t->dp.sh.r) return;
        float *at = h->kind == 0 ? t->su.g.params + lo : (h->kind == 2 ? t->mo.m : t->mo.v) + cpos;
        h->fn(h->ud, h->wlo + (lo - h->flo), h->wlo + (hi - h->flo), at);
}

/* A run of this rank's tensor shard: whole [lo, hi) at 'at' in the shard; then the data axis. */
static void tp_run(void *ud, size_t lo, size_t hi, size_t at)
{
        holding *h = ud;
        trainer *t = h->t;
        const dt_shard *sh = &t->dp.sh;
        size_t f = h->flat + at;
        if ((h->kind >= 2 && sh->stage) || (h->kind == 0 && sh->stage == 3)) {   /* parts on the data axis */
                h->wlo = lo;
                h->flo = f;
                dt_shard_parts(sh, f, f + (hi - lo), shard_run, h);
                return;
        }
        const dt_grid *gr = &t->su.grid;
        if (h->sole && dt_grid_replicas(gr) > 1 && gr->data->rank != 0) return;        /* replica 0 speaks */
        float *base = h->kind == 0 ? t->su.g.params : h->kind == 1 ? t->su.g.buffers : h->kind == 2 ? t->mo.m : t->mo.v;
        h->fn(h->ud, lo, hi, base + f);
}

/* The runs of whole elements [p, q) of tensor x (file 'optim') this rank holds, in order. */
static void holds(trainer *t, const dt_st_tensor *x, int optim, size_t p, size_t q, int sole, hold_fn fn, void *ud)
{
        const dt_graph *g = &t->su.g, *W = dt_grid_model(&t->su.grid, g);
        int kind, li, pi, wkind, wli, wpi;
        if (find(g, x, optim, &kind, &li, &pi)) return;        /* another stage's */
        DT_ASSERT(!find(W, x, optim, &wkind, &wli, &wpi));
        const dt_layer *ml = &g->layers[li], *wl = &W->layers[wli];
        const dt_param_spec *ws = &wl->ps[wpi], *ms = &ml->ps[pi];
        int split = !dt_shape_eq(&ws->shape, &ms->shape);
        if (sole && !split && t->su.grid.at.shard != 0) return;        /* the tensor group's member 0 speaks */
        holding h = { .t = t, .kind = kind, .sole = sole, .flat = ml->off[pi], .fn = fn, .ud = ud };
        size_t T = (size_t)(ml->place.nshards > 0 ? ml->place.nshards : 1);
        dt_tp_runs(ws, ms, T, (size_t)ml->place.shard, p, q, tp_run, &h);
}

/* ---- the streamed save ---- */

typedef struct stream {
        trainer *t;
        dt_ckpt_data d;         /* the whole model's tensors, both files in order */
        int nfiles;             /* 2, or 1: the model file alone (final weights) */
        const char *path;       /* the final weights: the file and its metadata */
        const dt_st_meta *meta;
        int nmeta;
        int file, i;            /* the next piece: file (0 model, 1 optim), tensor, offset */
        size_t off;
        size_t base;            /* the piece being moved: its first element, */
        float *out;             /* and on rank 0 where it is put together */
        float *scratch;         /* rank 0: where pieces nobody writes go (after a failure) */
        uint64_t *runs;         /* this rank's runs of the piece: (first element - base, length) */
        float *vals;            /* and their values, one after another */
        size_t nruns, nvals, caprun, capval;
        uint64_t (*cnt)[2];     /* rank 0: every rank's runs and values of the piece */
        MPI_Request *rq;
} stream;

static void *grow(void *p, size_t *cap, size_t need, size_t size)
{
        if (need <= *cap) return p;
        *cap = DT_MAX(need, 2 * *cap);
        return dt_realloc(p, *cap * size);
}

static void pack(void *ud, size_t lo, size_t hi, float *at)
{
        stream *s = ud;
        size_t n = hi - lo;
        if (s->t->su.rank == 0) {       /* rank 0's own runs go straight into the piece */
                memcpy(s->out + (lo - s->base), at, n * sizeof *at);
                s->nvals += n;
                return;
        }
        s->runs = grow(s->runs, &s->caprun, 2 * (s->nruns + 1), sizeof *s->runs);
        s->vals = grow(s->vals, &s->capval, s->nvals + n, sizeof *s->vals);
        s->runs[2 * s->nruns] = lo - s->base;
        s->runs[2 * s->nruns + 1] = n;
        s->nruns++;
        memcpy(s->vals + s->nvals, at, n * sizeof *at);
        s->nvals += n;
}

/* Rank 0: every other rank's runs of the piece, one rank at a time, into s->out. */
static void receive(stream *s, size_t n)
{
        dt_comm *w = &s->t->su.world;
        size_t got = s->nvals;
        for (int r = 1; r < w->size; r++)
                MPI_Irecv(s->cnt[r], 2, MPI_UINT64_T, r, TAG, w->comm, &s->rq[r - 1]);
        dt_comm_wait(w, w->size - 1, s->rq, "checkpoint piece");
        for (int r = 1; r < w->size; r++) {
                size_t nr = s->cnt[r][0], nv = s->cnt[r][1];
                if (!nr) continue;
                DT_ASSERT(nv <= INT32_MAX && 2 * nr <= INT32_MAX);
                s->runs = grow(s->runs, &s->caprun, 2 * nr, sizeof *s->runs);
                s->vals = grow(s->vals, &s->capval, nv, sizeof *s->vals);
                MPI_Irecv(s->runs, (int)(2 * nr), MPI_UINT64_T, r, TAG + 1, w->comm, &s->rq[0]);
                MPI_Irecv(s->vals, (int)nv, MPI_FLOAT, r, TAG + 2, w->comm, &s->rq[1]);
                dt_comm_wait(w, 2, s->rq, "checkpoint piece");
                const float *v = s->vals;
                for (size_t k = 0; k < nr; k++) {
                        DT_ASSERT(s->runs[2 * k] + s->runs[2 * k + 1] <= n);
                        memcpy(s->out + s->runs[2 * k], v, s->runs[2 * k + 1] * sizeof *v);
                        v += s->runs[2 * k + 1];
                }
                got += nv;
        }
        DT_ASSERT(got == n);    /* every element of the piece has exactly one sender */
}

/* Piece [off, off + n) of tensor x (file 'optim') on every rank: into out on rank 0. */
static void move(stream *s, const dt_st_tensor *x, int optim, size_t off, size_t n, float *out)
{
        dt_comm *w = &s->t->su.world;
        s->base = off;
        s->out = out;
        s->nruns = s->nvals = 0;
        holds(s->t, x, optim, off, off + n, 1, pack, s);
        if (w->rank == 0) {
                receive(s, n);
                return;
        }
        uint64_t cnt[2] = { s->nruns, s->nvals };
        int k = 0;
        MPI_Request rq[3];
        DT_ASSERT(s->nvals <= INT32_MAX && 2 * s->nruns <= INT32_MAX);
        MPI_Isend(cnt, 2, MPI_UINT64_T, 0, TAG, w->comm, &rq[k++]);
        if (s->nruns) {
                MPI_Isend(s->runs, (int)(2 * s->nruns), MPI_UINT64_T, 0, TAG + 1, w->comm, &rq[k++]);
                MPI_Isend(s->vals, (int)s->nvals, MPI_FLOAT, 0, TAG + 2, w->comm, &rq[k++]);
        }
        dt_comm_wait(w, k, rq, "checkpoint piece");
}

static const dt_st_tensor *at_cursor(const stream *s)
{
        return s->file ? &s->d.ot[s->i] : &s->d.mt[s->i];
}

/* Moves the cursor to the next file that has tensors, from (file, 0). */
static void skip_empty(stream *s)
{
        while (s->file < s->nfiles && (s->file ? s->d.no : s->d.nm) == 0) s->file++;
        s->i = 0;
}

/* Advances the cursor past piece (file, i, off). */
static void next(stream *s)
{
        s->off += DT_ST_CHUNK;
        if (s->off < at_cursor(s)->n) return;
        s->off = 0;
        if (++s->i < (s->file ? s->d.no : s->d.nm)) return;
        s->file++;
        skip_empty(s);
}

static int at_end(const stream *s)
{
        return s->file >= s->nfiles;
}

/* The writer's fill, on rank 0: must ask for the pieces in the cursor's order. */
static void fill(void *ud, const dt_st_tensor *x, size_t off, size_t n, float *out)
{
        stream *s = ud;
        DT_ASSERT(!at_end(s));
        const dt_st_tensor *want = at_cursor(s);
        DT_ASSERT(!strcmp(want->name, x->name) && off == s->off && n == DT_MIN(DT_ST_CHUNK, x->n - off));
        move(s, x, s->file, off, n, out);
        next(s);
}

/* Every piece from the cursor on (the writer asked for none of them, or stopped early). */
static void rest(stream *s)
{
        /* rank 0's pieces nobody writes, only after a failure: not resident in every checkpoint */
        if (s->t->su.rank == 0 && !at_end(s) && !s->scratch) s->scratch = dt_calloc(DT_ST_CHUNK, sizeof *s->scratch);
        while (!at_end(s)) {
                const dt_st_tensor *x = at_cursor(s);
                move(s, x, s->file, s->off, DT_MIN(DT_ST_CHUNK, x->n - s->off), s->scratch);
                next(s);
        }
}

/* Every rank: the stream of s's files of the whole model's tensors, written by rank 0's write. */
static int run_stream(stream s, int (*write)(stream *s, const dt_graph *W, char *err, size_t errlen), char *err,
                      size_t errlen)
{
        trainer *t = s.t;
        int nfiles = s.nfiles;
        const dt_graph *W = dt_grid_model(&t->su.grid, &t->su.g);
        dt_graph names = *W;    /* the whole model's names and shapes; no rank has its buffers */
        names.params = names.buffers = NULL;
        dt_moments shape = { .n = nfiles > 1 ? t->mo.n : 0 };
        if (dt_ckpt_collect(&names, &shape, NULL, &t->st, &s.d, err, errlen)) return -1;      /* as on every rank */
        skip_empty(&s);
        int rc = 0;
        if (t->su.rank == 0) {
                s.cnt = dt_calloc((size_t)t->su.world.size, sizeof *s.cnt);
                s.rq = dt_calloc((size_t)DT_MAX(2, t->su.world.size), sizeof *s.rq);
                rc = write(&s, &names, err, errlen);
        }
        rest(&s);       /* every rank, rank 0 too when its writer stopped early */
        free(s.scratch);
        free(s.cnt);
        free(s.rq);
        free(s.runs);
        free(s.vals);
        dt_ckpt_data_free(&s.d);
        return rc;
}

static int write_ckpt(stream *s, const dt_graph *W, char *err, size_t errlen)
{
        dt_moments shape = { .n = s->t->mo.n };
        return dt_ckpt_writer_stream(s->t->ckw, W, &shape, &s->t->st, fill, s, err, errlen);
}

int dt_ckpt_stream_save(trainer *t, char *err, size_t errlen)
{
        return run_stream((stream){ .t = t, .nfiles = 2 }, write_ckpt, err, errlen);
}

static int write_final(stream *s, const dt_graph *W, char *err, size_t errlen)
{
        return dt_model_save_stream(s->path, W, s->meta, s->nmeta, fill, s, err, errlen);
}

int dt_ckpt_stream_final(trainer *t, const char *path, const dt_st_meta *meta, int nmeta, char *err, size_t errlen)
{
        return run_stream((stream){ .t = t, .nfiles = 1, .path = path, .meta = meta, .nmeta = nmeta }, write_final, err,
                          errlen);
}

int dt_ckpt_stream_on(const trainer *t)
{
        /* from the spec, not t->dp: the memory plan asks before the buffers exist (stages, tensor
         * splits and shard are refused on device backends); a compressed run is gathered instead,
         * because only that writer carries the compressors' residuals (train/ckpt_cx.c) */
        const dt_grid *gr = &t->su.grid;
        return (dt_grid_parts(gr) || (dt_grid_replicas(gr) > 1 && t->su.cs.shard > 0)) &&
               t->su.cs.compression == DT_COMP_NONE;
}

/* ---- resume: each rank's parts out of the mapped files ---- */

static void take_run(void *ud, size_t lo, size_t hi, float *at)
{
        const float *src = ud;
        memcpy(at, src + lo, (hi - lo) * sizeof *at);
}

static void take(void *ud, int file, const dt_st_tensor *want, const float *src)
{
        holds(ud, want, file, 0, want->n, 0, take_run, (void *)src);
}

static int agree(void *ud, int rc)
{
        trainer *t = ud;
        return dt_comm_agree(&t->su.world, rc ? 1 : 0, "checkpoint read");
}

/* floor(size k / N) without the product's overflow */
static size_t share(size_t size, int k, int N)
{
        return size / (size_t)N * (size_t)k + size % (size_t)N * (size_t)k / (size_t)N;
}

/* The file's crc32: rank r sums bytes [size r / N, size (r + 1) / N), the shares are joined in order. */
static int crc(void *ud, const char *path, size_t size, uint32_t *out)
{
        trainer *t = ud;
        dt_comm *w = &t->su.world;
        int N = w->size, r = w->rank;
        uint64_t *v = dt_calloc((size_t)N + 1, sizeof *v);     /* every share's crc, then the failures */
        uint32_t c = 0;
        size_t lo = share(size, r, N), hi = share(size, r + 1, N);
        if (dt_ckpt_crc_range(path, lo, hi, &c)) v[N] = 1;
        v[r] = c;
        dt_comm_allreduce(w, v, N + 1, MPI_UINT64_T, "checkpoint crc32");
        uLong all = (uLong)v[0];
        for (int k = 1; k < N; k++) {
                all = crc32_combine(all, (uLong)v[k], (z_off_t)(share(size, k + 1, N) - share(size, k, N)));
        }
        int rc = v[N] ? -1 : 0;
        free(v);
        *out = (uint32_t)all;
        return rc;
}

int dt_ckpt_stream_load(trainer *t, const char *dir, char *err, size_t errlen)
{
        const dt_ckpt_team team = { .ud = t, .agree = agree, .crc = crc };
        return dt_ckpt_load_take(dir, dt_grid_model(&t->su.grid, &t->su.g), t->mo.n, &t->st, t->su.spec.hash, take, t,
                                 &team, err, errlen);
}
