/* train/finetune.c - weights from a file by tensor name, and frozen layers (see finetune.h). */
#include "train/finetune.h"

#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "train/ckpt.h"
#include "train/safetensors.h"
#include "util/common.h"

/* ---- loading by name ---- */

typedef struct want {
        char name[160];
        const dt_shape *shape;
        float *dst;
        size_t n;
} want;

static int shape_eq(const dt_shape *a, const dt_shape *b)
{
        if (a->n != b->n) return 0;
        for (int i = 0; i < a->n; i++)
                if (a->d[i] != b->d[i]) return 0;
        return 1;
}

/* A list printed as "  name (why)" lines, at most 20 then a count. */
static void list(const char *title, char **items, int n)
{
        if (!n) return;
        fprintf(stderr, "  %s (%d):\n", title, n);
        for (int i = 0; i < n && i < 20; i++) fprintf(stderr, "    %s\n", items[i]);
        if (n > 20) fprintf(stderr, "    ... and %d more\n", n - 20);
}

static char *fmt_item(const char *name, const char *why)
{
        size_t n = strlen(name) + strlen(why) + 4;
        char *s = dt_malloc(n);
        snprintf(s, n, "%s%s%s", name, why[0] ? " " : "", why);
        return s;
}

/* Every tensor the graph holds, by PyTorch name, with where its values go. */
static want *wanted(dt_graph *g, int *nout)
{
        int nw = 0, cap = 16;
        want *w = dt_malloc((size_t)cap * sizeof *w);
        for (int li = 0; li < g->n; li++) {
                const dt_layer *l = &g->layers[li];
                for (int k = 0; k < l->np; k++) {
                        if (nw == cap) w = dt_realloc(w, (size_t)(cap *= 2) * sizeof *w);
                        snprintf(w[nw].name, sizeof w[nw].name, "%s.%s", l->name, l->ps[k].suffix);
                        w[nw].shape = &l->ps[k].shape;
                        w[nw].dst = (l->ps[k].trainable ? g->params : g->buffers) + l->off[k];
                        w[nw].n = l->len[k];
                        nw++;
                }
        }
        *nout = nw;
        return w;
}

int dt_finetune_load(const char *arg, dt_graph *g, int strict, int verbose)
{
        char err[DT_PATH_MAX + 256], path[DT_PATH_MAX + 32];
        dt_st_file f;
        /* a checkpoint (directory, checkpoints/best or latest, a run directory) gives its weights */
        if (dt_ckpt_weights_file(arg, path, sizeof path, err, sizeof err) < 0 ||
            dt_st_read_any(path, &f, err, sizeof err) < 0) {
                if (verbose) dt_error("weights: %s", err);
                return DT_EXIT_CKPT;
        }
        int nw;
        want *w = wanted(g, &nw);
        char **miss = dt_calloc((size_t)nw + 1, sizeof *miss), **bad = dt_calloc((size_t)nw + 1, sizeof *bad);
        char **unexp = dt_calloc((size_t)f.nt + 1, sizeof *unexp), **skip = dt_calloc((size_t)f.nt + 1, sizeof *skip);
        const dt_st_tensor **src = dt_calloc((size_t)nw + 1, sizeof *src);
        int nmiss = 0, nbad = 0, nunexp = 0, nskip = 0, nload = 0;
        for (int i = 0; i < nw; i++) {
                const dt_st_tensor *t = dt_st_find(&f, w[i].name);
                char why[160], a[64], b[64];
                if (!t) {
                        miss[nmiss++] = fmt_item(w[i].name, "");
                } else if (!shape_eq(&t->shape, w[i].shape) || t->n != w[i].n) {
                        snprintf(why, sizeof why, "(file %s, model %s)", dt_shape_str(&t->shape, a, sizeof a),
                                 dt_shape_str(w[i].shape, b, sizeof b));
                        bad[nbad++] = fmt_item(w[i].name, why);
                } else if (strcmp(t->dtype, "F32") && strcmp(t->dtype, "F64") && strcmp(t->dtype, "F16") &&
                           strcmp(t->dtype, "BF16")) {
                        snprintf(why, sizeof why, "(dtype %s; floating point expected)", t->dtype);
                        bad[nbad++] = fmt_item(w[i].name, why);
                } else {
                        src[i] = t;
                        nload++;
                }
        }
        for (int j = 0; j < f.nt; j++) {
                const char *name = f.t[j].name;
                int known = 0;
                for (int i = 0; i < nw && !known; i++) known = !strcmp(w[i].name, name);
                if (known) continue;
                /* PyTorch's batch-norm step counter: state of torch's module, nothing we compute */
                const char *dot = strrchr(name, '.');
                if (dot && !strcmp(dot, ".num_batches_tracked")) skip[nskip++] = fmt_item(name, "(PyTorch's counter, not used)");
                else unexp[nunexp++] = fmt_item(name, "");
        }
        int mismatch = nmiss + nbad + nunexp;
        int rc = 0;
        if (mismatch && strict) {
                if (verbose)
                        dt_error("weights %s do not match the model (%d missing, %d unexpected, %d mismatched); "
                                 "nothing was loaded (--non-strict or train.init_strict: false loads what matches)",
                                 path, nmiss, nunexp, nbad);
                rc = DT_EXIT_CKPT;
        } else if (!nload) {
                if (verbose) dt_error("weights %s: no tensor matches the model by name and shape", path);
                rc = DT_EXIT_CKPT;
        }
        if (rc && verbose) {
                list("missing from the file", miss, nmiss);
                list("unexpected in the file", unexp, nunexp);
                list("mismatched", bad, nbad);
        } else if (!rc) {
                for (int i = 0; i < nw; i++)
                        if (src[i]) dt_st_to_float(src[i], w[i].dst);
                if (verbose > 1) {
                        printf("weights: %d of %d tensors loaded from %s%s\n", nload, nw, path,
                               mismatch ? " (non-strict)" : "");
                        if (mismatch) {
                                fflush(stdout);
                                fprintf(stderr, "dtrain: note: the other tensors keep their initial values:\n");
                                list("missing from the file", miss, nmiss);
                                list("unexpected in the file (ignored)", unexp, nunexp);
                                list("mismatched (not loaded)", bad, nbad);
                        }
                }
        }
        for (int i = 0; i < nmiss; i++) free(miss[i]);
        for (int i = 0; i < nbad; i++) free(bad[i]);
        for (int i = 0; i < nunexp; i++) free(unexp[i]);
        for (int i = 0; i < nskip; i++) free(skip[i]);
        free(miss); free(bad); free(unexp); free(skip); free(src); free(w);
        dt_st_free(&f);
        return rc;
}

/* ---- frozen layers ---- */

static int frozen(const dt_model_spec *s, const char *name)
{
        for (int i = 0; i < s->train.nfreeze; i++)
                if (!fnmatch(s->train.freeze[i], name, 0)) return 1;
        return 0;
}

int dt_freeze_init(dt_freeze *fz, const dt_model_spec *spec, const dt_graph *full, const dt_graph *g,
                   dt_backend *be, int verbose)
{
        memset(fz, 0, sizeof *fz);
        const dt_train_spec *tr = &spec->train;
        if (!tr->nfreeze) return 0;
        int rc = 0;
        for (int p = 0; p < tr->nfreeze; p++) {
                int hit = 0;
                for (int i = 0; i < full->n && !hit; i++) hit = !fnmatch(tr->freeze[p], full->layers[i].name, 0);
                if (!hit) {
                        char at[DT_PATH_MAX + 64];
                        if (verbose > 0)
                                fprintf(stderr, "%s: error: freeze: '%s' matches no layer name (names: %s%s%s%s)\n",
                                        dt_pos_str(at, sizeof at, spec->file, tr->freeze_pos.line,
                                                   tr->freeze_pos.col), tr->freeze[p],
                                        full->layers[0].name, full->n > 1 ? ", " : "",
                                        full->n > 1 ? full->layers[1].name : "", full->n > 2 ? ", ..." : "");
                        rc = DT_EXIT_USAGE;
                }
        }
        if (rc) return rc;
        char names[512] = "";
        for (int i = 0; i < full->n; i++)
                if (frozen(spec, full->layers[i].name)) {
                        size_t k = strlen(names);
                        snprintf(names + k, sizeof names - k, "%s%s", k ? ", " : "", full->layers[i].name);
                }
        for (int i = 0; i < g->n; i++) {
                const dt_layer *l = &g->layers[i];
                if (!frozen(spec, l->name)) continue;
                for (int k = 0; k < l->np; k++) {
                        fz->r = dt_realloc(fz->r, (size_t)(fz->n + 1) * sizeof *fz->r);
                        fz->r[fz->n].buffer = !l->ps[k].trainable;
                        fz->r[fz->n].off = l->off[k];
                        fz->r[fz->n].len = l->len[k];
                        fz->total += l->len[k];
                        fz->n++;
                }
        }
        if (fz->total) {
                fz->saved = be->ops->alloc(be, fz->total);
                size_t at = 0;
                for (int i = 0; i < fz->n; i++) {
                        const float *from = (fz->r[i].buffer ? g->buffers : g->params) + fz->r[i].off;
                        be->ops->copy(be, fz->saved + at, from, fz->r[i].len);
                        at += fz->r[i].len;
                }
        }
        if (verbose > 1) printf("frozen: %s (parameters and buffers kept as they are)\n", names);
        return 0;
}

void dt_freeze_grads(const dt_freeze *fz, dt_backend *be, float *grads)
{
        for (int i = 0; i < fz->n; i++)
                if (!fz->r[i].buffer) be->ops->zero(be, grads + fz->r[i].off, fz->r[i].len);
}

void dt_freeze_restore(const dt_freeze *fz, const dt_graph *g, dt_backend *be)
{
        size_t at = 0;
        for (int i = 0; i < fz->n; i++) {
                float *to = (fz->r[i].buffer ? g->buffers : g->params) + fz->r[i].off;
                be->ops->copy(be, to, fz->saved + at, fz->r[i].len);
                at += fz->r[i].len;
        }
}

void dt_freeze_free(dt_freeze *fz, dt_backend *be)
{
        if (fz->saved) be->ops->free(be, fz->saved);
        free(fz->r);
        memset(fz, 0, sizeof *fz);
}
