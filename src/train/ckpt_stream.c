/* train/ckpt_stream.c - a sharded run's checkpoint streamed to rank 0: every rank of the data axis
 * walks the two files' tensors in file order, in the writer's pieces (DT_ST_CHUNK floats); the
 * owners of each piece's parts (parallel/shard.h) send them, rank 0 receives one piece at a time
 * and the writer puts it in the file (dt_st_write_stream). No rank holds more than its parts and
 * one piece, and the files are the same whole-tensor safetensors any layout resumes from. A resume
 * maps the files and each rank copies out its parts only. */
#include "train/trainer.h"

#include "train/ckpt_stream.h"

#define TAG 0x5c4b

typedef struct stream {
        trainer *t;
        dt_ckpt_data d;         /* the tensors' names and shapes, both files in order */
        int file, i;            /* the next piece: file (0 model, 1 optim), tensor, offset */
        size_t off;
        float *scratch;         /* where pieces nobody writes go (rank 0 after a failure) */
} stream;

/* Tensor x's values: *kind 0 parameters, 1 buffers, 2 and 3 the moments; *flat its offset. */
static void locate(const dt_graph *g, const dt_st_tensor *x, int optim, int *kind, size_t *flat)
{
        char name[sizeof x->name];
        snprintf(name, sizeof name, "%s", x->name);
        int k = 0;
        if (optim) {    /* "layer.suffix.exp_avg" and ".exp_avg_sq" (ckpt.c's names) */
                char *dot = strrchr(name, '.');
                DT_ASSERT(dot);
                k = !strcmp(dot + 1, "exp_avg_sq");
                *dot = 0;
        }
        int li, pi;
        DT_ASSERT(dt_graph_find_tensor(g, name, &li, &pi) == 0);
        const dt_layer *l = &g->layers[li];
        *flat = l->off[pi];
        *kind = optim ? 2 + k : l->ps[pi].trainable ? 0 : 1;
}

enum { MAXRQ = 64 };
typedef struct piece {
        stream *s;
        int kind;
        size_t p;               /* the piece's first flat offset */
        float *out;             /* rank 0: where it goes */
        MPI_Request rq[MAXRQ];
        int nrq;
} piece;

/* One owner's run [lo, hi) of the piece: sent by its owner, received (or copied) by rank 0. */
static void run(void *ud, int owner, size_t lo, size_t hi, size_t cpos)
{
        piece *pc = ud;
        trainer *t = pc->s->t;
        dt_shard *sh = &t->dp.sh;
        const float *src = pc->kind == 0 ? t->su.g.params + lo : pc->kind == 2 ? t->mo.m + cpos : t->mo.v + cpos;
        int me = sh->r, n = (int)(hi - lo);
        if (pc->nrq == MAXRQ) { /* both sides post the runs in one order: matched as they come */
                dt_comm_wait(sh->comm, pc->nrq, pc->rq, "checkpoint piece");
                pc->nrq = 0;
        }
        if (owner == me && me == 0) memcpy(pc->out + (lo - pc->p), src, (size_t)n * sizeof *src);
        else if (owner == me) MPI_Isend(src, n, MPI_FLOAT, 0, TAG, sh->comm->comm, &pc->rq[pc->nrq++]);
        else if (me == 0) MPI_Irecv(pc->out + (lo - pc->p), n, MPI_FLOAT, owner, TAG, sh->comm->comm, &pc->rq[pc->nrq++]);
}

/* Piece [off, off + n) of tensor x (file 'optim') on every rank: into out on rank 0. */
static void move(stream *s, const dt_st_tensor *x, int optim, size_t off, size_t n, float *out)
{
        trainer *t = s->t;
        dt_shard *sh = &t->dp.sh;
        int kind;
        size_t flat;
        locate(&t->su.g, x, optim, &kind, &flat);
        int sharded = kind >= 2 || (kind == 0 && sh->stage == 3);
        if (!sharded) { /* whole on every rank */
                if (sh->r == 0) memcpy(out, (kind ? t->su.g.buffers : t->su.g.params) + flat + off, n * sizeof *out);
                return;
        }
        piece pc = { .s = s, .kind = kind, .p = flat + off, .out = out };
        dt_shard_parts(sh, flat + off, flat + off + n, run, &pc);
        dt_comm_wait(sh->comm, pc.nrq, pc.rq, "checkpoint piece");
}

/* Advances the cursor past piece (file, i, off); 0 at the end. */
static int next(stream *s)
{
        const dt_st_tensor *x = s->file ? &s->d.ot[s->i] : &s->d.mt[s->i];
        s->off += DT_ST_CHUNK;
        if (s->off < x->n) return 1;
        s->off = 0;
        s->i++;
        while (s->file < 2 && s->i >= (s->file ? s->d.no : s->d.nm)) {
                s->file++;
                s->i = 0;
        }
        return s->file < 2;
}

static int at_end(const stream *s)
{
        return s->file >= 2;
}

/* The writer's fill, on rank 0: must ask for the pieces in the cursor's order. */
static void fill(void *ud, const dt_st_tensor *x, size_t off, size_t n, float *out)
{
        stream *s = ud;
        DT_ASSERT(!at_end(s));
        const dt_st_tensor *want = s->file ? &s->d.ot[s->i] : &s->d.mt[s->i];
        DT_ASSERT(!strcmp(want->name, x->name) && off == s->off && n == DT_MIN(DT_ST_CHUNK, x->n - off));
        move(s, x, s->file, off, n, out);
        next(s);
}

/* Every piece from the cursor on (the writer asked for none of them, or stopped early). */
static void rest(stream *s)
{
        while (!at_end(s)) {
                const dt_st_tensor *x = s->file ? &s->d.ot[s->i] : &s->d.mt[s->i];
                move(s, x, s->file, s->off, DT_MIN(DT_ST_CHUNK, x->n - s->off), s->scratch);
                next(s);
        }
}

int dt_ckpt_stream_save(trainer *t, char *err, size_t errlen)
{
        stream s = { .t = t };
        const dt_graph *g = &t->su.g;
        /* names and shapes only: the moments' pointers are those of a buffer as long as g's */
        dt_moments shape = { .n = t->mo.n, .m = g->params, .v = g->params };
        int rc = 0;
        if (dt_ckpt_collect(g, &shape, NULL, &t->st, &s.d, err, errlen)) return -1;   /* as on every rank */
        while (!at_end(&s) && (s.file ? s.d.no : s.d.nm) == 0) {      /* an empty file: none of its pieces */
                s.file++;
                s.i = 0;
        }
        if (t->su.rank == 0) {
                s.scratch = dt_falloc(DT_ST_CHUNK);
                rc = dt_ckpt_writer_stream(t->ckw, g, &shape, &t->st, fill, &s, err, errlen);
        }
        rest(&s);       /* every rank, rank 0 too when its writer stopped early */
        free(s.scratch);
        dt_ckpt_data_free(&s.d);
        return rc;
}

int dt_ckpt_stream_on(const trainer *t)
{
        /* from the spec, not t->dp: the memory plan asks before the buffers exist (shard is refused
         * on device backends at the key); a compressed run (shard 1 takes one) is gathered instead,
         * because only that writer carries the compressors' residuals (train/ckpt_cx.c) */
        return dt_grid_replicas(&t->su.grid) > 1 && t->su.cs.shard > 0 && !dt_grid_parts(&t->su.grid) &&
               t->su.cs.compression == DT_COMP_NONE;
}

/* ---- resume: each rank's parts out of the mapped files ---- */

typedef struct taking {
        trainer *t;
        int kind;
        size_t flat;            /* the tensor's first flat offset */
        const float *src;
} taking;

static void take_run(void *ud, int owner, size_t lo, size_t hi, size_t cpos)
{
        taking *k = ud;
        trainer *t = k->t;
        if (owner != t->dp.sh.r) return;
        float *dst = k->kind == 0 ? t->su.g.params + lo : (k->kind == 2 ? t->mo.m : t->mo.v) + cpos;
        memcpy(dst, k->src + (lo - k->flat), (hi - lo) * sizeof *dst);
}

static void take(void *ud, int file, const dt_st_tensor *want, const float *src)
{
        trainer *t = ud;
        dt_shard *sh = &t->dp.sh;
        taking k = { .t = t, .src = src };
        locate(&t->su.g, want, file, &k.kind, &k.flat);
        if (k.kind == 1 || (k.kind == 0 && sh->stage < 3)) {    /* whole on every rank */
                memcpy((k.kind ? t->su.g.buffers : t->su.g.params) + k.flat, src, want->n * sizeof *src);
                return;
        }
        dt_shard_parts(sh, k.flat, k.flat + want->n, take_run, &k);
}

int dt_ckpt_stream_load(trainer *t, const char *dir, char *err, size_t errlen)
{
        return dt_ckpt_load_take(dir, &t->su.g, t->mo.n, &t->st, t->su.spec.hash, take, t, err, errlen);
}
