/* run_cmd.c - the flags of `dtrain run` and `dtrain check` (check takes a few of run's): their
 * tables, help and parser. The work is train/train.c's (dt_cmd_run, dt_cmd_check). */
#include "run_cmd.h"

#include <limits.h>
#include <string.h>
#include "util/common.h"

enum { O_CLUSTER = 256, O_OUT, O_EPOCHS, O_MAXSTEPS, O_BATCH, O_SEED, O_RESUME, O_THREADS, O_DEVICE, O_QUIET, O_TIMEOUT,
       O_FORCE, O_PROGRESS, O_PROGRESS_STEPS, O_TRACE, O_WEIGHTS, O_NONSTRICT, O_CONV, O_SET };

static const dt_cli_opt run_opts[] = {
        { "cluster", required_argument, O_CLUSTER, "FILE", "cluster spec (ranks, devices, partitioning)" },
        { "out", required_argument, O_OUT, "DIR", "output directory (default runs/<model name>)" },
        { "epochs", required_argument, O_EPOCHS, "N", "override train.epochs" },
        { "max-steps", required_argument, O_MAXSTEPS, "N", "stop after N optimizer steps in total" },
        { "batch", required_argument, O_BATCH, "N", "override train.batch (the global batch)" },
        { "seed", required_argument, O_SEED, "N", "override train.seed" },
        { "set", required_argument, O_SET, "KEY=VALUE",
          "override any model or cluster spec key (repeatable), e.g.\n"
          "train.optimizer.lr=0.01, layers.fc1.units=128,\n"
          "partition.micro_batches=8; recorded in OUT/overrides.yaml,\n"
          "which --resume, eval and predict apply again" },
        { "resume", optional_argument, O_RESUME, "[=auto|DIR]",
          "continue from OUT/checkpoints/latest (auto, the default;\n"
          "latest missing: the newest intact step directory), or\n"
          "from DIR: a checkpoint directory, checkpoints/best or\n"
          "latest, a run directory" },
        { "threads", required_argument, O_THREADS, "N", "BLAS threads per rank (default: all cores / ranks)" },
        { "device", required_argument, O_DEVICE, "cpu|cuda|auto",
          "compute device (default: the spec's device, else cpu);\n"
          "auto: cuda when a GPU is present, else cpu" },
        { "conv", required_argument, O_CONV, "auto|im2col|onednn",
          "\nhow the cpu backend computes convolutions (default: the\n"
          "cluster spec's conv, else auto: oneDNN where built in)" },
        { "collective-timeout", required_argument, O_TIMEOUT, "S",
          "abort (exit 6) when a collective takes longer than S seconds\n"
          "(default 300, or the cluster spec's collective_timeout)" },
        { "force", no_argument, O_FORCE, NULL,
          "start over in an --out that holds a previous run (its\n"
          "checkpoints, metrics and events are removed first)" },
        { "weights", required_argument, O_WEIGHTS, "FILE",
          "start from these weights (safetensors; overrides train.init_from)" },
        { "non-strict", no_argument, O_NONSTRICT, NULL, "with --weights: load the tensors that match, list the rest" },
        { "progress", required_argument, O_PROGRESS, "S",
          "when stdout is not a terminal: a progress line every S seconds\n"
          "(default 10)" },
        { "progress-steps", required_argument, O_PROGRESS_STEPS, "N", "... and every N steps (default: by time only)" },
        { "trace", required_argument, O_TRACE, "FILE",
          "write a Chrome/Perfetto trace (JSON); under mpirun FILE gets\n"
          ".rankR before its extension" },
        { "quiet", no_argument, O_QUIET, NULL, "print only errors" },
        { NULL, 0, 0, NULL, NULL },
};

const dt_cli_cmd dt_run_cmd = {
        .name = "run", .synopsis = "run MODEL.yaml", .summary = "train the model the spec describes",
        .usage = "usage: dtrain run MODEL.yaml [options]\n"
                 "\n",
        .opts = run_opts,
        .after = "\n"
                 "Environment (all of it, fault injection for tests included: dtrain(1), ENVIRONMENT):\n"
                 "  DTRAIN_DATA_PATH       directories (colon-separated) searched for the spec's data\n"
                 "  DTRAIN_CKPT_SYNC=1     commit each checkpoint on the training thread, waiting for it\n"
                 "                         (default: a thread of its own writes while training goes on)\n",
};

static const dt_cli_opt check_opts[] = {
        { "cluster", required_argument, O_CLUSTER, "FILE", "cluster spec to validate with the model" },
        { "batch", required_argument, O_BATCH, "N", "override train.batch for the memory plan" },
        { "set", required_argument, O_SET, "KEY=VALUE", "override a model or cluster spec key, as for run (repeatable)" },
        { "device", required_argument, O_DEVICE, "cpu|cuda|auto", "check that this backend runs every layer (no device needed)" },
        { NULL, 0, 0, NULL, NULL },
};

const dt_cli_cmd dt_check_cmd = {
        .name = "check", .synopsis = "check MODEL.yaml",
        .summary = "validate the spec and data, print the layer table and memory plan",
        .usage = "usage: dtrain check MODEL.yaml [options]\n"
                 "\n",
        .opts = check_opts,
};

int dt_run_parse(const dt_cli_cmd *c, int argc, char **argv, dt_run_opts *o)
{
        const char *cmd = c->name;
        memset(o, 0, sizeof *o);
        o->epochs = o->max_steps = o->batch = -1;
        o->seed = -1;
        /* --resume takes its value only with '=' (a bare --resume means auto): remember what
         * followed a bare one before getopt permutes argv, for the hint */
        const char *resume_next = NULL;
        for (int i = 1; i + 1 < argc; i++)
                if (!strcmp(argv[i], "--resume") && argv[i + 1][0] != '-') resume_next = argv[i + 1];
        dt_cli_getopt g;
        dt_cli_getopt_init(&g, c);
        long long v;
        int k;
        while ((k = dt_cli_next(&g, argc, argv)) != -1) {
                switch (k) {
                case 'h': dt_cli_help(c, stdout); return 1;
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
                default: return dt_cli_bad_option(cmd, argv, 1);
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
