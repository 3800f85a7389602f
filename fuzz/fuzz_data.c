/* fuzz/fuzz_data.c - shared by the data harnesses: after a reader accepted a file, load that file
 * through dt_dataset_load the way a spec names it (the same file as samples and as labels, for a
 * regression and for a classification loss, with a limit, as image rows), with the model input
 * taken from the array so the load gets past the shape check to labels, targets and
 * normalisation; then gather the first and last samples as a batch would. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_data.h"

/* a few samples through dt_dataset_gather, as the training loop takes them */
void fuzz_gather(const dt_dataset *ds)
{
        if (ds->n <= 0) return;
        long idx[2] = { 0, ds->n - 1 };
        size_t lr = ds->label_rows > 0 ? (size_t)ds->label_rows : 1;
        float *x = malloc(2 * (ds->dim ? ds->dim : 1) * sizeof *x);
        int32_t *y = malloc(2 * lr * sizeof *y);
        float *t = malloc(2 * (size_t)(ds->tdim > 0 ? ds->tdim : 1) * sizeof *t);
        if (!x || !y || !t) abort();
        dt_dataset_gather(ds, idx, 2, x, y, t);
        free(x);
        free(y);
        free(t);
}

static void load(const dt_source_spec *src, const dt_data_spec *data, const dt_shape *input, int classes)
{
        char msg[2048];
        dt_dataset ds;
        if (dt_dataset_load(&ds, src, data, input, classes, msg, sizeof msg) == 0) {
                fuzz_gather(&ds);
                dt_dataset_free(&ds);
        }
}

void fuzz_dataset(dt_data_format fmt, const char *path, const dt_array *x, int label_column, int header)
{
        /* the model input: the array's sample shape when it fits a dt_shape, else flat */
        dt_shape in;
        memset(&in, 0, sizeof in);
        size_t per = x->ndim >= 1 && x->dims[0] ? x->count / x->dims[0] : 0;
        if (per == 0 || per > INT32_MAX) return;
        if (x->ndim >= 2 && x->ndim - 1 <= DT_MAX_DIMS) {
                in.n = x->ndim - 1;
                for (int i = 1; i < x->ndim; i++) {
                        if (x->dims[i] > INT32_MAX) {
                                in.n = 1;
                                in.d[0] = (int)per;
                                break;
                        }
                        in.d[i - 1] = (int)x->dims[i];
                }
        } else {
                in.n = 1;
                in.d[0] = (int)per;
        }

        dt_source_spec src;
        memset(&src, 0, sizeof src);
        src.present = 1;
        src.format = fmt;
        snprintf(src.images, sizeof src.images, "%s", path);
        snprintf(src.labels, sizeof src.labels, "%s", path);
        src.label_column = label_column;
        src.header = header;
        dt_data_spec data;
        memset(&data, 0, sizeof data);

        load(&src, &data, &in, 0);              /* regression: the file as targets */
        load(&src, &data, &in, 256);            /* classification: the file as labels */
        data.classes = 3;
        data.scale = 2.0;
        data.scale_given = 1;
        data.mean = 0.5;
        data.std = 0.25;
        src.limit = 2;
        load(&src, &data, &in, 3);
        if (x->ndim == 3 || (x->ndim == 4 && x->dims[1] == 1)) {
                /* images as rows: (H,W) steps of features */
                size_t h = x->dims[x->ndim - 2], w = x->dims[x->ndim - 1];
                if (h <= INT32_MAX && w <= INT32_MAX) {
                        dt_shape rows = { .n = 2, .d = { (int)h, (int)w } };
                        src.sequence = DT_SEQ_ROWS;
                        load(&src, &data, &rows, 0);
                }
        }
}
