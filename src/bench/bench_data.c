/* bench/bench_data.c - `dtrain bench` on the model's own training data: batches of this rank's
 * slice read, converted and augmented as a run does (data/loader.c), synchronously or by the
 * loader thread; whole steps timed both ways in alternating blocks, and how much of the data time
 * the thread hides (1 - the time steps waited for their batch / the time a synchronous batch
 * takes). When the model's data cannot be opened bench.c keeps its random samples. */
#include "bench/bench_data.h"

#include <stdlib.h>
#include <string.h>
#include "bench/bench.h"
#include "util/stats.h"
#include "spec/model_spec.h"

static void range(void *ud, int B, int *lo, int *hi)
{
        const dt_bench_data *d = ud;
        (void)B;
        *lo = d->lo;
        *hi = d->lo + d->b;
}

int dt_bench_data_open(dt_bench_data *d, const dt_setup *su, int B, int lo, int b, char *why, size_t len)
{
        memset(d, 0, sizeof *d);
        const dt_model_spec *s = &su->spec;
        int classes = s->loss == DT_LOSS_SOFTMAX_XENT ? (s->data.classes ? s->data.classes : su->C) : 0;
        dt_load_opts lo_ = { .part = 0, .parts = 1, .scan_max = (unsigned long long)1 << 30, .dir = s->dir };
        char msg[DT_PATH_MAX + 256];
        if (dt_dataset_open(&d->ds, &s->data.train, &s->data, &s->input, classes, &lo_, msg, sizeof msg)) {
                snprintf(why, len, "%s", msg);
                return -1;
        }
        if (d->ds.n < B || (d->ds.label_rows != su->rows && dt_dataset_labelled(&d->ds)) ||
            (d->ds.target && (long)d->ds.tdim != (long)su->rows * su->C)) {
                snprintf(why, len, "the training data (%ld samples) does not fit a batch of %d of this model", d->ds.n, B);
                dt_dataset_free(&d->ds);
                return -1;
        }
        dt_dataset_probe_map(&d->ds);   /* what a read maps, for the memory plan */
        d->B = B;
        d->lo = lo;
        d->b = b;
        d->seed = s->train.seed;
        d->prefetch = s->data.prefetch > 0 ? s->data.prefetch : 2;
        d->n = d->ds.n / B * B;         /* whole batches only: every step feeds b samples */
        d->perm = dt_malloc((size_t)d->ds.n * sizeof *d->perm);
        d->L[0] = dt_loader_new(&d->ds, 0, b, range, d);
        d->L[1] = dt_loader_new(&d->ds, d->prefetch, b, range, d);
        d->run_mode = s->data.prefetch > 0;
        d->mode = d->run_mode;
        d->epoch = -1;
        d->have = 1;
        return 0;
}

void dt_bench_data_close(dt_bench_data *d)
{
        if (!d->have) return;
        dt_loader_free(d->L[0]);
        dt_loader_free(d->L[1]);
        free(d->perm);
        dt_dataset_free(&d->ds);
        memset(d, 0, sizeof *d);
}

/* the next epoch's permutation in the current mode's loader */
static void next_epoch(dt_bench_data *d)
{
        dt_loader_stop(d->L[0]);
        dt_loader_stop(d->L[1]);
        d->epoch++;
        dt_shuffle(d->perm, d->ds.n, d->seed, d->epoch);
        d->pos = 0;
        dt_loader_start(d->L[d->mode], d->perm, d->n, 0, d->B, d->seed, d->epoch, 1);
}

void dt_bench_data_mode(dt_bench_data *d, int threaded)
{
        if (d->mode == threaded && d->epoch >= 0) return;
        d->mode = threaded;
        next_epoch(d);
}

void dt_bench_data_feed(dt_bench_data *d, dt_backend *be, float *x, int32_t *lab, float *tgt)
{
        if (d->epoch < 0 || d->pos >= d->n) next_epoch(d);
        const dt_batch *bt = dt_loader_next(d->L[d->mode]);
        be->ops->to_device(be, x, bt->x, (size_t)d->b * d->ds.dim);
        size_t lr = (size_t)(d->ds.label_rows > 0 ? d->ds.label_rows : 1);
        if (lab && bt->y) memcpy(lab, bt->y, (size_t)d->b * lr * sizeof *lab);
        if (tgt && bt->t) memcpy(tgt, bt->t, (size_t)d->b * (size_t)d->ds.tdim * sizeof *tgt);
        dt_loader_release(d->L[d->mode]);
        d->pos += d->B;
        d->fed++;
}

/* median of v[0..n) */
static double med(double *v, int n)
{
        return n ? dt_median(v, n) : 0;
}

void dt_bench_data_compare(dt_bench_data *d, int iters, double (*step)(void *), void *ud)
{
        /* blocks of 'k' steps per mode, alternating, so both see the same drift of a shared machine */
        int k = DT_MAX(2, iters / 4), rounds = DT_MAX(2, (iters + k - 1) / k);
        double *s[2], *w[2];
        int ns[2] = { 0, 0 };
        w[0] = dt_malloc((size_t)rounds * k * sizeof *w[0]);
        w[1] = dt_malloc((size_t)rounds * k * sizeof *w[1]);
        s[0] = dt_malloc((size_t)rounds * k * sizeof *s[0]);
        s[1] = dt_malloc((size_t)rounds * k * sizeof *s[1]);
        for (int r = 0; r < rounds; r++)
                for (int m = 0; m < 2; m++) {
                        dt_bench_data_mode(d, m);
                        step(ud);       /* the first step of a block fills the ring: not timed */
                        double waited, prepared;
                        dt_loader_times(d->L[m], &waited, &prepared);
                        for (int i = 0; i < k; i++) {
                                s[m][ns[m]] = step(ud);
                                dt_loader_times(d->L[m], &waited, &prepared);
                                w[m][ns[m]++] = waited;         /* synchronous: the preparation itself */
                        }
                }
        d->step_ms[0] = 1e3 * med(s[0], ns[0]);
        d->step_ms[1] = 1e3 * med(s[1], ns[1]);
        d->prep_ms = 1e3 * med(w[0], ns[0]);
        d->wait_ms = 1e3 * med(w[1], ns[1]);
        dt_bench_data_mode(d, d->run_mode);
        free(s[0]);
        free(s[1]);
        free(w[0]);
        free(w[1]);
}

size_t dt_bench_data_bytes(const dt_bench_data *d)
{
        if (!d->have) return 0;
        return dt_dataset_bytes(&d->ds) + (size_t)d->ds.n * sizeof(long) + dt_loader_bytes(&d->ds, 0, d->b) +
               dt_loader_bytes(&d->ds, d->prefetch, d->b);
}

json_t *dt_bench_data_report(const dt_bench_data *d, double data_ms, double step_ms, FILE *f)
{
        json_t *j = json_object();
        double hidden = d->prep_ms > 0 ? 1.0 - d->wait_ms / d->prep_ms : 0;
        hidden = hidden < 0 ? 0 : hidden > 1 ? 1 : hidden;
        double sps[2] = { d->step_ms[0] > 0 ? d->B / (d->step_ms[0] / 1e3) : 0,
                          d->step_ms[1] > 0 ? d->B / (d->step_ms[1] / 1e3) : 0 };
        json_object_set_new(j, "source", json_string(d->ds.disk ? "disk" : "memory"));
        json_object_set_new(j, "samples", json_integer(d->ds.n));
        json_object_set_new(j, "batch_ms", json_real(d->prep_ms));
        json_object_set_new(j, "row_ms", json_real(data_ms));
        json_object_set_new(j, "share", json_real(step_ms > 0 ? data_ms / step_ms : 0));
        json_object_set_new(j, "loader", json_boolean(d->run_mode));
        json_object_set_new(j, "prefetch", json_integer(d->prefetch));
        json_object_set_new(j, "wait_ms", json_real(d->wait_ms));
        json_object_set_new(j, "hidden", json_real(hidden));
        json_object_set_new(j, "step_ms_sync", json_real(d->step_ms[0]));
        json_object_set_new(j, "step_ms_loader", json_real(d->step_ms[1]));
        json_object_set_new(j, "samples_per_sec_sync", json_real(sps[0]));
        json_object_set_new(j, "samples_per_sec_loader", json_real(sps[1]));
        if (f) {
                fprintf(f, "data: %s, %ld samples (%s); a batch of %d takes %.3f ms to read, convert and augment "
                        "(%.2f%% of the step); the step spends %.3f ms on it (%.2f%%, the (data) row) %s\n",
                        d->ds.disk ? "read from disk per batch" : "in memory", d->ds.n,
                        d->ds.aug.crop || d->ds.aug.flip ? "augmented" : "no augmentation", d->b, d->prep_ms,
                        step_ms > 0 ? 100 * d->prep_ms / step_ms : 0, data_ms, step_ms > 0 ? 100 * data_ms / step_ms : 0,
                        d->run_mode ? "taking it from the loader thread" : "preparing it itself (data.prefetch: 0)");
                fprintf(f, "loader: thread with %d slot%s hides %.0f%% of it (%.3f ms waited per step); step %.3f ms "
                        "(%.0f samples/s) with the thread, %.3f ms (%.0f samples/s) without\n", d->prefetch,
                        d->prefetch == 1 ? "" : "s", 100 * hidden, d->wait_ms, d->step_ms[1], sps[1], d->step_ms[0],
                        sps[0]);
        }
        return j;
}
