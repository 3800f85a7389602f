/* spec/data_keys.c - the data keys that take lists or sections: sharded sources (a list of files,
 * or a glob), per-channel mean/std, augment and the loader's settings. Each reports its own
 * mistakes at file:line:col through the dt_ymap it is given; model_spec.c calls them. */
#include "spec/data_keys.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int dt_ykey_paths(dt_ymap *m, const char *key, const char *dir, const char **first, char ***list, int *n)
{
        *list = NULL;
        *n = 0;
        yaml_node_t *v = dt_ymap_get(m, key);
        if (!v || v->type != YAML_SEQUENCE_NODE) return dt_ymap_str(m, key, first, NULL, 0);
        yaml_node_item_t *b = v->data.sequence.items.start, *e = v->data.sequence.items.top;
        int cnt = (int)(e - b);
        if (cnt < 1) {
                dt_yerr(m->d, m->y, v, "'%s' lists no files; give a path, a glob or a list of paths", key);
                return -1;
        }
        char **l = dt_calloc((size_t)cnt, sizeof *l);
        for (int i = 0; i < cnt; i++) {
                yaml_node_t *it = yaml_document_get_node(&m->y->doc, b[i]);
                const char *s = it ? dt_ynode_str(it) : NULL;
                if (!s || !*s || strlen(s) >= DT_PATH_MAX) {
                        dt_yerr(m->d, m->y, it ? it : v, "'%s' item %d must be a path (a non-empty string "
                                "shorter than %d bytes)", key, i + 1, DT_PATH_MAX);
                        for (int k = 0; k < i; k++) free(l[k]);
                        free(l);
                        return -1;
                }
                char out[DT_PATH_MAX];
                /* found now: kept resolved; else (a glob, a missing file) as written, for the loader */
                l[i] = dt_strdup(dt_data_resolve(dir, s, out, sizeof out) == 0 ? out : s);
        }
        *list = l;
        *n = cnt;
        *first = l[0];
        return 1;
}

/* a scalar, or a list of 1..maxn numbers in (lo, hi) / [lo, hi) */
static int num_list(dt_ymap *m, const char *key, double *scalar, double def, double *out, int *n, double lo,
                    int open_lo)
{
        *n = 0;
        char dd[32];
        snprintf(dd, sizeof dd, "%g", def);
        dt_ykey_describe("number|list", dd);
        yaml_node_t *v = dt_ymap_get(m, key);
        if (!v || v->type != YAML_SEQUENCE_NODE)
                return open_lo ? dt_ymap_num_excl(m, key, scalar, def, lo, HUGE_VAL, DT_YEXCL_MIN, 0)
                               : dt_ymap_num(m, key, scalar, def, lo, HUGE_VAL, 0);
        *scalar = def;
        yaml_node_item_t *b = v->data.sequence.items.start, *e = v->data.sequence.items.top;
        int cnt = (int)(e - b);
        if (cnt < 1 || cnt > DT_MAX_CHANNELS) {
                dt_yerr(m->d, m->y, v, "'%s' must be a number or a list of 1 to %d numbers (one per channel), "
                        "got %d", key, DT_MAX_CHANNELS, cnt);
                return -1;
        }
        for (int i = 0; i < cnt; i++) {
                yaml_node_t *it = yaml_document_get_node(&m->y->doc, b[i]);
                const char *s = it ? dt_ynode_str(it) : NULL;
                char *end = NULL;
                double x = s ? strtod(s, &end) : NAN;
                if (!s || !*s || *end || !isfinite(x) || (open_lo ? x <= lo : x < lo)) {
                        dt_yerr(m->d, m->y, it ? it : v, "'%s' item %d must be a finite number%s, got '%s'", key,
                                i + 1, open_lo ? " > 0" : "", s ? s : "(not a scalar)");
                        return -1;
                }
                out[i] = x;
        }
        *n = cnt;
        return 1;
}

/* per-channel values must be one per channel of a (C,H,W) input */
static int fits_channels(dt_ymap *m, const char *key, int n, const dt_shape *input)
{
        if (n <= 1) return 0;
        int C = input->n == 3 ? input->d[0] : 1;
        if (n != C) {
                char sb[64];
                dt_yerr(m->d, m->y, dt_ymap_get(m, key), "'%s' lists %d values but the input %s has %d channel%s "
                        "(the first dimension of a (C,H,W) input); give one value or %d", key, n,
                        dt_shape_str(input, sb, sizeof sb), C, C == 1 ? "" : "s", C);
                return -1;
        }
        return 0;
}

int dt_ykey_normalisation(dt_ymap *m, dt_data_spec *ds, const dt_shape *input)
{
        int rc = 0;
        if (num_list(m, "mean", &ds->mean, 0.0, ds->mean_c, &ds->nmean, -HUGE_VAL, 0) < 0) rc = -1;
        if (num_list(m, "std", &ds->std, 1.0, ds->std_c, &ds->nstd, 0.0, 1) < 0) rc = -1;
        if (fits_channels(m, "mean", ds->nmean, input) || fits_channels(m, "std", ds->nstd, input)) rc = -1;
        return rc;
}

int dt_ykey_loader(dt_ymap *m, dt_data_spec *ds, const dt_shape *input, int text)
{
        int rc = 0;
        long prefetch = 2;
        if (dt_ymap_int(m, "prefetch", &prefetch, 2, 0, 64, 0) < 0) rc = -1;
        ds->prefetch = (int)prefetch;
        const char *cache = NULL;
        dt_ykey_describe("path", "($DTRAIN_CACHE_DIR, else ~/.cache/dtrain)");
        int r = dt_ymap_str(m, "cache", &cache, NULL, 0);
        if (r < 0) rc = -1;
        if (r == 1) {
                if (!*cache || strlen(cache) >= DT_PATH_MAX) {
                        dt_yerr(m->d, m->y, dt_ymap_get(m, "cache"), "'cache' must be a directory path");
                        rc = -1;
                } else {
                        snprintf(ds->cache_dir, sizeof ds->cache_dir, "%s", cache);
                }
        }
        dt_ykey_describe("mapping", "-");
        yaml_node_t *an = dt_ymap_get(m, "augment");
        if (!an) return rc;
        dt_ymap a;
        if (dt_ymap_open(&a, m->y, an, "data.augment", m->d) < 0) {
                if (!a.node) return -1;
                rc = -1;
        }
        long crop = 0;
        if (dt_ymap_int(&a, "crop", &crop, 0, 0, 4096, 0) < 0) rc = -1;
        if (dt_ymap_bool(&a, "flip", &ds->augment.flip, 0, 0) < 0) rc = -1;
        ds->augment.crop = (int)crop;
        char why[256];
        if (text && (ds->augment.crop || ds->augment.flip)) {
                dt_yerr(m->d, m->y, an, "'augment' applies to images; format 'text' gives token ids");
                rc = -1;
        } else if (dt_augment_check(&ds->augment, input, why, sizeof why) < 0) {
                yaml_node_t *at = dt_ymap_get(&a, ds->augment.crop ? "crop" : "flip");
                dt_yerr(m->d, m->y, at ? at : an, "%s", why);
                rc = -1;
        }
        dt_ymap_close(&a);
        return rc;
}

void dt_ykey_free_paths(dt_source_spec *src)
{
        for (int i = 0; i < src->nxfiles; i++) free(src->xfiles[i]);
        for (int i = 0; i < src->nyfiles; i++) free(src->yfiles[i]);
        free(src->xfiles);
        free(src->yfiles);
        src->xfiles = src->yfiles = NULL;
        src->nxfiles = src->nyfiles = 0;
}
