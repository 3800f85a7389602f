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
                                if (set == SET_OPTIM)
                                        x->data = (k ? mo->v : mo->m) + l->off[i];
                                else
                                        x->data = (ps->trainable ? g->params : g->buffers) + l->off[i];
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

/* Validates one checkpoint file: structure, the crc recorded in state.json, the tensors. */
static int check_file(const char *path, dt_st_file *f, const dt_st_tensor *want, int nw, int extra, uint32_t crc,
                      int mapped,
                      char *err, size_t errlen)
{
        if ((mapped ? dt_st_read_mapped : dt_st_read)(path, f, err, errlen)) return -1;
        uint32_t got = 0;
        if (dt_ck_file_crc(path, &got)) {
                snprintf(err, errlen, "%s: read error: %s", path, strerror(errno));
                return -1;
        }
        if (got != crc) {
                snprintf(err, errlen, "%s: crc32: the file checksums to %08lx but state.json records %08lx",
                         path, (unsigned long)got, (unsigned long)crc);
                return -1;
        }
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

static int load(const char *ckdir, dt_graph *g, dt_moments *mo, dt_train_state *st, uint64_t expect_hash,
                dt_ckpt_take take, void *ud, dt_ckpt_extra *x, char *err, size_t errlen)
{
        char mp[DT_PATH_MAX], op[DT_PATH_MAX], sp[DT_PATH_MAX];
        if (snprintf(mp, sizeof mp, "%s/" CK_MODEL, ckdir) >= (int)sizeof mp ||
            snprintf(op, sizeof op, "%s/" CK_OPTIM, ckdir) >= (int)sizeof op ||
            snprintf(sp, sizeof sp, "%s/" CK_STATE, ckdir) >= (int)sizeof sp) {
                snprintf(err, errlen, "%s: path too long", ckdir);
                return -1;
        }
        static dt_moments none = {0};
        if (!mo) mo = &none;
        const char *files[3] = {sp, mp, op};
        for (int i = 0; i < 3; i++)
                if (access(files[i], R_OK)) {
                        snprintf(err, errlen, "%s: missing from the checkpoint (%s)", files[i], strerror(errno));
                        return -1;
                }

        dt_train_state s;
        memset(&s, 0, sizeof s);
        int nmoments = 0, rc = -1, nm = 0, no = 0;
        uint32_t mcrc = 0, ocrc = 0, scrc = 0, want_scrc = 0;
        dt_st_tensor *mt = NULL, *ot = NULL;
        dt_st_file mf = {0}, of = {0};
        if (dt_ck_read_state(sp, &s, &nmoments, &mcrc, &ocrc, &scrc, &want_scrc, err, errlen)) goto out;
        if (s.config_hash != expect_hash) {
                snprintf(err, errlen, "%s: incompatible checkpoint: config hash %016llx differs from the "
                         "model's %016llx", sp, (unsigned long long)s.config_hash, (unsigned long long)expect_hash);
                goto out;
        }
        if (nmoments != mo->n) {
                snprintf(err, errlen, "%s: incompatible checkpoint: it holds %d optimizer moment buffer%s, "
                         "the optimizer needs %d", sp, nmoments, nmoments == 1 ? "" : "s", mo->n);
                goto out;
        }
        if (scrc != want_scrc) {
                snprintf(err, errlen, "%s: crc32: the fields checksum to %08lx but state_crc32 records %08lx "
                         "(the file was edited or damaged)", sp, (unsigned long)scrc, (unsigned long)want_scrc);
                goto out;
        }
        if (dt_ck_collect(g, mo, SET_MODEL, &mt, &nm, err, errlen) || dt_ck_collect(g, mo, SET_OPTIM, &ot, &no, err, errlen))
                goto out;
        if (check_file(mp, &mf, mt, nm, 0, mcrc, take != NULL, err, errlen) ||
            check_file(op, &of, ot, no, 1, ocrc, take != NULL, err, errlen))
                goto out;

        /* everything checked: only now overwrite the model */
        for (int i = 0; i < nm; i++) {
                const float *src = dt_st_find(&mf, mt[i].name)->data;
                if (take) take(ud, 0, &mt[i], src);
                else memcpy(mt[i].data, src, mt[i].n * sizeof(float));
        }
        for (int i = 0; i < no; i++) {
                const float *src = dt_st_find(&of, ot[i].name)->data;
                if (take) take(ud, 1, &ot[i], src);
                else memcpy(ot[i].data, src, ot[i].n * sizeof(float));
        }
        if (x) take_extra(&of, x);
        *st = s;
        rc = 0;
out:
        dt_st_free(&mf);
        dt_st_free(&of);
        free(mt);
        free(ot);
        return rc;
}

int dt_ckpt_load(const char *ckdir, dt_graph *g, dt_moments *mo, dt_train_state *st,
                 uint64_t expect_hash, char *err, size_t errlen)
{
        return load(ckdir, g, mo, st, expect_hash, NULL, NULL, NULL, err, errlen);
}

int dt_ckpt_load_x(const char *ckdir, dt_graph *g, dt_moments *mo, dt_train_state *st, dt_ckpt_extra *x,
                   uint64_t expect_hash, char *err, size_t errlen)
{
        return load(ckdir, g, mo, st, expect_hash, NULL, NULL, x, err, errlen);
}

int dt_ckpt_load_take(const char *ckdir, const dt_graph *g, int nmoments, dt_train_state *st, uint64_t expect_hash,
                      dt_ckpt_take take, void *ud, char *err, size_t errlen)
{
        /* names and shapes only: the moments' pointers are those of a buffer as long as g's */
        dt_moments shape = { .n = nmoments, .m = g->params, .v = g->params };
        return load(ckdir, (dt_graph *)g, &shape, st, expect_hash, take, ud, NULL, err, errlen);
}

/* ---- final weights ---- */

int dt_model_save(const char *path, const dt_graph *g, char *err, size_t errlen)
{
        return dt_model_save_meta(path, g, NULL, 0, err, errlen);
}

int dt_model_save_meta(const char *path, const dt_graph *g, const dt_st_meta *extra, int nextra,
                       char *err, size_t errlen)
{
        char dir[DT_PATH_MAX], tmp[DT_PATH_MAX];
        const char *base;
        dt_st_tensor *t;
        int n;
        dt_moments none = {0};
        dt_ck_split_path(path, dir, sizeof dir, &base);
        if (snprintf(tmp, sizeof tmp, "%s/" TMP_PREFIX "%s-%ld", dir, base, (long)getpid()) >= (int)sizeof tmp) {
                snprintf(err, errlen, "%s: path too long", path);
                return -1;
        }
        if (nextra < 0) nextra = 0;
        if (dt_ck_collect(g, &none, SET_MODEL, &t, &n, err, errlen)) return -1;
        dt_st_meta *meta = dt_malloc((size_t)(nextra + 1) * sizeof *meta);
        meta[0] = (dt_st_meta){ "format", "pt" };
        for (int i = 0; i < nextra; i++) meta[i + 1] = extra[i];
        int rc = dt_st_write(tmp, t, n, meta, nextra + 1, err, errlen);
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

