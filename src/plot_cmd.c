/* plot_cmd.c - `dtrain plot`: metrics.jsonl read with jansson, two panels (loss, accuracy) over
 * optimizer steps drawn on a canvas (plotting/canvas.h): cairo for PNG, SVG by cairo or by hand. */
#include "plot_cmd.h"

#include <errno.h>
#include <float.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli.h"
#include "plotting/canvas.h"
#include "util/common.h"

typedef struct series {
        double *x, *y;
        int n, cap;
} series;

enum { S_STEP, S_TRAIN, S_TEST, NS };   /* per-step train lines, per-epoch train, per-epoch test */

static void add(series *s, double x, double y)
{
        if (!isfinite(y)) return;
        if (s->n == s->cap) {
                s->cap = s->cap ? 2 * s->cap : 256;
                s->x = dt_realloc(s->x, (size_t)s->cap * sizeof *s->x);
                s->y = dt_realloc(s->y, (size_t)s->cap * sizeof *s->y);
        }
        s->x[s->n] = x;
        s->y[s->n++] = y;
}

/* A resume's marker: the points past its step are a dead run's, which the resumed run wrote again. */
static int drop_after(series *s, double step)
{
        int k = 0, n = s->n;
        for (int i = 0; i < s->n; i++)
                if (s->x[i] <= step) {
                        s->x[k] = s->x[i];
                        s->y[k++] = s->y[i];
                }
        s->n = k;
        return n - k;
}

static double num(json_t *o, const char *k)
{
        json_t *v = json_object_get(o, k);
        return json_is_number(v) ? json_number_value(v) : NAN;
}

/* loss[k], acc[k] for the three series. Returns the number of lines kept, -1 on error; *dropped
 * the lines a resume's marker orphaned. */
static int read_metrics(const char *path, series *loss, series *acc, int *dropped)
{
        FILE *f = fopen(path, "r");
        if (!f) {
                dt_error("cannot open %s: %s", path, strerror(errno));
                return -1;
        }
        char *line = NULL;
        size_t cap = 0;
        int n = 0, lineno = 0;
        while (getline(&line, &cap, f) > 0) {
                lineno++;
                json_error_t je;
                json_t *o = json_loads(line, 0, &je);
                if (!json_is_object(o)) {      /* a line cut by a crash: the rest still plots */
                        fprintf(stderr, "%s:%d: warning: not a JSON object (%s); line skipped\n", path, lineno, je.text);
                        json_decref(o);
                        continue;
                }
                double from = num(o, "resumed_from");
                if (isfinite(from)) {   /* train/metrics.h: orphaned steps go, as in TensorBoard */
                        for (int k = 0; k < NS; k++) {
                                int d = drop_after(&loss[k], from);
                                *dropped += d;
                                n -= d;
                                drop_after(&acc[k], from);
                        }
                        json_decref(o);
                        continue;
                }
                const char *split = json_string_value(json_object_get(o, "split"));
                double step = num(o, "step");
                int k = !split ? -1 : !strcmp(split, "step") ? S_STEP : !strcmp(split, "train") ? S_TRAIN
                                 : !strcmp(split, "test") ? S_TEST : -1;
                if (k >= 0 && isfinite(step)) {
                        int had = loss[k].n;
                        add(&loss[k], step, num(o, "loss"));
                        add(&acc[k], step, 100 * num(o, "accuracy"));
                        n += loss[k].n > had;   /* counted as the markers drop them: by their loss point */
                }
                json_decref(o);
        }
        free(line);
        fclose(f);
        return n;
}

/* A step of 1, 2 or 5 x 10^k giving about 5 ticks over span. */
static double tick_step(double span)
{
        double raw = span / 5, p = pow(10, floor(log10(raw))), m = raw / p;
        return (m < 1.5 ? 1 : m < 3.5 ? 2 : m < 7.5 ? 5 : 10) * p;
}

static const dt_rgb BLACK = { 0, 0, 0 }, GREY = { .85, .85, .85 }, DARK = { .3, .3, .3 };
static const dt_rgb COL[NS] = { { .62, .78, .93 }, { .12, .40, .75 }, { .90, .45, .05 } };
static const char *const LABEL[NS] = { "train (per log_every steps)", "train (epoch)", "test (epoch)" };

/* One panel in the box (x0, y0, w, h): axes, grid, the series, the legend. */
static void panel(dt_canvas *c, double x0, double y0, double w, double h, const char *title, const char *ylab,
                  const series *s, double xmax, int legend_low)
{
        double ymin = DBL_MAX, ymax = -DBL_MAX;
        for (int k = 0; k < NS; k++)
                for (int i = 0; i < s[k].n; i++) {
                        ymin = fmin(ymin, s[k].y[i]);
                        ymax = fmax(ymax, s[k].y[i]);
                }
        if (ymin > ymax) ymin = 0, ymax = 1;
        if (ymin >= 0 && ymin < 0.3 * ymax) ymin = 0;   /* from zero when zero is near */
        if (ymax - ymin < 1e-9) ymax = ymin + 1;
        double pad = 0.05 * (ymax - ymin);
        ymax += pad;
        if (ymin > 0) ymin -= pad;
        if (xmax <= 0) xmax = 1;
#define PX(v) (x0 + (v) / xmax * w)
#define PY(v) (y0 + h - ((v) - ymin) / (ymax - ymin) * h)
        char b[64];
        double ts = tick_step(ymax - ymin);
        for (double t = ceil(ymin / ts) * ts; t <= ymax + 1e-12; t += ts) {
                double xs[2] = { x0, x0 + w }, ys[2] = { PY(t), PY(t) };
                c->ops->polyline(c, xs, ys, 2, GREY, 1, 0);
                snprintf(b, sizeof b, "%g", fabs(t) < ts * 1e-6 ? 0.0 : t);
                c->ops->text(c, x0 - 6, PY(t) + 4, b, 11, 2, 0, DARK);
        }
        double xs_ = tick_step(xmax);
        for (double t = 0; t <= xmax + 1e-9; t += xs_) {
                double xs[2] = { PX(t), PX(t) }, ys[2] = { y0, y0 + h };
                c->ops->polyline(c, xs, ys, 2, GREY, 1, 0);
                snprintf(b, sizeof b, "%g", t);
                c->ops->text(c, PX(t), y0 + h + 16, b, 11, 1, 0, DARK);
        }
        c->ops->rect(c, x0, y0, w, h, BLACK, 0);
        c->ops->text(c, x0 + w / 2, y0 - 10, title, 14, 1, 0, BLACK);
        c->ops->text(c, x0 - 48, y0 + h / 2, ylab, 12, 1, 1, BLACK);
        c->ops->text(c, x0 + w / 2, y0 + h + 34, "optimizer step", 12, 1, 0, BLACK);
        for (int k = 0; k < NS; k++) {
                if (!s[k].n) continue;
                double *px = dt_malloc((size_t)s[k].n * sizeof *px), *py = dt_malloc((size_t)s[k].n * sizeof *py);
                for (int i = 0; i < s[k].n; i++) {
                        px[i] = PX(s[k].x[i]);
                        py[i] = PY(s[k].y[i]);
                }
                c->ops->polyline(c, px, py, s[k].n, COL[k], k == S_STEP ? 1.2 : 2, k == S_TEST);
                if (k != S_STEP)
                        for (int i = 0; i < s[k].n; i++) c->ops->dot(c, px[i], py[i], 3, COL[k]);
                free(px);
                free(py);
        }
        /* legend, inside the panel at the right: at the top for falling curves (loss), at the bottom
         * for rising ones (accuracy), on white */
        int nl = 0;
        for (int k = 0; k < NS; k++) nl += s[k].n > 0;
        double ly = legend_low ? y0 + h - 16 * nl - 2 : y0 + 16;
        c->ops->rect(c, x0 + w - 216, ly - 14, 210, 16 * nl + 4, (dt_rgb){ 1, 1, 1 }, 1);
        for (int k = 0; k < NS; k++) {
                if (!s[k].n) continue;
                double lx[2] = { x0 + w - 210, x0 + w - 185 }, lyy[2] = { ly - 4, ly - 4 };
                c->ops->polyline(c, lx, lyy, 2, COL[k], 2, k == S_TEST);
                c->ops->text(c, x0 + w - 180, ly, LABEL[k], 11, 0, 0, BLACK);
                ly += 16;
        }
#undef PX
#undef PY
}

/* The flags, for the help; the loop below reads them by hand (-o takes the next word whatever
 * it is, as a file name may start with '-'). */
static const dt_cli_opt opts[] = {
        { "output", required_argument, 'o', "FILE", "the picture (default RUN_DIR/curves.png, or .svg without cairo)" },
        { NULL, 0, 0, NULL, NULL },
};

const dt_cli_cmd dt_plot_cmd = {
        .name = "plot", .synopsis = "plot RUN_DIR", .summary = "draw a run's loss and accuracy curves (PNG or SVG)",
        .usage = "usage: dtrain plot RUN_DIR [-o FILE.png|FILE.svg]\n"
                 "\n"
                 "Draws RUN_DIR/metrics.jsonl: loss and accuracy over optimizer steps, training per\n"
                 "log_every steps and per epoch, test per epoch. PNG needs dtrain built with cairo.\n",
        .opts = opts,
};

int dt_cmd_plot(int argc, char **argv)
{
        const char *dir = NULL, *out = NULL;
        for (int i = 1; i < argc; i++) {
                if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
                        dt_cli_help(&dt_plot_cmd, stdout);
                        return 0;
                } else if (!strcmp(argv[i], "-o") || !strcmp(argv[i], "--output")) {
                        if (++i >= argc) {
                                fprintf(stderr, "dtrain plot: error: %s needs FILE.png or FILE.svg\n", argv[i - 1]);
                                return DT_EXIT_USAGE;
                        }
                        out = argv[i];
                } else if (argv[i][0] == '-' && argv[i][1]) {
                        fprintf(stderr, "dtrain plot: error: unknown option '%s'\ntry 'dtrain plot --help'\n", argv[i]);
                        return DT_EXIT_USAGE;
                } else if (!dir) {
                        dir = argv[i];
                } else {
                        fprintf(stderr, "dtrain plot: error: unexpected argument '%s'\n", argv[i]);
                        return DT_EXIT_USAGE;
                }
        }
        if (!dir) {
                fprintf(stderr, "dtrain plot: error: missing RUN_DIR\ntry 'dtrain plot --help'\n");
                return DT_EXIT_USAGE;
        }
        char def[DT_PATH_MAX], mpath[DT_PATH_MAX];
        if (!out) {
                snprintf(def, sizeof def, "%s/curves.%s", dir, dt_canvas_have_cairo() ? "png" : "svg");
                out = def;
        }
        size_t ol = strlen(out);
        int png = ol > 4 && !strcasecmp(out + ol - 4, ".png"), svg = ol > 4 && !strcasecmp(out + ol - 4, ".svg");
        if (!png && !svg) {
                fprintf(stderr, "dtrain plot: error: -o %s: the name must end in .png or .svg\n", out);
                return DT_EXIT_USAGE;
        }
        if (png && !dt_canvas_have_cairo()) {
                fprintf(stderr, "dtrain plot: error: -o %s: this dtrain was built without cairo, so it writes SVG "
                        "only; use -o FILE.svg (or apt-get install libcairo2-dev and reconfigure)\n", out);
                return DT_EXIT_USAGE;
        }
        snprintf(mpath, sizeof mpath, "%s/metrics.jsonl", dir);
        series loss[NS] = { 0 }, acc[NS] = { 0 };
        int dropped = 0;
        int n = read_metrics(mpath, loss, acc, &dropped);
        int rc = 0;
        if (n < 0) {
                rc = DT_EXIT_DATA;
                goto done;
        }
        if (n == 0) {
                dt_error("%s has no metrics lines to plot", mpath);
                rc = DT_EXIT_DATA;
                goto done;
        }
        double xmax = 0;
        for (int k = 0; k < NS; k++)
                for (int i = 0; i < loss[k].n; i++) xmax = fmax(xmax, loss[k].x[i]);
        dt_canvas c;
        double W = 900, H = 760;
        /* SVG by hand even with cairo: its text stays text (searchable, small) */
        if ((png ? dt_canvas_cairo(&c, out, W, H) : dt_canvas_svg(&c, out, W, H)) < 0) {
                dt_error("cannot write %s: %s", out, strerror(errno));
                rc = DT_EXIT_DATA;
                goto done;
        }
        char title[DT_PATH_MAX + 32];
        snprintf(title, sizeof title, "%s: loss", dir);
        panel(&c, 80, 40, 780, 270, title, "loss", loss, xmax, 0);
        snprintf(title, sizeof title, "%s: accuracy", dir);
        panel(&c, 80, 420, 780, 270, title, "accuracy (%)", acc, xmax, 1);
        if (c.ops->finish(&c) < 0) {
                dt_error("cannot write %s: %s", out, strerror(errno));
                rc = DT_EXIT_DATA;
                goto done;
        }
        printf("wrote %s (%d metrics lines", out, n);
        if (dropped)    /* a kill after a checkpoint: its resume wrote those steps again */
                printf("; %d line%s of a killed run past the checkpoint it was resumed from left out", dropped,
                       dropped == 1 ? "" : "s");
        printf(")\n");
done:
        for (int k = 0; k < NS; k++) {
                free(loss[k].x); free(loss[k].y); free(acc[k].x); free(acc[k].y);
        }
        return rc;
}
