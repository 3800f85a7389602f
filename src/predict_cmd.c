/* predict_cmd.c - `dtrain predict MODEL.yaml --weights FILE --input FILE.npy|.csv [-o OUT]`: each
 * sample's class probabilities (softmax of the outputs; --logits for the raw outputs) or, for a
 * regression model, its outputs, as CSV (stdout or OUT.csv) or a float32 .npy (OUT.npy). The
 * input is normalised as the spec's training data is (data.scale, mean, std per channel), less
 * what --no-scale or --preprocessed say was done already; float input whose range says it was
 * scaled already is refused rather than scaled twice. */
#include "eval_cmd.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "cli.h"
#include "infer.h"
#include "data/data.h"
#include "util/common.h"

/* What was done to the input before: nothing (raw values like the training files'), data.scale
 * (--no-scale: PyTorch's ToTensor() gives bytes / 255), or scale, mean and std (--preprocessed:
 * after Normalize()). AUTO is raw unless the values' range contradicts it. */
typedef enum { IN_AUTO, IN_RAW, IN_SCALED, IN_NORMALISED } in_form;

typedef struct pred_opts {
        dt_infer_opts io;
        const char *input, *output;
        int logits;
        in_form form;
        const char *form_flag;
} pred_opts;

enum { O_WEIGHTS = 256, O_RESUME, O_OUT, O_INPUT, O_LOGITS, O_BATCH, O_THREADS, O_RAW, O_NOSCALE, O_PREP, O_SET };

static const dt_cli_opt opts[] = {
        { "input", required_argument, O_INPUT, "FILE", "samples: .npy (N, input...) or .csv" },
        { "no-scale", no_argument, O_NOSCALE, NULL,
          "the input is scaled already (e.g. PyTorch's ToTensor(): [0, 1]);\n"
          "data.mean and data.std are still applied" },
        { "preprocessed", no_argument, O_PREP, NULL,
          "the input is normalised already (ToTensor() and Normalize()):\n"
          "given to the model as it is" },
        { "raw", no_argument, O_RAW, NULL,
          "apply the spec's whole normalisation even where the input's\n"
          "range looks scaled already" },
        { "weights", required_argument, O_WEIGHTS, "FILE", "weights (default: as for eval)" },
        { "resume", required_argument, O_RESUME, "DIR, --out DIR", "as for eval" },
        { "out", required_argument, O_OUT, "DIR", NULL },      /* on --resume's line */
        { "set", required_argument, O_SET, "KEY=VALUE", "as for eval: after the run's recorded overrides (repeatable)" },
        { "output", required_argument, 'o', "OUT", "OUT.csv or OUT.npy (float32 (N, classes)); default CSV on stdout" },
        { "logits", no_argument, O_LOGITS, NULL, "raw outputs instead of probabilities" },
        { "batch", required_argument, O_BATCH, "N", "samples per forward pass (default the smaller of train.eval_batch and train.batch)" },
        { "threads", required_argument, O_THREADS, "N", "BLAS threads (default OPENBLAS_NUM_THREADS, else 1)" },
        { NULL, 0, 0, NULL, NULL },
};

const dt_cli_cmd dt_predict_cmd = {
        .name = "predict", .synopsis = "predict MODEL.yaml",
        .summary = "class probabilities or outputs per sample of an input file",
        .usage = "usage: dtrain predict MODEL.yaml --input FILE.npy|FILE.csv [--weights FILE] [-o OUT] [options]\n"
                 "\n"
                 "Each sample's class probabilities (softmax_cross_entropy) or outputs (mse). The input is\n"
                 "normalised as the spec's training data is (data.scale, mean, std); float input that looks\n"
                 "scaled or normalised already is refused unless a flag says what was done. A CSV has one\n"
                 "sample per row, every column a value, an optional header line.\n",
        .opts = opts,
};

static int parse(int argc, char **argv, pred_opts *o)
{
        memset(o, 0, sizeof *o);
        o->io.cmd = "predict";
        dt_cli_getopt g;
        dt_cli_getopt_init(&g, &dt_predict_cmd);
        int c;
        long long v;
        while ((c = dt_cli_next(&g, argc, argv)) != -1) {
                switch (c) {
                case 'h': dt_cli_help(&dt_predict_cmd, stdout); return 1;
                case O_WEIGHTS: o->io.weights = optarg; break;
                case O_RESUME: o->io.resume = optarg; break;
                case O_OUT: o->io.out = optarg; break;
                case O_SET: dt_sets_add(&o->io.sets, optarg, NULL); break;
                case O_INPUT: o->input = optarg; break;
                case 'o': o->output = optarg; break;
                case O_LOGITS: o->logits = 1; break;
                case O_RAW:
                case O_NOSCALE:
                case O_PREP: {
                        in_form f = c == O_RAW ? IN_RAW : c == O_NOSCALE ? IN_SCALED : IN_NORMALISED;
                        if (o->form && o->form != f) {
                                fprintf(stderr, "dtrain predict: error: %s and %s contradict each other; give one\n",
                                        o->form_flag, argv[optind - 1]);
                                return DT_EXIT_USAGE;
                        }
                        o->form = f;
                        o->form_flag = argv[optind - 1];
                        break;
                }
                case O_BATCH: if (dt_cli_int("predict", "--batch", optarg, 1, 1048576, &v)) return DT_EXIT_USAGE; o->io.batch = (int)v; break;
                case O_THREADS: if (dt_cli_int("predict", "--threads", optarg, 1, 1024, &v)) return DT_EXIT_USAGE; o->io.threads = (int)v; break;
                default: return dt_cli_bad_option("predict", argv, 0);
                }
        }
        if (optind >= argc) {
                fprintf(stderr, "dtrain predict: error: missing MODEL.yaml\ntry 'dtrain predict --help'\n");
                return DT_EXIT_USAGE;
        }
        o->io.model = argv[optind++];
        if (optind < argc) {
                fprintf(stderr, "dtrain predict: error: unexpected argument '%s'\n", argv[optind]);
                return DT_EXIT_USAGE;
        }
        if (!o->input) {
                fprintf(stderr, "dtrain predict: error: --input FILE.npy or FILE.csv is required\n");
                return DT_EXIT_USAGE;
        }
        if (!!o->io.weights + !!o->io.resume + !!o->io.out > 1) {
                fprintf(stderr, "dtrain predict: error: give one of --weights, --resume and --out\n");
                return DT_EXIT_USAGE;
        }
        return 0;
}

static int ends(const char *s, const char *suf)
{
        size_t n = strlen(s), k = strlen(suf);
        return n >= k && !strcasecmp(s + n - k, suf);
}

/* A CSV of numbers, one sample per row, every column a feature; a first line that is not numbers
 * is a header. x is malloc'd (rows x cols). */
static int read_csv(const char *path, float **x, long *rows, long *cols)
{
        FILE *f = fopen(path, "r");
        if (!f) {
                dt_error("cannot open %s: %s", path, strerror(errno));
                return DT_EXIT_DATA;
        }
        char *line = NULL;
        size_t cap = 0, n = 0, ncap = 0;
        long r = 0, c = -1, lineno = 0;
        float *v = NULL;
        int rc = 0;
        while (getline(&line, &cap, f) > 0) {
                lineno++;
                char *p = line, *end;
                line[strcspn(line, "\r\n")] = 0;
                if (!*p) continue;
                long k = 0;
                for (;;) {
                        errno = 0;
                        double d = strtod(p, &end);
                        if (end == p || errno || !isfinite(d)) {
                                if (lineno == 1 && r == 0) goto next;      /* a header */
                                dt_error("%s:%ld: column %ld is not a finite number", path, lineno, k + 1);
                                rc = DT_EXIT_DATA;
                                goto out;
                        }
                        if (n == ncap) v = dt_realloc(v, (ncap = ncap ? 2 * ncap : 4096) * sizeof *v);
                        v[n++] = (float)d;
                        k++;
                        p = end + strspn(end, " \t");
                        if (*p == ',') p++;
                        else if (!*p) break;
                        else {
                                dt_error("%s:%ld: expected ',' after column %ld", path, lineno, k);
                                rc = DT_EXIT_DATA;
                                goto out;
                        }
                }
                if (c >= 0 && k != c) {
                        dt_error("%s:%ld: %ld columns, the rows before have %ld", path, lineno, k, c);
                        rc = DT_EXIT_DATA;
                        goto out;
                }
                c = k;
                r++;
        next:;
        }
        if (!r) {
                dt_error("%s: no rows of numbers", path);
                rc = DT_EXIT_DATA;
        }
out:
        free(line);
        fclose(f);
        if (rc) free(v);
        else *x = v, *rows = r, *cols = c;
        return rc;
}

/* The scale the spec's training data get (dataset.c's set_norm): data.scale, else 1/255 for the
 * bytes of an IDX source, else 1. */
static double spec_scale(const dt_data_spec *d)
{
        if (d->scale_given) return d->scale;
        if (d->train.format == DT_FMT_IDX) return 1.0 / 255;
        return d->scale != 0 ? d->scale : 1.0;
}

/* The mean and std of value j of a sample of per values: per channel when data.mean or data.std
 * are lists (channel c holds values [c * per / nc, (c + 1) * per / nc)), as training has them. */
static void chan_norm(const dt_data_spec *d, size_t per, size_t j, double *mean, double *std)
{
        int nc = DT_MAX(1, DT_MAX(d->nmean, d->nstd));
        size_t cs = per / (size_t)nc ? per / (size_t)nc : 1;
        size_t c = (j / cs) % (size_t)nc;
        *mean = d->nmean ? d->mean_c[d->nmean == 1 ? 0 : c] : d->mean;
        double sd = d->nstd ? d->std_c[d->nstd == 1 ? 0 : c] : d->std;
        *std = sd == 0 ? 1.0 : sd;
}

/* Without --raw, --no-scale or --preprocessed, float input is taken as raw values like the
 * training files' unless its range contradicts that: values within [-1, 1] that the spec scales
 * down (bytes / 255 a second time: every sample came out as one class), or negative values for a
 * model trained on bytes. Such input is refused (exit 3) with the flag that says what was done. */
static int check_form(const pred_opts *o, const dt_data_spec *d, double scale, double lo, double hi)
{
        char r[96];
        snprintf(r, sizeof r, "[%.4g, %.4g]", lo, hi);
        double amax = DT_MAX(fabs(lo), fabs(hi));
        if (scale <= 0.5 && amax > 0 && amax <= 1) {
                dt_error("%s: float values in %s, but the spec scales the model's input by %g (data.scale%s): "
                         "this input looks scaled already and would be scaled twice; give --no-scale if it is "
                         "(e.g. PyTorch's ToTensor()), --preprocessed if data.mean and data.std were applied too "
                         "(Normalize()), or --raw to apply the spec's scale anyway",
                         o->input, r, scale, d->scale_given ? "" : ", the default for IDX bytes");
                return DT_EXIT_DATA;
        }
        if (d->train.format == DT_FMT_IDX && lo < 0) {
                dt_error("%s: float values in %s, but the model was trained on bytes (IDX, 0 to 255): this input "
                         "looks normalised already; give --preprocessed if data.scale, data.mean and data.std were "
                         "applied (e.g. PyTorch's ToTensor() and Normalize()), or --raw to apply them anyway",
                         o->input, r);
                return DT_EXIT_DATA;
        }
        return 0;
}

/* The input as floats (n, per), normalised like the training data less what was done already. */
static int read_input(const pred_opts *o, const dt_infer *in, float **x, long *n)
{
        const dt_data_spec *d = &in->su.spec.data;
        size_t per = dt_shape_size(&in->su.g.input), count;
        double scale = spec_scale(d);
        int floats;
        dt_array a = { 0 };
        if (ends(o->input, ".csv")) {
                long rows, cols;
                int rc = read_csv(o->input, x, &rows, &cols);
                if (rc) return rc;
                if ((size_t)cols != per) {
                        dt_error("%s: %ld columns per row but the model's input has %zu values", o->input, cols, per);
                        free(*x);
                        *x = NULL;
                        return DT_EXIT_DATA;
                }
                count = (size_t)rows * per;
                floats = 1;     /* text: nothing says whether the numbers are bytes */
        } else if (ends(o->input, ".npy") || ends(o->input, ".npy.gz")) {
                char msg[DT_PATH_MAX + 256] = "";
                if (dt_npy_read(o->input, &a, msg, sizeof msg)) {
                        dt_error("%s", msg);
                        return DT_EXIT_DATA;
                }
                if (!a.count || a.count % per) {
                        dt_error("%s: %zu values is not a whole number of samples of the model's input (%zu values each)",
                                 o->input, a.count, per);
                        dt_array_free(&a);
                        return DT_EXIT_DATA;
                }
                count = a.count;
                floats = a.dtype == DT_DTYPE_F32 || a.dtype == DT_DTYPE_F64;
                *x = dt_malloc(count * sizeof **x);
        } else {
                dt_error("--input %s: expected a .npy or .csv file", o->input);
                return DT_EXIT_USAGE;
        }
        double lo = INFINITY, hi = -INFINITY;
        for (size_t i = 0; i < count; i++) {
                double v = a.data ? dt_array_get(&a, i) : (*x)[i];
                lo = v < lo ? v : lo;
                hi = v > hi ? v : hi;
        }
        int rc = o->form == IN_AUTO && floats ? check_form(o, d, scale, lo, hi) : 0;
        if (o->form == IN_SCALED || o->form == IN_NORMALISED) scale = 1;
        double *mean = dt_malloc(per * sizeof *mean), *std = dt_malloc(per * sizeof *std);
        for (size_t j = 0; j < per; j++) {
                mean[j] = 0, std[j] = 1;
                if (o->form != IN_NORMALISED) chan_norm(d, per, j, &mean[j], &std[j]);
        }
        for (size_t i = 0, j = 0; !rc && i < count; i++, j = j + 1 == per ? 0 : j + 1) {
                double v = a.data ? dt_array_get(&a, i) : (*x)[i];
                (*x)[i] = (float)((v * scale - mean[j]) / std[j]);
        }
        free(mean);
        free(std);
        dt_array_free(&a);
        if (rc) {
                free(*x);
                *x = NULL;
                return rc;
        }
        *n = (long)(count / per);
        return 0;
}

static void npy_header(FILE *f, long n, int R, int C)
{
        char h[128];
        int k = R > 1 ? snprintf(h, sizeof h, "{'descr': '<f4', 'fortran_order': False, 'shape': (%ld, %d, %d), }", n, R, C)
                      : snprintf(h, sizeof h, "{'descr': '<f4', 'fortran_order': False, 'shape': (%ld, %d), }", n, C);
        int total = 10 + k + 1, pad = (64 - total % 64) % 64;      /* header padded to 64 bytes, ends in \n */
        unsigned short hl = (unsigned short)(k + pad + 1);
        fwrite("\x93NUMPY\x01\x00", 1, 8, f);
        fputc(hl & 0xff, f);
        fputc(hl >> 8, f);
        fwrite(h, 1, (size_t)k, f);
        for (int i = 0; i < pad; i++) fputc(' ', f);
        fputc('\n', f);
}

int dt_cmd_predict(int argc, char **argv)
{
        pred_opts o;
        int rc = parse(argc, argv, &o);
        if (rc) {
                dt_sets_free(&o.io.sets);
                return rc == 1 ? 0 : rc;
        }
        dt_infer in;
        float *x = NULL, *row = NULL;
        FILE *out = NULL;
        long n = 0;
        if ((rc = dt_infer_open(&in, &o.io))) goto done;
        if ((rc = read_input(&o, &in, &x, &n))) goto done;
        int npy = o.output && ends(o.output, ".npy");
        /* standard output through a stream of its own, fully buffered into a pipe or a file: stdout
         * itself goes line by line (main.c), a write per sample (100k samples: 0.37 s against 0.12) */
        fflush(stdout);
        int fd = o.output ? -1 : dup(STDOUT_FILENO);
        out = o.output ? fopen(o.output, npy ? "wb" : "w") : fd >= 0 ? fdopen(fd, "w") : NULL;
        if (!out) {
                dt_error("cannot write %s: %s", o.output ? o.output : "standard output", strerror(errno));
                if (fd >= 0) close(fd);
                rc = DT_EXIT_DATA;
                goto done;
        }
        int R = in.su.rows, C = in.su.C, probs = in.su.spec.loss == DT_LOSS_SOFTMAX_XENT && !o.logits;
        size_t per = dt_shape_size(&in.su.g.input);
        if (npy) {
                npy_header(out, n, R, C);
        } else {
                fprintf(out, "sample%s%s", R > 1 ? ",row" : "", in.su.spec.loss == DT_LOSS_SOFTMAX_XENT ? ",predicted" : "");
                for (int c = 0; c < C; c++) fprintf(out, ",%s%d", probs ? "p" : "y", c);
                fputc('\n', out);
        }
        row = dt_malloc((size_t)C * sizeof *row);
        for (long s0 = 0; s0 < n; s0 += in.B) {
                int b = (int)DT_MIN((long)in.B, n - s0);
                memcpy(in.su.g.act[0], x + (size_t)s0 * per, (size_t)b * per * sizeof *x);
                const float *y = dt_infer_forward(&in, b);
                for (long r = 0; r < (long)b * R; r++) {
                        const float *z = y + r * C;
                        int best = 0;
                        for (int c = 0; c < C; c++) {
                                row[c] = z[c];
                                if (z[c] > z[best]) best = c;
                        }
                        if (probs) {    /* softmax, shifted by the max */
                                double sum = 0;
                                for (int c = 0; c < C; c++) sum += exp((double)z[c] - z[best]);
                                for (int c = 0; c < C; c++) row[c] = (float)(exp((double)z[c] - z[best]) / sum);
                        }
                        if (npy) {
                                fwrite(row, sizeof *row, (size_t)C, out);
                                continue;
                        }
                        fprintf(out, "%ld", s0 + r / R);
                        if (R > 1) fprintf(out, ",%ld", r % R);
                        if (in.su.spec.loss == DT_LOSS_SOFTMAX_XENT) fprintf(out, ",%d", best);
                        for (int c = 0; c < C; c++) fprintf(out, ",%.6g", row[c]);
                        fputc('\n', out);
                }
        }
        if (fflush(out) || ferror(out)) {
                dt_error("cannot write %s: %s", o.output ? o.output : "standard output", strerror(errno));
                rc = DT_EXIT_DATA;
        }
done:
        if (out && fclose(out) && !rc) {
                dt_error("cannot write %s: %s", o.output ? o.output : "standard output", strerror(errno));
                rc = DT_EXIT_DATA;
        }
        free(x);
        free(row);
        dt_infer_close(&in);
        dt_sets_free(&o.io.sets);
        return rc;
}
