/* train/ckpt_cx.c - the gradient compressor's state in a checkpoint: every rank's residual and the
 * shared state (tau, warm-start Q) gathered onto rank 0 as "dtrain.compress.*" tensors of
 * optim.safetensors, and put back on resume: exactly on the same layout (a resumed run is bitwise
 * the uninterrupted one), summed onto the new data ranks when only their count changed, dropped
 * with a note when the method or the model's cut into stages and shards changed. */
#include "train/trainer.h"
#include "parallel/compress.h"
#include "parallel/layout.h"

/* "dtrain.compress.layout": a version, the method, the world and the grid that wrote it */
enum { LY_VERSION, LY_METHOD, LY_WORLD, LY_DATA, LY_STAGES, LY_TENSOR, LY_N };
#define LAYOUT_VERSION 1
/* floats per message: MPI counts are ints */
#define CHUNK ((size_t)1 << 28)

static void send_floats(dt_comm *c, const void *p, size_t n, int to)
{
        for (size_t o = 0; o < n; o += CHUNK) {
                MPI_Request r;
                int k = (int)(n - o < CHUNK ? n - o : CHUNK);
                MPI_Isend((const float *)p + o, k, MPI_FLOAT, to, 71, c->comm, &r);
                dt_comm_wait(c, 1, &r, "checkpoint: compressor state");
        }
}

static void recv_floats(dt_comm *c, void *p, size_t n, int from)
{
        for (size_t o = 0; o < n; o += CHUNK) {
                MPI_Request r;
                int k = (int)(n - o < CHUNK ? n - o : CHUNK);
                MPI_Irecv((float *)p + o, k, MPI_FLOAT, from, 71, c->comm, &r);
                dt_comm_wait(c, 1, &r, "checkpoint: compressor state");
        }
}

static void name_of(dt_st_tensor *x, const char *what, int rank, size_t n, float *data)
{
        if (rank < 0) snprintf(x->name, sizeof x->name, "dtrain.compress.%s", what);
        else snprintf(x->name, sizeof x->name, "dtrain.compress.rank%d.%s", rank, what);
        x->shape = (dt_shape){ .n = 1, .d = { (int)n } };
        x->n = n;
        x->data = data;
}

void dt_tr_cx_gather(trainer *t, dt_ckpt_extra *x)
{
        dt_cx_state s;
        dt_dp_cx_state(&t->dp, &s);
        *x = (dt_ckpt_extra){ 0 };
        if (!s.res && !s.shared) return;      /* the same on every rank: the data axes are alike */
        dt_comm *w = &t->su.world;
        int P = w->size, me = w->rank;
        long mine[2] = { (long)s.nres, (long)s.nshared }, *all = me == 0 ? dt_calloc((size_t)P * 2, sizeof *all) : NULL;
        MPI_Gather(mine, 2, MPI_LONG, all, 2, MPI_LONG, 0, w->comm);
        if (me != 0) {
                send_floats(w, s.res, s.nres, 0);
                send_floats(w, s.shared, s.nshared, 0);
                return;
        }
        size_t total = LY_N;
        for (int k = 0; k < 2 * P; k++) total += (size_t)all[k];
        x->buf = dt_falloc(total);
        x->t = dt_calloc((size_t)(1 + 2 * P), sizeof *x->t);
        const int *grid = t->su.grid.L.grid;
        float ly[LY_N] = { LAYOUT_VERSION, (float)t->su.cs.compression, (float)P, (float)grid[DT_AXIS_DATA],
                           (float)grid[DT_AXIS_PIPE], (float)grid[DT_AXIS_TENSOR] };
        memcpy(x->buf, ly, sizeof ly);
        name_of(&x->t[x->n++], "layout", -1, LY_N, x->buf);
        float *p = x->buf + LY_N;
        for (int k = 0; k < P; k++) {
                size_t nr = (size_t)all[2 * k], ns = (size_t)all[2 * k + 1];
                if (k == 0) {
                        if (nr) memcpy(p, s.res, nr * sizeof *p);      /* memcpy wants a pointer even for 0 */
                        if (ns) memcpy(p + nr, s.shared, ns * sizeof *p);
                } else {
                        recv_floats(w, p, nr, k);
                        recv_floats(w, p + nr, ns, k);
                }
                if (nr) name_of(&x->t[x->n++], "residual", k, nr, p);
                if (ns) name_of(&x->t[x->n++], "shared", k, ns, p + nr);
                p += nr + ns;
        }
        free(all);
}

static const dt_st_tensor *find(const dt_ckpt_extra *x, const char *what, int rank)
{
        dt_st_tensor want;
        name_of(&want, what, rank, 0, NULL);
        for (int i = 0; i < x->n; i++)
                if (!strcmp(x->t[i].name, want.name)) return &x->t[i];
        return NULL;
}

/* Why the saved state cannot be put back on this run (NULL: it can). */
static const char *unusable(trainer *t, const float *ly, const dt_cx_state *s, char *why, size_t len)
{
        const int *grid = t->su.grid.L.grid;
        int method = (int)ly[LY_METHOD];
        if (ly[LY_VERSION] != LAYOUT_VERSION || method <= 0 || method >= DT_COMP_COUNT)
                snprintf(why, len, "it is of a later dtrain");
        else if (method != (int)t->su.cs.compression)
                snprintf(why, len, "this run uses compression %s", dt_comp_names[t->su.cs.compression]);
        else if (!s->res && !s->shared)
                snprintf(why, len, "this run has one data-parallel rank and compresses nothing");
        else if ((int)ly[LY_STAGES] != grid[DT_AXIS_PIPE] || (int)ly[LY_TENSOR] != grid[DT_AXIS_TENSOR])
                snprintf(why, len, "they belong to %d pipeline stage%s x %d tensor shard%s, this run has %d x %d",
                         (int)ly[LY_STAGES], ly[LY_STAGES] == 1 ? "" : "s", (int)ly[LY_TENSOR],
                         ly[LY_TENSOR] == 1 ? "" : "s", grid[DT_AXIS_PIPE], grid[DT_AXIS_TENSOR]);
        else
                return NULL;
        return why;
}

/* This rank's state into res and shared (s's sizes): its residual the sum over the saved replicas
 * that map onto its replica (saved r with r mod the new count = its own), in replica order; the
 * shared state its replica's, or replica 0's (every replica saved the same). 0 when a size differs. */
static int take(trainer *t, const dt_ckpt_extra *x, const float *ly, const dt_cx_state *s, float *res, float *shared)
{
        const int *grid = t->su.grid.L.grid;
        int old[3] = { (int)ly[LY_DATA], (int)ly[LY_STAGES], (int)ly[LY_TENSOR] };
        dt_grid_pos at = t->su.grid.at;
        for (int r = at.replica; r < old[DT_AXIS_DATA]; r += grid[DT_AXIS_DATA]) {
                const dt_st_tensor *tr = find(x, "residual", dt_layout_rank(old, (dt_grid_pos){ r, at.stage, at.shard }));
                if (!s->res) continue;
                if (!tr || tr->n != s->nres) return 0;
                for (size_t i = 0; i < s->nres; i++) res[i] += tr->data[i];
        }
        if (!s->shared) return 1;
        int r = at.replica < old[DT_AXIS_DATA] ? at.replica : 0;
        const dt_st_tensor *ts = find(x, "shared", dt_layout_rank(old, (dt_grid_pos){ r, at.stage, at.shard }));
        if (!ts || ts->n != s->nshared) return 0;
        memcpy(shared, ts->data, s->nshared * sizeof(float));
        return 1;
}

void dt_tr_cx_restore(trainer *t, const dt_ckpt_extra *x, const char *dir)
{
        dt_cx_state s;
        dt_dp_cx_state(&t->dp, &s);
        const dt_st_tensor *lt = find(x, "layout", -1);
        if (!lt || lt->n != LY_N) return;       /* the run that wrote it kept no compressor state */
        const float *ly = lt->data;
        int say = t->su.rank == 0 && !t->quiet;
        char why[160];
        const char *no = unusable(t, ly, &s, why, sizeof why);
        float *res = s.res ? dt_falloc(s.nres ? s.nres : 1) : NULL, *shared = s.shared ? dt_falloc(s.nshared) : NULL;
        int ok = !no && take(t, x, ly, &s, res, shared);
        /* all or nothing: a rank that kept its state while another dropped its own would send what
         * the others no longer owe */
        if (dt_comm_agree(&t->su.world, ok ? 0 : 1, "compressor state")) ok = 0;
        if (ok && s.res) memcpy(s.res, res, s.nres * sizeof *res);
        if (ok && s.shared) memcpy(s.shared, shared, s.nshared * sizeof *shared);
        free(res);
        free(shared);
        int method = (int)ly[LY_METHOD], D = t->su.grid.L.grid[DT_AXIS_DATA];
        if (say && !ok)
                dt_note("resume: %s holds the %s residuals of %d rank%s; they are dropped (%s): what they had not "
                        "yet sent is lost and this run starts from zero residuals", dir,
                        method > 0 && method < DT_COMP_COUNT ? dt_comp_names[method] : "compressor",
                        (int)ly[LY_WORLD], ly[LY_WORLD] == 1 ? "" : "s", no ? no : "their sizes differ from this model's");
        else if (say && (int)ly[LY_DATA] != D)
                dt_note("resume: %s's residuals of %d data-parallel ranks are summed onto this run's %d (replica r "
                        "takes the saved replicas r, r + %d, ...): what they had not yet sent is still sent", dir,
                        (int)ly[LY_DATA], D, D);
}
