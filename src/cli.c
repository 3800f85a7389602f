/* cli.c - flags for `dtrain run` and `dtrain check` (getopt_long), numbers range-checked, and the
 * help texts of every command (man/dtrain.1 documents every flag printed here; a test keeps them
 * in step). */
#include "cli.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include "util/common.h"
#include "backend/backend.h"

void dt_cli_usage(FILE *f)
{
        fputs("usage: dtrain COMMAND [ARGS]\n"
              "\n"
              "Commands:\n"
              "  run MODEL.yaml     train the model the spec describes\n"
              "  check MODEL.yaml   validate the spec and data, print the layer table and memory plan\n"
              "  bench [MODELS]     time each layer, the training step and (under mpirun) the\n"
              "                     gradient sync on random data (default: the bundled models)\n"
              "  plan MODEL.yaml    choose how to split the model over N ranks and explain why\n"
              "  sample MODEL.yaml  generate text from a trained character model (format: text)\n"
              "  keys [FILTER]      list the keys the model spec accepts, with type and default\n"
              "  plot RUN_DIR       draw a run's loss and accuracy curves (PNG or SVG)\n"
              "  eval MODEL.yaml    loss, accuracy and confusion matrix of trained weights on a split\n"
              "  predict MODEL.yaml class probabilities or outputs per sample of an input file\n"
              "\n"
              "Options:\n"
              "  -h, --help         show this help (dtrain COMMAND --help for a command's flags)\n"
              "  -V, --version      show the version\n"
              "\n"
              "See dtrain(1) and dtrain-model(5).\n", f);
}

void dt_cli_cmd_help(const char *cmd, FILE *f)
{
        if (!strcmp(cmd, "run")) {
                fputs("usage: dtrain run MODEL.yaml [options]\n"
                      "\n"
                      "  --cluster FILE         cluster spec (ranks, devices, partitioning)\n"
                      "  --out DIR              output directory (default runs/<model name>)\n"
                      "  --epochs N             override train.epochs\n"
                      "  --max-steps N          stop after N optimizer steps in total\n"
                      "  --batch N              override train.batch (the global batch)\n"
                      "  --seed N               override train.seed\n"
                      "  --set KEY=VALUE        override any model or cluster spec key (repeatable), e.g.\n"
                      "                         train.optimizer.lr=0.01, layers.fc1.units=128,\n"
                      "                         partition.micro_batches=8; recorded in OUT/overrides.yaml,\n"
                      "                         which --resume, eval and predict apply again\n"
                      "  --resume[=auto|DIR]    continue from OUT/checkpoints/latest (auto, the default;\n"
                      "                         latest missing: the newest intact step directory), or\n"
                      "                         from DIR: a checkpoint directory, checkpoints/best or\n"
                      "                         latest, a run directory\n"
                      "  --threads N            BLAS threads per rank (default: all cores / ranks)\n"
                      "  --device cpu|cuda|auto compute device (default: the spec's device, else cpu);\n"
                      "                         auto: cuda when a GPU is present, else cpu\n"
                      "  --conv auto|im2col|onednn\n"
                      "                         how the cpu backend computes convolutions (default: the\n"
                      "                         cluster spec's conv, else auto: oneDNN where built in)\n"
                      "  --collective-timeout S abort (exit 6) when a collective takes longer than S seconds\n"
                      "                         (default 300, or the cluster spec's collective_timeout)\n"
                      "  --force                start over in an --out that holds a previous run (its\n"
                      "                         checkpoints, metrics and events are removed first)\n"
                      "  --weights FILE         start from these weights (safetensors; overrides train.init_from)\n"
                      "  --non-strict           with --weights: load the tensors that match, list the rest\n"
                      "  --progress S           when stdout is not a terminal: a progress line every S seconds\n"
                      "                         (default 10)\n"
                      "  --progress-steps N     ... and every N steps (default: by time only)\n"
                      "  --trace FILE           write a Chrome/Perfetto trace (JSON); under mpirun FILE gets\n"
                      "                         .rankR before its extension\n"
                      "  --quiet                print only errors\n"
                      "  -h, --help             show this help\n"
                      "\n"
                      "Environment (all of it, fault injection for tests included: dtrain(1), ENVIRONMENT):\n"
                      "  DTRAIN_DATA_PATH       directories (colon-separated) searched for the spec's data\n"
                      "  DTRAIN_CKPT_SYNC=1     commit each checkpoint on the training thread, waiting for it\n"
                      "                         (default: a thread of its own writes while training goes on)\n", f);
        } else if (!strcmp(cmd, "check")) {
                fputs("usage: dtrain check MODEL.yaml [options]\n"
                      "\n"
                      "  --cluster FILE         cluster spec to validate with the model\n"
                      "  --batch N              override train.batch for the memory plan\n"
                      "  --set KEY=VALUE        override a model or cluster spec key, as for run (repeatable)\n"
                      "  --device cpu|cuda|auto check that this backend runs every layer (no device needed)\n"
                      "  -h, --help             show this help\n", f);
        } else if (!strcmp(cmd, "bench")) {
                fputs("usage: dtrain bench [MODEL.yaml ...] [options]\n"
                      "       mpirun -np N dtrain bench [MODEL.yaml ...] [options]\n"
                      "\n"
                      "Times each layer's forward and backward, the whole training step and, under mpirun,\n"
                      "the gradient allreduce and its overlap with backward, on random in-memory data;\n"
                      "with pipeline stages, each stage's compute, idle time and messages, and the bubble.\n"
                      "Without a model: models/mlp.yaml, lenet, cnn and lstm, those that exist.\n"
                      "  --batch N              global batch (default: the spec's train.batch)\n"
                      "  --iters N              timed iterations; medians are reported (default 20)\n"
                      "  --warmup N             untimed iterations first (default 3)\n"
                      "  --threads N            BLAS threads per rank (default: as for run)\n"
                      "  --conv auto|im2col|onednn\n"
                      "                         the cpu backend's convolutions (default: as for run); each\n"
                      "                         conv layer's row names the path it took\n"
                      "  --json                 print one JSON array (an object per model) instead of tables\n"
                      "  --cluster FILE         cluster spec (bucket size, compression, threads; with\n"
                      "                         strategy model or hybrid, the pipeline stages are timed)\n"
                      "  --set KEY=VALUE        override a spec key of every model, as for run (repeatable)\n"
                      "  --one-rank             with pipeline stages, also time the whole model on one rank\n"
                      "  --network              instead of models: point-to-point and all-reduce times from 8 B\n"
                      "                         to 16 MiB under mpirun, alpha and beta fitted (for dtrain plan)\n"
                      "  -h, --help             show this help\n", f);
        } else if (!strcmp(cmd, "plan")) {
                fputs("usage: dtrain plan MODEL.yaml [options]\n"
                      "\n"
                      "Predicts the training step of every layout (data x pipeline x tensor grid, tensor\n"
                      "splits, stage cuts, micro-batches, schedule) on each rank count from this machine's\n"
                      "measured layer costs and the cluster spec's network, shows the best, the chosen one's\n"
                      "layers and why it won, and a scaling table to 1024 ranks. strategy: auto uses it.\n"
                      "  --cluster FILE         cluster spec (network, cores_per_node, ranks_per_node, threads)\n"
                      "  --ranks N[,N...]       rank counts to plan for (default: the spec's ranks, else 1,2,4)\n"
                      "  --top K                layouts shown per rank count (default 3)\n"
                      "  --threads N            BLAS threads per rank (default: the cluster spec's, else 1)\n"
                      "  --validate             run each shown layout (dtrain run under mpirun) and print\n"
                      "                         measured against predicted step time\n"
                      "  --steps N              steps each validation run trains (default 30)\n"
                      "  --repeat R             validation runs of each layout, alternating; medians (default 3)\n"
                      "  --no-scaling           leave out the scaling table\n"
                      "  --set KEY=VALUE        override a model or cluster spec key, as for run (repeatable)\n"
                      "  --plot FILE            write the scaling table's speedup curve as an SVG\n"
                      "  --json                 print one JSON object instead of the tables\n"
                      "  -h, --help             show this help\n", f);
        } else if (!strcmp(cmd, "sample")) {
                fputs("usage: dtrain sample MODEL.yaml [options]\n"
                      "\n"
                      "Generates text from a model trained on format: text; writes exactly N bytes to stdout.\n"
                      "  --weights FILE         weights to load (default DIR/model.safetensors)\n"
                      "  --out DIR              the run's output directory (default runs/<model name>)\n"
                      "  --length N             bytes to generate (default 500)\n"
                      "  --temperature T        divides the logits before softmax; 0 = always the most\n"
                      "                         likely byte (default 1)\n"
                      "  --prime TEXT           text the model continues (default a newline)\n"
                      "  --seed N               seed of the sampling (default 1)\n"
                      "  --set KEY=VALUE        override a spec key, after those the run recorded (repeatable)\n"
                      "  -h, --help             show this help\n", f);
        } else if (!strcmp(cmd, "eval")) {
                fputs("usage: dtrain eval MODEL.yaml [--weights FILE | --resume DIR | --out DIR] [options]\n"
                      "\n"
                      "Loss and accuracy of trained weights on a split of the spec's data, computed as training's\n"
                      "evaluation does, and for classifiers the confusion matrix with recall and precision.\n"
                      "  --weights FILE         weights (safetensors, ours or a PyTorch state_dict)\n"
                      "  --resume DIR           a run directory's latest checkpoint, a checkpoint directory,\n"
                      "                         or RUN/checkpoints/best (or latest)\n"
                      "  --out DIR              the run directory's model.safetensors (default runs/<model name>)\n"
                      "  --set KEY=VALUE        override a spec key (repeatable); the run's recorded\n"
                      "                         overrides (RUN/overrides.yaml) apply first\n"
                      "  --data test|train      the split (default test)\n"
                      "  --json                 one JSON object instead of the table\n"
                      "  --batch N              samples per forward pass (default train.eval_batch)\n"
                      "  --threads N            BLAS threads (default OPENBLAS_NUM_THREADS, else 1)\n"
                      "  -h, --help             show this help\n", f);
        } else if (!strcmp(cmd, "predict")) {
                fputs("usage: dtrain predict MODEL.yaml --input FILE.npy|FILE.csv [--weights FILE] [-o OUT] [options]\n"
                      "\n"
                      "Each sample's class probabilities (softmax_cross_entropy) or outputs (mse). The input is\n"
                      "normalised as the spec's training data is (data.scale, mean, std); float input that looks\n"
                      "scaled or normalised already is refused unless a flag says what was done. A CSV has one\n"
                      "sample per row, every column a value, an optional header line.\n"
                      "  --input FILE           samples: .npy (N, input...) or .csv\n"
                      "  --no-scale             the input is scaled already (e.g. PyTorch's ToTensor(): [0, 1]);\n"
                      "                         data.mean and data.std are still applied\n"
                      "  --preprocessed         the input is normalised already (ToTensor() and Normalize()):\n"
                      "                         given to the model as it is\n"
                      "  --raw                  apply the spec's whole normalisation even where the input's\n"
                      "                         range looks scaled already\n"
                      "  --weights FILE         weights (default: as for eval)\n"
                      "  --resume DIR, --out DIR  as for eval\n"
                      "  --set KEY=VALUE        as for eval: after the run's recorded overrides (repeatable)\n"
                      "  -o, --output OUT       OUT.csv or OUT.npy (float32 (N, classes)); default CSV on stdout\n"
                      "  --logits               raw outputs instead of probabilities\n"
                      "  --batch N              samples per forward pass (default train.eval_batch)\n"
                      "  --threads N            BLAS threads (default OPENBLAS_NUM_THREADS, else 1)\n"
                      "  -h, --help             show this help\n", f);
        } else if (!strcmp(cmd, "plot")) {
                fputs("usage: dtrain plot RUN_DIR [-o FILE.png|FILE.svg]\n"
                      "\n"
                      "Draws RUN_DIR/metrics.jsonl: loss and accuracy over optimizer steps, training per\n"
                      "log_every steps and per epoch, test per epoch. PNG needs dtrain built with cairo.\n"
                      "  -o, --output FILE      the picture (default RUN_DIR/curves.png, or .svg without cairo)\n"
                      "  -h, --help             show this help\n", f);
        } else if (!strcmp(cmd, "keys")) {
                fputs("usage: dtrain keys [FILTER]\n"
                      "\n"
                      "Prints every key the model spec accepts, one 'section.key  type  default' per line;\n"
                      "a default in parentheses is a rule, e.g. (the kernel), (required); '-' is none.\n"
                      "With FILTER only the keys that start with or contain it (e.g. layers.conv, lr).\n"
                      "  -h, --help             show this help\n", f);
        }
}

int dt_cli_decimal(const char *s, long long *out)
{
        /* strtoll alone would take leading blanks (' 16') and refuse trailing ones ('16 ') */
        size_t sign = s[0] == '-' || s[0] == '+', digits = strspn(s + sign, "0123456789");
        if (!digits || s[sign + digits]) return -1;
        char *end;
        errno = 0;
        long long v = strtoll(s, &end, 10);
        if (errno || *end) return -1;
        *out = v;
        return 0;
}

int dt_cli_int(const char *cmd, const char *flag, const char *s, long long min, long long max, long long *out)
{
        long long v = 0;
        if (dt_cli_decimal(s, &v) < 0 || v < min || v > max) {
                fprintf(stderr, "dtrain%s%s: error: %s must be an integer in [%lld, %lld], got '%s'\n",
                        cmd ? " " : "", cmd ? cmd : "", flag, min, max, s);
                return -1;
        }
        *out = v;
        return 0;
}

int dt_cli_conv(const char *cmd, const char *s)
{
        for (int k = 0; dt_conv_algo_names[k]; k++)
                if (!strcmp(s, dt_conv_algo_names[k])) return 0;
        fprintf(stderr, "dtrain %s: error: --conv must be auto, im2col or onednn, got '%s'\n", cmd, s);
        return -1;
}

int dt_cli_parse(const char *cmd, int argc, char **argv, dt_run_opts *o)
{
        enum { O_CLUSTER = 256, O_OUT, O_EPOCHS, O_MAXSTEPS, O_BATCH, O_SEED, O_RESUME, O_THREADS, O_DEVICE, O_QUIET, O_TIMEOUT,
               O_FORCE, O_PROGRESS, O_PROGRESS_STEPS, O_TRACE, O_WEIGHTS, O_NONSTRICT, O_CONV, O_SET };
        static const struct option run_opts[] = {
                { "cluster", required_argument, 0, O_CLUSTER }, { "out", required_argument, 0, O_OUT },
                { "epochs", required_argument, 0, O_EPOCHS }, { "max-steps", required_argument, 0, O_MAXSTEPS },
                { "batch", required_argument, 0, O_BATCH }, { "seed", required_argument, 0, O_SEED },
                { "resume", optional_argument, 0, O_RESUME }, { "threads", required_argument, 0, O_THREADS },
                { "device", required_argument, 0, O_DEVICE }, { "quiet", no_argument, 0, O_QUIET },
                { "collective-timeout", required_argument, 0, O_TIMEOUT },
                { "force", no_argument, 0, O_FORCE }, { "progress", required_argument, 0, O_PROGRESS },
                { "progress-steps", required_argument, 0, O_PROGRESS_STEPS }, { "trace", required_argument, 0, O_TRACE },
                { "weights", required_argument, 0, O_WEIGHTS }, { "non-strict", no_argument, 0, O_NONSTRICT },
                { "conv", required_argument, 0, O_CONV }, { "set", required_argument, 0, O_SET },
                { "help", no_argument, 0, 'h' }, { 0, 0, 0, 0 },
        };
        static const struct option check_opts[] = {
                { "cluster", required_argument, 0, O_CLUSTER }, { "batch", required_argument, 0, O_BATCH },
                { "device", required_argument, 0, O_DEVICE }, { "set", required_argument, 0, O_SET },
                { "help", no_argument, 0, 'h' }, { 0, 0, 0, 0 },
        };
        const struct option *opts = !strcmp(cmd, "run") ? run_opts : check_opts;
        memset(o, 0, sizeof *o);
        o->epochs = o->max_steps = o->batch = -1;
        o->seed = -1;
        /* --resume takes its value only with '=' (a bare --resume means auto): remember what
         * followed a bare one before getopt permutes argv, for the hint */
        const char *resume_next = NULL;
        for (int i = 1; i + 1 < argc; i++)
                if (!strcmp(argv[i], "--resume") && argv[i + 1][0] != '-') resume_next = argv[i + 1];
        optind = 1;
        opterr = 0;
        long long v;
        int c;
        while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
                switch (c) {
                case 'h': dt_cli_cmd_help(cmd, stdout); return 1;
                case O_CLUSTER: o->cluster = optarg; break;
                case O_OUT: o->out = optarg; break;
                case O_EPOCHS: if (dt_cli_int(NULL, "--epochs", optarg, 1, 100000, &v)) return DT_EXIT_USAGE; o->epochs = (long)v; break;
                case O_MAXSTEPS: if (dt_cli_int(NULL, "--max-steps", optarg, 0, LONG_MAX, &v)) return DT_EXIT_USAGE; o->max_steps = (long)v; break;
                case O_BATCH: if (dt_cli_int(NULL, "--batch", optarg, 1, 1048576, &v)) return DT_EXIT_USAGE; o->batch = (long)v; break;
                case O_SEED: if (dt_cli_int(NULL, "--seed", optarg, 0, LLONG_MAX, &v)) return DT_EXIT_USAGE; o->seed = v; break;
                case O_RESUME: o->resume = optarg ? optarg : "auto"; break;
                case O_THREADS: if (dt_cli_int(NULL, "--threads", optarg, 1, 1024, &v)) return DT_EXIT_USAGE; o->threads = (int)v; break;
                case O_DEVICE:
                        if (strcmp(optarg, "cpu") && strcmp(optarg, "cuda") && strcmp(optarg, "auto")) {
                                fprintf(stderr, "dtrain: error: --device must be cpu, cuda or auto, got '%s'\n", optarg);
                                return DT_EXIT_USAGE;
                        }
                        o->device = optarg;     /* auto: cuda when a GPU answers, else cpu (train.c) */
                        break;
                case O_CONV:
                        if (dt_cli_conv(cmd, optarg)) return DT_EXIT_USAGE;
                        o->conv = optarg;
                        break;
                case O_QUIET: o->quiet = 1; break;
                case O_TIMEOUT: if (dt_cli_int(NULL, "--collective-timeout", optarg, 1, 86400, &v)) return DT_EXIT_USAGE; o->collective_timeout = (double)v; break;
                case O_FORCE: o->force = 1; break;
                case O_PROGRESS: if (dt_cli_int(NULL, "--progress", optarg, 1, 86400, &v)) return DT_EXIT_USAGE; o->progress_s = (double)v; break;
                case O_PROGRESS_STEPS: if (dt_cli_int(NULL, "--progress-steps", optarg, 1, LONG_MAX, &v)) return DT_EXIT_USAGE; o->progress_steps = (long)v; break;
                case O_TRACE: o->trace = optarg; break;
                case O_WEIGHTS: o->weights = optarg; break;
                case O_NONSTRICT: o->non_strict = 1; break;
                case O_SET: dt_sets_add(&o->sets, optarg, NULL); break;
                case '?':
                default:
                        if (optopt)
                                fprintf(stderr, "dtrain %s: error: option '%s' needs no argument or is unknown\n", cmd, argv[optind - 1]);
                        else
                                fprintf(stderr, "dtrain %s: error: unknown or incomplete option '%s'\n", cmd, argv[optind - 1]);
                        fprintf(stderr, "try 'dtrain %s --help'\n", cmd);
                        return DT_EXIT_USAGE;
                }
        }
        if (optind >= argc) {
                fprintf(stderr, "dtrain %s: error: missing MODEL.yaml\ntry 'dtrain %s --help'\n", cmd, cmd);
                return DT_EXIT_USAGE;
        }
        o->model = argv[optind++];
        if (optind < argc) {
                fprintf(stderr, "dtrain %s: error: unexpected argument '%s'\n", cmd, argv[optind]);
                if (resume_next)
                        fprintf(stderr, "hint: --resume takes a directory only as --resume=%s; a bare "
                                "--resume continues the latest checkpoint in --out\n", resume_next);
                return DT_EXIT_USAGE;
        }
        if (o->non_strict && !o->weights) {
                fprintf(stderr, "dtrain %s: error: --non-strict applies to --weights FILE; for train.init_from "
                        "write train.init_strict: false\n", cmd);
                return DT_EXIT_USAGE;
        }
        return 0;
}
