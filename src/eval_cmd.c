/* eval_cmd.c - `dtrain eval MODEL.yaml [--weights FILE|--resume DIR] [--data test|train]`: the
 * loss and accuracy on a split exactly as training's evaluation computes them (same data loading,
 * normalisation and loss), and for classifiers a confusion matrix; a table, or JSON with --json. */
#include "eval_cmd.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli.h"
#include "infer.h"
#include "data/data.h"
#include "train/stepper.h"
#include "util/common.h"

typedef struct eval_opts {
        dt_infer_opts io;
        int test;               /* 1: data.test, 0: data.train */
        int json;
} eval_opts;

enum { O_WEIGHTS = 256, O_RESUME, O_OUT, O_DATA, O_JSON, O_BATCH, O_THREADS, O_SET };

static const dt_cli_opt opts[] = {
        { "weights", required_argument, O_WEIGHTS, "FILE", "weights (safetensors, ours or a PyTorch state_dict)" },
        { "resume", required_argument, O_RESUME, "DIR",
          "a run directory's latest checkpoint, a checkpoint directory,\n"
          "or RUN/checkpoints/best (or latest)" },
        { "out", required_argument, O_OUT, "DIR", "the run directory's model.safetensors (default runs/<model name>)" },
        { "set", required_argument, O_SET, "KEY=VALUE",
          "override a spec key (repeatable); the run's recorded\n"
          "overrides (RUN/overrides.yaml) apply first" },
        { "data", required_argument, O_DATA, "test|train", "the split (default test)" },
        { "json", no_argument, O_JSON, NULL, "one JSON object instead of the table" },
        { "batch", required_argument, O_BATCH, "N", "samples per forward pass (default the smaller of train.eval_batch and train.batch)" },
        { "threads", required_argument, O_THREADS, "N", "BLAS threads (default OPENBLAS_NUM_THREADS, else 1)" },
        { NULL, 0, 0, NULL, NULL },
};

const dt_cli_cmd dt_eval_cmd = {
        .name = "eval", .synopsis = "eval MODEL.yaml",
        .summary = "loss, accuracy and confusion matrix of trained weights on a split",
        .usage = "usage: dtrain eval MODEL.yaml [--weights FILE | --resume DIR | --out DIR] [options]\n"
                 "\n"
                 "Loss and accuracy of trained weights on a split of the spec's data, computed as training's\n"
                 "evaluation does, and for classifiers the confusion matrix with recall and precision.\n",
        .opts = opts,
};

static int parse(int argc, char **argv, eval_opts *o)
{
        memset(o, 0, sizeof *o);
        o->io.cmd = "eval";
        o->test = 1;
        dt_cli_getopt g;
        dt_cli_getopt_init(&g, &dt_eval_cmd);
        int c;
        long long v;
        while ((c = dt_cli_next(&g, argc, argv)) != -1) {
                switch (c) {
                case 'h': dt_cli_help(&dt_eval_cmd, stdout); return 1;
                case O_WEIGHTS: o->io.weights = optarg; break;
                case O_RESUME: o->io.resume = optarg; break;
                case O_OUT: o->io.out = optarg; break;
                case O_SET: dt_sets_add(&o->io.sets, optarg, NULL); break;
                case O_DATA:
                        if (strcmp(optarg, "test") && strcmp(optarg, "train")) {
                                fprintf(stderr, "dtrain eval: error: --data must be test or train, got '%s'\n", optarg);
                                return DT_EXIT_USAGE;
                        }
                        o->test = !strcmp(optarg, "test");
                        break;
                case O_JSON: o->json = 1; break;
                case O_BATCH: if (dt_cli_int("eval", "--batch", optarg, 1, 1048576, &v)) return DT_EXIT_USAGE; o->io.batch = (int)v; break;
                case O_THREADS: if (dt_cli_int("eval", "--threads", optarg, 1, 1024, &v)) return DT_EXIT_USAGE; o->io.threads = (int)v; break;
                default: return dt_cli_bad_option("eval", argv, 0);
                }
        }
        if (optind >= argc) {
                fprintf(stderr, "dtrain eval: error: missing MODEL.yaml\ntry 'dtrain eval --help'\n");
                return DT_EXIT_USAGE;
        }
        o->io.model = argv[optind++];
        if (optind < argc) {
                fprintf(stderr, "dtrain eval: error: unexpected argument '%s'\n", argv[optind]);
                return DT_EXIT_USAGE;
        }
        if (!!o->io.weights + !!o->io.resume + !!o->io.out > 1) {
                fprintf(stderr, "dtrain eval: error: give one of --weights, --resume and --out\n");
                return DT_EXIT_USAGE;
        }
        return 0;
}

static int argmax(const float *z, int C)
{
        int b = 0;
        for (int c = 1; c < C; c++)
                if (z[c] > z[b]) b = c;
        return b;
}

static void print_table(const eval_opts *o, const dt_infer *in, const dt_dataset *ds, double loss, double acc,
                        const long *conf, int C, int classify)
{
        long rows = ds->n * in->su.rows;
        printf("eval: %s, weights %s, data %s (%ld samples)\n", in->su.spec.file, in->weights,
               o->test ? "test" : "train", ds->n);
        printf("loss %.6f  accuracy %.4f%% (%.0f of %ld%s)\n", loss, 100 * acc, acc * (double)rows, rows,
               in->su.rows > 1 ? " rows" : "");
        if (!classify) return;
        printf("\nconfusion matrix (rows: true class, columns: predicted)\n%6s", "");
        for (int c = 0; c < C; c++) printf(" %6d", c);
        printf(" %8s\n", "recall");
        for (int t = 0; t < C; t++) {
                long tot = 0;
                printf("%6d", t);
                for (int p = 0; p < C; p++) {
                        printf(" %6ld", conf[(size_t)t * C + p]);
                        tot += conf[(size_t)t * C + p];
                }
                if (tot) printf(" %7.2f%%\n", 100.0 * conf[(size_t)t * C + t] / tot);
                else printf(" %8s\n", "-");
        }
        printf("%6s", "prec");
        for (int p = 0; p < C; p++) {
                long tot = 0;
                for (int t = 0; t < C; t++) tot += conf[(size_t)t * C + p];
                if (tot) printf(" %5.1f%%", 100.0 * conf[(size_t)p * C + p] / tot);
                else printf(" %6s", "-");
        }
        printf("\n");
}

static void print_json(const eval_opts *o, const dt_infer *in, const dt_dataset *ds, double loss, double acc,
                       const long *conf, int C, int classify)
{
        printf("{\"model\":\"%s\",\"weights\":\"%s\",\"data\":\"%s\",\"samples\":%ld,\"loss\":%.9g,\"accuracy\":%.9g",
               in->su.spec.file, in->weights, o->test ? "test" : "train", ds->n, loss, acc);
        if (classify) {
                printf(",\"confusion\":[");
                for (int t = 0; t < C; t++) {
                        printf("%s[", t ? "," : "");
                        for (int p = 0; p < C; p++) printf("%s%ld", p ? "," : "", conf[(size_t)t * C + p]);
                        printf("]");
                }
                printf("]");
        }
        printf("}\n");
}

int dt_cmd_eval(int argc, char **argv)
{
        eval_opts o;
        int rc = parse(argc, argv, &o);
        if (rc) {
                dt_sets_free(&o.io.sets);
                return rc == 1 ? 0 : rc;
        }
        dt_infer in;
        dt_dataset ds;
        memset(&ds, 0, sizeof ds);
        int have_ds = 0;
        long *conf = NULL, *idx = NULL;
        int32_t *lab = NULL;
        float *tgt = NULL;
        if ((rc = dt_infer_open(&in, &o.io))) goto done;
        const dt_model_spec *s = &in.su.spec;
        const dt_source_spec *src = o.test ? &s->data.test : &s->data.train;
        if (!src->present) {
                dt_error("%s: the spec has no data.%s source to evaluate on", s->file, o.test ? "test" : "train");
                rc = DT_EXIT_USAGE;
                goto done;
        }
        int classify = s->loss == DT_LOSS_SOFTMAX_XENT, C = in.su.C, R = in.su.rows;
        int classes = classify ? (s->data.classes ? s->data.classes : C) : 0;
        char msg[DT_PATH_MAX + 256] = "";
        if (dt_dataset_load(&ds, src, &s->data, &s->input, classes, msg, sizeof msg)) {
                dt_error("%s", msg);
                rc = DT_EXIT_DATA;
                goto done;
        }
        have_ds = 1;
        if ((ds.label && ds.label_rows != R) || (ds.target && (long)ds.tdim != (long)R * C)) {
                dt_error("%s: the data's labels or targets do not fit the model's output (%d x %d)", src->images, R, C);
                rc = DT_EXIT_DATA;
                goto done;
        }
        conf = dt_calloc((size_t)C * C, sizeof *conf);
        idx = dt_malloc((size_t)in.B * sizeof *idx);
        lab = dt_malloc((size_t)in.B * R * sizeof *lab);
        tgt = dt_malloc((size_t)in.B * R * C * sizeof *tgt);
        double sum = 0, corr = 0;
        for (long start = 0; start < ds.n; start += in.B) {
                int b = (int)DT_MIN((long)in.B, ds.n - start);
                for (int i = 0; i < b; i++) idx[i] = start + i;
                dt_dataset_gather(&ds, idx, b, in.su.g.act[0], lab, ds.target ? tgt : NULL);
                const float *out = dt_infer_forward(&in, b);
                long k = 0;
                /* the run's loss dispatch: an mse model of labelled data also counts its right argmaxes */
                sum += dt_step_loss(&in.su, out, lab, ds.target ? tgt : NULL, b, 0.0f, NULL, &k);
                corr += (double)k;
                if (classify)
                        for (long r = 0; r < (long)b * R; r++)
                                if (lab[r] >= 0 && lab[r] < C) conf[(size_t)lab[r] * C + argmax(out + r * C, C)]++;
        }
        double rows = (double)ds.n * R, loss = sum / rows, acc = corr / rows;
        if (o.json) print_json(&o, &in, &ds, loss, acc, conf, C, classify && C <= 1000);
        else print_table(&o, &in, &ds, loss, acc, conf, C, classify && C <= 50);
done:
        free(conf); free(idx); free(lab); free(tgt);
        if (have_ds) dt_dataset_free(&ds);
        dt_infer_close(&in);
        dt_sets_free(&o.io.sets);
        return rc;
}
