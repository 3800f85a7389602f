/* sample.c - `dtrain sample`: loads a character model (spec + model.safetensors with its "vocab"
 * metadata), then generates bytes one at a time: the model reads a window of exactly T ids (its
 * input shape), the next byte is drawn from softmax(logits of the last step / temperature) with a
 * seeded generator. Writes exactly --length bytes to stdout; nothing else goes there. */
#include "sample.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli.h"
#include "util/common.h"
#include "spec/model_spec.h"
#include "train/setup.h"
#include "graph/graph.h"
#include "backend/backend.h"
#include "data/data.h"
#include "train/ckpt.h"

typedef struct sample_opts {
        const char *model, *weights, *out, *prime;
        long length;
        double temperature;
        uint64_t seed;
        dt_sets sets;           /* --set */
} sample_opts;

/* ---- flags ---- */

enum { O_WEIGHTS = 256, O_OUT, O_LENGTH, O_TEMP, O_PRIME, O_SEED, O_SET };

static const dt_cli_opt opts[] = {
        { "weights", required_argument, O_WEIGHTS, "FILE", "weights to load (default DIR/model.safetensors)" },
        { "out", required_argument, O_OUT, "DIR", "the run's output directory (default runs/<model name>)" },
        { "length", required_argument, O_LENGTH, "N", "bytes to generate (default 500)" },
        { "temperature", required_argument, O_TEMP, "T",
          "divides the logits before softmax; 0 = always the most\n"
          "likely byte (default 1)" },
        { "prime", required_argument, O_PRIME, "TEXT", "text the model continues (default a newline)" },
        { "seed", required_argument, O_SEED, "N", "seed of the sampling (default 1)" },
        { "set", required_argument, O_SET, "KEY=VALUE", "override a spec key, after those the run recorded (repeatable)" },
        { NULL, 0, 0, NULL, NULL },
};

const dt_cli_cmd dt_sample_cmd = {
        .name = "sample", .synopsis = "sample MODEL.yaml",
        .summary = "generate text from a trained character model (format: text)",
        .usage = "usage: dtrain sample MODEL.yaml [options]\n"
                 "\n"
                 "Generates text from a model trained on format: text; writes exactly N bytes to stdout.\n",
        .opts = opts,
};

/* 0 = parsed, 1 = help printed, else an exit status */
static int parse(int argc, char **argv, sample_opts *o)
{
        memset(o, 0, sizeof *o);
        o->length = 500;
        o->temperature = 1.0;
        o->seed = 1;
        dt_cli_getopt g;
        dt_cli_getopt_init(&g, &dt_sample_cmd);
        long long v;
        int c;
        while ((c = dt_cli_next(&g, argc, argv)) != -1) {
                switch (c) {
                case 'h': dt_cli_help(&dt_sample_cmd, stdout); return 1;
                case O_WEIGHTS: o->weights = optarg; break;
                case O_OUT: o->out = optarg; break;
                case O_SET: dt_sets_add(&o->sets, optarg, NULL); break;
                case O_PRIME: o->prime = optarg; break;
                case O_LENGTH:
                        if (dt_cli_int("sample", "--length", optarg, 0, 100000000, &v)) return DT_EXIT_USAGE;
                        o->length = (long)v;
                        break;
                case O_SEED:
                        if (dt_cli_int("sample", "--seed", optarg, 0, LLONG_MAX, &v)) return DT_EXIT_USAGE;
                        o->seed = (uint64_t)v;
                        break;
                case O_TEMP: {
                        char *end;
                        errno = 0;
                        double t = strtod(optarg, &end);
                        /* decimal digits only, as every number a flag takes: no blanks, no hex, no inf */
                        if (errno || end == optarg || *end || !isfinite(t) || t < 0 || t > 100 ||
                            optarg[strspn(optarg, "0123456789.eE+-")]) {
                                fprintf(stderr, "dtrain sample: error: --temperature must be a number in [0, 100], "
                                        "got '%s'\n", optarg);
                                return DT_EXIT_USAGE;
                        }
                        o->temperature = t;
                        break;
                }
                default: return dt_cli_bad_option("sample", argv, 1);
                }
        }
        if (optind >= argc) {
                fprintf(stderr, "dtrain sample: error: missing MODEL.yaml\ntry 'dtrain sample --help'\n");
                return DT_EXIT_USAGE;
        }
        o->model = argv[optind++];
        if (optind < argc) {
                fprintf(stderr, "dtrain sample: error: unexpected argument '%s'\n", argv[optind]);
                return DT_EXIT_USAGE;
        }
        if (o->prime && !*o->prime) {
                fprintf(stderr, "dtrain sample: error: --prime must not be empty\n");
                return DT_EXIT_USAGE;
        }
        return 0;
}

/* ---- the vocabulary ---- */

static int hexval(char c)
{
        if (c >= '0' && c <= '9') return c - '0';
        if (c >= 'a' && c <= 'f') return c - 'a' + 10;
        if (c >= 'A' && c <= 'F') return c - 'A' + 10;
        return -1;
}

/* "vocab": two hex digits per byte, strictly increasing bytes (sorted, distinct). */
static int decode_vocab(const char *hex, unsigned char *vocab, int *nv)
{
        size_t n = strlen(hex);
        if (n == 0 || n % 2 || n > 512) return -1;
        for (size_t i = 0; i < n / 2; i++) {
                int hi = hexval(hex[2 * i]), lo = hexval(hex[2 * i + 1]);
                if (hi < 0 || lo < 0) return -1;
                vocab[i] = (unsigned char)(hi * 16 + lo);
                if (i && vocab[i] <= vocab[i - 1]) return -1;
        }
        *nv = (int)(n / 2);
        return 0;
}

/* ---- generation ---- */

/* Index drawn from softmax(z[0..n) / temp); temp 0 is argmax. */
static int draw(const float *z, int n, double temp, dt_data_rng *r, double *p)
{
        int best = 0;
        for (int i = 1; i < n; i++)
                if (z[i] > z[best]) best = i;
        if (temp == 0) return best;
        double sum = 0;
        for (int i = 0; i < n; i++) {
                p[i] = exp(((double)z[i] - z[best]) / temp);
                sum += p[i];
        }
        double u = (double)(dt_data_rng_next(r) >> 11) * 0x1p-53 * sum;
        for (int i = 0; i < n; i++) {
                if (u < p[i]) return i;
                u -= p[i];
        }
        return best;    /* rounding left u at the very top */
}

static int generate(dt_graph *g, const sample_opts *o, const unsigned char *vocab, int nv)
{
        int T = g->input.d[0];
        const dt_shape *os = &g->layers[g->n - 1].out;
        int C = os->d[os->n - 1];
        size_t last = os->n == 2 ? (size_t)(os->d[0] - 1) * (size_t)C : 0;
        int id[256];
        for (int c = 0; c < 256; c++) id[c] = -1;
        for (int i = 0; i < nv; i++) id[vocab[i]] = i;

        /* the prime: default a newline when the text has one, else its first byte */
        char defprime[2] = { id['\n'] >= 0 ? '\n' : (char)vocab[0], 0 };
        const unsigned char *prime = (const unsigned char *)(o->prime ? o->prime : defprime);
        size_t P = strlen((const char *)prime);
        for (size_t i = 0; i < P; i++) {
                if (id[prime[i]] < 0) {
                        unsigned c = prime[i];
                        if (c >= 32 && c < 127)
                                dt_error("--prime: character '%c' (byte 0x%02x, position %zu) is not in the model's "
                                         "vocabulary of %d bytes", (int)c, c, i + 1, nv);
                        else
                                dt_error("--prime: byte 0x%02x (position %zu) is not in the model's vocabulary of "
                                         "%d bytes", c, i + 1, nv);
                        return DT_EXIT_USAGE;
                }
        }
        /* a window of exactly T ids: the prime's last T bytes, left-padded with its first */
        int *win = dt_malloc((size_t)T * sizeof *win);
        for (int t = 0; t < T; t++) {
                long k = (long)P - T + t;
                win[t] = id[prime[k < 0 ? 0 : k]];
        }
        double *p = dt_malloc((size_t)nv * sizeof *p);
        dt_data_rng r;
        dt_data_rng_seed(&r, o->seed, 0x73616d706c65ull);      /* "sample" */
        dt_fwd_ctx c = { .training = 0, .seed = g->spec->train.seed };
        int rc = 0;
        for (long k = 0; k < o->length; k++) {
                for (int t = 0; t < T; t++) g->act[0][t] = (float)win[t];
                dt_graph_forward(g, &c, 1);
                const float *z = g->act[g->n] + last;
                for (int i = 0; i < nv; i++)
                        if (!isfinite(z[i])) {
                                dt_error("non-finite output of layer '%s' after %ld generated bytes",
                                         g->layers[g->n - 1].name, k);
                                rc = DT_EXIT_NUMERIC;
                                goto out;
                        }
                int next = draw(z, nv, o->temperature, &r, p);
                memmove(win, win + 1, (size_t)(T - 1) * sizeof *win);
                win[T - 1] = next;
                putchar(vocab[next]);
        }
        if (fflush(stdout) || ferror(stdout)) {
                dt_error("cannot write to standard output: %s", strerror(errno));
                rc = DT_EXIT_DATA;
        }
out:
        free(win);
        free(p);
        return rc;
}

int dt_cmd_sample(int argc, char **argv)
{
        sample_opts o;
        int rc = parse(argc, argv, &o);
        if (rc) {
                dt_sets_free(&o.sets);
                return rc == 1 ? 0 : rc;
        }

        dt_setup su = { 0 };
        dt_sets sets = { 0 };   /* the run's recorded overrides, then --set */
        rc = dt_setup_reader_sets(o.model, o.weights, NULL, o.out, &o.sets, &sets, "sample");
        dt_setup_opts so = { .model = o.model, .max_steps = -1, .seed = -1, .single = 1, .sets = &sets };
        dt_st_file f = { 0 };
        int have_file = 0;
        char sb[64];
        if (!rc) rc = dt_setup_model(&su, &so);
        dt_sets_free(&sets);
        if (rc) goto done;
        rc = DT_EXIT_USAGE;
        const dt_shape *os = &su.g.layers[su.g.n - 1].out;
        if (su.g.input.n != 1) {
                dt_error("%s: input %s is not a window of token ids (T); dtrain sample needs a character "
                         "model (format: text)", su.spec.file, dt_shape_str(&su.g.input, sb, sizeof sb));
                goto done;
        }
        if (os->n > 2 || (os->n == 2 && os->d[0] != su.g.input.d[0])) {
                dt_error("%s: the last layer '%s' outputs %s; a character model outputs (%d, classes) or "
                         "(classes)", su.spec.file, su.g.layers[su.g.n - 1].name, dt_shape_str(os, sb, sizeof sb),
                         su.g.input.d[0]);
                goto done;
        }

        char path[DT_PATH_MAX + 32], err[DT_PATH_MAX + 256];
        if (o.weights) {        /* a checkpoint (best, latest, a directory) gives its weights */
                if (dt_ckpt_weights_file(o.weights, path, sizeof path, err, sizeof err) < 0) {
                        dt_error("--weights %s", err);
                        rc = DT_EXIT_CKPT;
                        goto done;
                }
        } else if (o.out)
                snprintf(path, sizeof path, "%s/model.safetensors", o.out);
        else
                snprintf(path, sizeof path, "runs/%s/model.safetensors", su.spec.name);
        int th = dt_env_threads();
        su.be = dt_backend_cpu_new(th > 0 ? th : 1);
        if (dt_graph_alloc(&su.g, su.be, 1) < 0) {
                dt_error("layer setup failed");
                rc = DT_EXIT_RUNTIME;
                goto done;
        }
        dt_graph_init_params(&su.g, su.spec.train.seed);
        rc = DT_EXIT_CKPT;
        if (dt_model_load(path, &su.g, &f, err, sizeof err) < 0) {
                dt_error("%s", err);
                goto done;
        }
        have_file = 1;
        const char *hex = dt_st_meta_get(&f, "vocab");
        unsigned char vocab[256];
        int nv = 0;
        if (!hex) {
                dt_error("%s: not a character model (no 'vocab' metadata; it is written when training on "
                         "format: text)", path);
                goto done;
        }
        if (decode_vocab(hex, vocab, &nv)) {
                dt_error("%s: metadata 'vocab' is corrupt (expected 1 to 256 distinct bytes in increasing "
                         "order, two hex digits each)", path);
                goto done;
        }
        int C = os->d[os->n - 1];
        if (nv > C) {
                dt_error("%s: the vocabulary has %d bytes but the model outputs %d classes", path, nv, C);
                goto done;
        }
        rc = generate(&su.g, &o, vocab, nv);
done:
        if (have_file) dt_st_free(&f);
        dt_setup_free(&su);     /* safe on a partly built setup */
        dt_sets_free(&o.sets);
        return rc;
}
