/* train/ckpt.c - checkpoints: DIR/checkpoints/step-NNNNNNNN/{model,optim}.safetensors + state.json.
 * The tensors by PyTorch name, a checkpoint gathered for a commit (ckpt_commit.c, whose header says
 * why its order is enough), loading with every byte checked, and the final weights file. */
#include "train/ckpt.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "train/ckpt_int.h"
#include "train/safetensors.h"
#include "util/fault.h"

/* ---- the tensors of a graph, by PyTorch name ---- */

static const char *const moment_suffix[2] = {"exp_avg", "exp_avg_sq"};

/* Every tensor of one file: params and buffers (SET_MODEL), or each trainable param's moments
 * (SET_OPTIM), pointing at their place in the flat buffers. */
int dt_ck_collect(const dt_graph *g, const dt_moments *mo, int set, dt_st_tensor **out, int *nout,
                   char *err, size_t errlen)
{
        int cap = 16, n = 0;
        dt_st_tensor *t = dt_malloc((size_t)cap * sizeof *t);
        for (int li = 0; li < g->n; li++) {
                const dt_layer *l = &g->layers[li];
                for (int i = 0; i < l->np; i++) {
                        const dt_param_spec *ps = &l->ps[i];
                        size_t want = 1;
                        for (int d = 0; d < ps->shape.n; d++)
                                if (ps->shape.d[d] < 0 || !dt_mul_ok(want, (size_t)ps->shape.d[d], &want))
                                        want = SIZE_MAX;
                        if (want != l->len[i]) {
                                snprintf(err, errlen, "tensor '%s.%s' holds %zu of its %zu values (sharded "
                                         "parameters cannot be checkpointed yet)", l->name, ps->suffix,
                                         l->len[i], want);
                                free(t);
                                return -1;
                        }
                        int nm = set == SET_MODEL ? 1 : ps->trainable ? mo->n : 0;
                        for (int k = 0; k < nm; k++) {
                                if (n == cap) t = dt_realloc(t, (size_t)(cap *= 2) * sizeof *t);
                                dt_st_tensor *x = &t[n++];
                                int w;
                                if (set == SET_MODEL)
                                        w = snprintf(x->name, sizeof x->name, "%s.%s", l->name, ps->suffix);
                                else
                                        w = snprintf(x->name, sizeof x->name, "%s.%s.%s", l->name, ps->suffix,
                                                     moment_suffix[k]);
                                if (w >= (int)sizeof x->name) {
                                        snprintf(err, errlen, "tensor name '%s.%s' is too long", l->name, ps->suffix);
                                        free(t);
                                        return -1;
                                }
                                x->shape = ps->shape;
                                x->n = l->len[i];
                                /* a graph or moments without buffers (a streamed checkpoint's whole
                                 * model, for its names and shapes): no data pointers */
                                float *base = set == SET_OPTIM ? (k ? mo->v : mo->m) : ps->trainable ? g->params : g->buffers;
                                x->data = base ? base + l->off[i] : NULL;
                        }
                }
        }
        *out = t;
        *nout = n;
        return 0;
}


int dt_ckpt_collect(const dt_graph *g, const dt_moments *mo, const dt_ckpt_extra *x, const dt_train_state *st,
                    dt_ckpt_data *d, char *err, size_t errlen)
{
        static const dt_moments none = {0};
        if (!mo) mo = &none;
        memset(d, 0, sizeof *d);
        if (dt_ck_collect(g, mo, SET_MODEL, &d->mt, &d->nm, err, errlen)) return -1;
        if (dt_ck_collect(g, mo, SET_OPTIM, &d->ot, &d->no, err, errlen)) {
                dt_ckpt_data_free(d);
                return -1;
        }
        if (x && x->n) {
                d->ot = dt_realloc(d->ot, (size_t)(d->no + x->n) * sizeof *d->ot);
                memcpy(d->ot + d->no, x->t, (size_t)x->n * sizeof *x->t);
                d->no += x->n;
        }
        d->nmoments = mo->n;
        d->st = *st;
        return 0;
}

void dt_ckpt_extra_free(dt_ckpt_extra *x)
{
        free(x->t);
        free(x->buf);
        *x = (dt_ckpt_extra){ 0 };
}

void dt_ckpt_data_free(dt_ckpt_data *d)
{
        free(d->mt);
        free(d->ot);
        d->mt = d->ot = NULL;
        d->nm = d->no = 0;
}

int dt_ckpt_save(const char *outdir, const dt_graph *g, const dt_moments *mo,
                 const dt_train_state *st, char *err, size_t errlen)
{
        const dt_ckpt_policy one = { .keep = 1 };
        return dt_ckpt_save_keep(outdir, g, mo, st, &one, err, errlen);
}

int dt_ckpt_save_keep(const char *outdir, const dt_graph *g, const dt_moments *mo,
                      const dt_train_state *st, const dt_ckpt_policy *pol, char *err, size_t errlen)
{
        dt_ckpt_data d;
        if (dt_ckpt_collect(g, mo, NULL, st, &d, err, errlen)) return -1;
        int rc = dt_ckpt_commit(outdir, &d, pol, NULL, err, errlen);
        dt_ckpt_data_free(&d);
        return rc;
}

/* extra: names under DT_CKPT_EXTRA_PREFIX are not the model's and may be there too */
static int check_tensors(const char *path, const dt_st_file *f, const dt_st_tensor *want, int nw, int extra,
                         const char *where, char *err, size_t errlen)
{
        for (int i = 0; i < nw; i++) {
                const dt_st_tensor *t = dt_st_find(f, want[i].name);
                if (!t) {
                        snprintf(err, errlen, "%s: missing tensor '%s'", path, want[i].name);
                        return -1;
                }
                if (!dt_shape_eq(&t->shape, &want[i].shape)) {
                        char a[96], b[96];
                        snprintf(err, errlen, "%s: shape: tensor '%s' is %s in the %s but %s in the model",
                                 path, want[i].name, dt_shape_str(&t->shape, a, sizeof a), where,
                                 dt_shape_str(&want[i].shape, b, sizeof b));
                        return -1;
                }
        }
        for (int k = 0; k < f->nt; k++) {
                int found = extra && !strncmp(f->t[k].name, DT_CKPT_EXTRA_PREFIX, strlen(DT_CKPT_EXTRA_PREFIX));
                for (int i = 0; i < nw && !found; i++)
                        found = !strcmp(f->t[k].name, want[i].name);
                if (!found) {
                        snprintf(err, errlen, "%s: unexpected tensor '%s' (not in the model)", path, f->t[k].name);
                        return -1;
                }
        }
        return 0;
}

/* A file's crc32 against the one state.json records (team: summed by every rank together). */
static int check_crc(const char *path, const dt_st_file *f, uint32_t crc, const dt_ckpt_team *team, char *err,
                     size_t errlen)
{
        uint32_t got = 0;
        if (team ? team->crc(team->ud, path, f->size, &got) : dt_ck_file_crc(path, &got)) {
                snprintf(err, errlen, "%s: read error: %s", path, team ? "on one of the ranks" : strerror(errno));
                return -1;
        }
        if (got != crc) {
                snprintf(err, errlen, "%s: crc32: the file checksums to %08lx but state.json records %08lx",
                         path, (unsigned long)got, (unsigned long)crc);
                return -1;
        }
        return 0;
}

/* Validates one checkpoint file: structure, the crc recorded in state.json (a team's later, by
 * check_crc: only the layout is read here), the tensors. */
static int check_file(const char *path, dt_st_file *f, const dt_st_tensor *want, int nw, int extra, uint32_t crc,
                      int mapped, const dt_ckpt_team *team, char *err, size_t errlen)
{
        if ((team ? dt_st_read_layout : mapped ? dt_st_read_mapped : dt_st_read)(path, f, err, errlen)) return -1;
        if (!team && check_crc(path, f, crc, NULL, err, errlen)) return -1;
        return check_tensors(path, f, want, nw, extra, "checkpoint", err, errlen);
}

/* The extra tensors of a checked optim file, copied out of it. */
static void take_extra(const dt_st_file *f, dt_ckpt_extra *x)
{
        size_t total = 0;
        *x = (dt_ckpt_extra){ 0 };
        for (int k = 0; k < f->nt; k++)
                if (!strncmp(f->t[k].name, DT_CKPT_EXTRA_PREFIX, strlen(DT_CKPT_EXTRA_PREFIX))) {
                        x->n++;
                        total += f->t[k].n;
                }
        if (!x->n) return;
        x->t = dt_malloc((size_t)x->n * sizeof *x->t);
        x->buf = dt_falloc(total ? total : 1);
        float *p = x->buf;
        int i = 0;
        for (int k = 0; k < f->nt; k++)
                if (!strncmp(f->t[k].name, DT_CKPT_EXTRA_PREFIX, strlen(DT_CKPT_EXTRA_PREFIX))) {
                        x->t[i] = f->t[k];
                        x->t[i].data = p;
                        memcpy(p, f->t[k].data, f->t[k].n * sizeof(float));
                        p += f->t[k].n;
                        i++;
                }
}

/* One load's files: the two tensor files mapped or read, their expected tensors, the state. */
typedef struct loading {
        char mp[DT_PATH_MAX], op[DT_PATH_MAX], sp[DT_PATH_MAX];
        dt_train_state s;
        uint32_t mcrc, ocrc;
        dt_st_tensor *mt, *ot;
        int nm, no;
        dt_st_file mf, of;
} loading;

/* Every check but a team's crc: the files are there, state.json (its own crc, the config hash, the
 * moments), both files' structure and tensors. 0, or -1 with err. */
static int checks(loading *c, const char *ckdir, dt_graph *g, dt_moments *mo, uint64_t expect_hash, int mapped,
                  const dt_ckpt_team *team, char *err, size_t errlen)
{
        if (snprintf(c->mp, sizeof c->mp, "%s/" CK_MODEL, ckdir) >= (int)sizeof c->mp ||
            snprintf(c->op, sizeof c->op, "%s/" CK_OPTIM, ckdir) >= (int)sizeof c->op ||
            snprintf(c->sp, sizeof c->sp, "%s/" CK_STATE, ckdir) >= (int)sizeof c->sp) {
                snprintf(err, errlen, "%s: path too long", ckdir);
                return -1;
        }
        const char *files[3] = {c->sp, c->mp, c->op};
        for (int i = 0; i < 3; i++)
                if (access(files[i], R_OK)) {
                        snprintf(err, errlen, "%s: missing from the checkpoint (%s)", files[i], strerror(errno));
                        return -1;
                }
        int nmoments = 0;
        uint32_t scrc = 0, want_scrc = 0;
        if (dt_ck_read_state(c->sp, &c->s, &nmoments, &c->mcrc, &c->ocrc, &scrc, &want_scrc, err, errlen)) return -1;
        if (c->s.config_hash != expect_hash) {
                snprintf(err, errlen, "%s: incompatible checkpoint: config hash %016llx differs from the "
                         "model's %016llx", c->sp, (unsigned long long)c->s.config_hash, (unsigned long long)expect_hash);
                return -1;
        }
        if (nmoments != mo->n) {
                snprintf(err, errlen, "%s: incompatible checkpoint: it holds %d optimizer moment buffer%s, "
                         "the optimizer needs %d", c->sp, nmoments, nmoments == 1 ? "" : "s", mo->n);
                return -1;
        }
        if (scrc != want_scrc) {
                snprintf(err, errlen, "%s: crc32: the fields checksum to %08lx but state_crc32 records %08lx "
                         "(the file was edited or damaged)", c->sp, (unsigned long)scrc, (unsigned long)want_scrc);
                return -1;
        }
        if (dt_ck_collect(g, mo, SET_MODEL, &c->mt, &c->nm, err, errlen) ||
            dt_ck_collect(g, mo, SET_OPTIM, &c->ot, &c->no, err, errlen))
                return -1;
        if (check_file(c->mp, &c->mf, c->mt, c->nm, 0, c->mcrc, mapped, team, err, errlen) ||
            check_file(c->op, &c->of, c->ot, c->no, 1, c->ocrc, mapped, team, err, errlen))
                return -1;
        return 0;
}

/* The checked tensors of file f into the model (want's data), or handed to take, the pages of a
 * mapped file given back behind each tensor (a rank that takes parts keeps no more resident). */
static void take_all(const dt_st_file *f, const dt_st_tensor *want, int n, int file, dt_ckpt_take take, void *ud)
{
        for (int i = 0; i < n; i++) {
                const float *src = dt_st_find(f, want[i].name)->data;
                if (!take) {
                        memcpy(want[i].data, src, want[i].n * sizeof(float));
                        continue;
                }
                take(ud, file, &want[i], src);
                dt_st_forget(f, src, want[i].n * sizeof(float));
        }
}

static int load(const char *ckdir, dt_graph *g, dt_moments *mo, dt_train_state *st, uint64_t expect_hash,
                dt_ckpt_take take, void *ud, const dt_ckpt_team *team, dt_ckpt_extra *x, char *err, size_t errlen)
{
        static dt_moments none = {0};
        if (!mo) mo = &none;
        loading *c = dt_calloc(1, sizeof *c);
        int rc = checks(c, ckdir, g, mo, expect_hash, take != NULL, team, err, errlen);
        if (team && team->agree(team->ud, rc) && !rc) {
                snprintf(err, errlen, "%s: another rank could not read the checkpoint", ckdir);
                rc = -1;
        }
        /* every rank knows the structure is sound: the crc is summed together, one share each */
        if (!rc && team)
                rc = check_crc(c->mp, &c->mf, c->mcrc, team, err, errlen) || check_crc(c->op, &c->of, c->ocrc, team, err, errlen)
                             ? -1 : 0;
        if (!rc) {      /* everything checked: only now overwrite the model */
                take_all(&c->mf, c->mt, c->nm, 0, take, ud);
                take_all(&c->of, c->ot, c->no, 1, take, ud);
                if (x) take_extra(&c->of, x);
                *st = c->s;
        }
        dt_st_free(&c->mf);
        dt_st_free(&c->of);
        free(c->mt);
        free(c->ot);
        free(c);
        return rc;
}

int dt_ckpt_load(const char *ckdir, dt_graph *g, dt_moments *mo, dt_train_state *st,
                 uint64_t expect_hash, char *err, size_t errlen)
{
        return load(ckdir, g, mo, st, expect_hash, NULL, NULL, NULL, NULL, err, errlen);
}

int dt_ckpt_load_x(const char *ckdir, dt_graph *g, dt_moments *mo, dt_train_state *st, dt_ckpt_extra *x,
                   uint64_t expect_hash, char *err, size_t errlen)
{
        return load(ckdir, g, mo, st, expect_hash, NULL, NULL, NULL, x, err, errlen);
}

int dt_ckpt_load_take(const char *ckdir, const dt_graph *g, int nmoments, dt_train_state *st, uint64_t expect_hash,
                      dt_ckpt_take take, void *ud, const dt_ckpt_team *team, char *err, size_t errlen)
{
        /* names and shapes only (g may be the whole model, its buffers nowhere): no data pointers */
        dt_graph names = *g;
        names.params = names.buffers = NULL;
        dt_moments shape = { .n = nmoments };
        return load(ckdir, &names, &shape, st, expect_hash, take, ud, team, NULL, err, errlen);
}

/* ---- final weights ---- */

int dt_model_save(const char *path, const dt_graph *g, char *err, size_t errlen)
{
        return dt_model_save_meta(path, g, NULL, 0, err, errlen);
}

/* The final weights file, atomically: its tensors' data from g, or streamed from fill. */
static int model_save(const char *path, const dt_graph *g, const dt_st_meta *extra, int nextra, dt_st_fill fill,
                      void *ud, char *err, size_t errlen)
{
        char dir[DT_PATH_MAX], tmp[DT_PATH_MAX];
        const char *base;
        dt_st_tensor *t;
        int n;
        dt_moments none = {0};
        dt_ck_split_path(path, dir, sizeof dir, &base);
        int bad = snprintf(tmp, sizeof tmp, "%s/" TMP_PREFIX "%s-%ld", dir, base, (long)getpid()) >= (int)sizeof tmp;
        if (bad) snprintf(err, errlen, "%s: path too long", path);
        /* a stream's pieces not asked for here are moved by its caller (ckpt_stream.c's rest) */
        if (bad || dt_ck_collect(g, &none, SET_MODEL, &t, &n, err, errlen)) return -1;
        if (nextra < 0) nextra = 0;
        dt_st_meta *meta = dt_malloc((size_t)(nextra + 1) * sizeof *meta);
        meta[0] = (dt_st_meta){ "format", "pt" };
        for (int i = 0; i < nextra; i++) meta[i + 1] = extra[i];
        int fd = -1, rc = fill ? dt_st_write_stream(tmp, t, n, meta, nextra + 1, fill, ud, &fd, NULL, err, errlen)
                               : dt_st_write_start(tmp, t, n, meta, nextra + 1, &fd, NULL, err, errlen);
        if (!rc) rc = dt_st_sync_close(fd, tmp, err, errlen);
        free(meta);
        free(t);
        if (rc) {
                unlink(tmp);
                return -1;
        }
        if (rename(tmp, path)) {
                snprintf(err, errlen, "%s: cannot rename into place: %s", path, strerror(errno));
                unlink(tmp);
                return -1;
        }
        if (dt_ck_fsync_dir(dir)) {
                snprintf(err, errlen, "%s: cannot sync directory: %s", dir, strerror(errno));
                return -1;
        }
        return 0;
}

int dt_model_save_meta(const char *path, const dt_graph *g, const dt_st_meta *extra, int nextra,
                       char *err, size_t errlen)
{
        return model_save(path, g, extra, nextra, NULL, NULL, err, errlen);
}

int dt_model_save_stream(const char *path, const dt_graph *g, const dt_st_meta *meta, int nmeta, dt_st_fill fill,
                         void *ud, char *err, size_t errlen)
{
        return model_save(path, g, meta, nmeta, fill, ud, err, errlen);
}

int dt_model_load(const char *path, dt_graph *g, dt_st_file *f, char *err, size_t errlen)
{
        dt_st_tensor *want = NULL;
        int nw = 0;
        dt_moments none = {0};
        memset(f, 0, sizeof *f);
        if (access(path, R_OK)) {
                snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
                return -1;
        }
        if (dt_ck_collect(g, &none, SET_MODEL, &want, &nw, err, errlen)) return -1;
        int rc = -1;
        if (dt_st_read(path, f, err, errlen) || check_tensors(path, f, want, nw, 0, "file", err, errlen))
                goto out;
        /* everything checked: only now overwrite the model */
        for (int i = 0; i < nw; i++)
                memcpy(want[i].data, dt_st_find(f, want[i].name)->data, want[i].n * sizeof(float));
        rc = 0;
out:
        free(want);
        if (rc) dt_st_free(f);
        return rc;
}

