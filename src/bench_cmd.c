/* bench_cmd.c - the flags of `dtrain bench`: its table, help and parser. The work is bench/'s
 * (dt_cmd_bench, dt_bench_network). */
#include "bench_cmd.h"

#include <string.h>
#include "util/common.h"

enum { O_BATCH = 256, O_ITERS, O_WARMUP, O_THREADS, O_JSON, O_CLUSTER, O_ONE_RANK, O_NETWORK, O_CONV, O_SET };

static const dt_cli_opt opts[] = {
        { "batch", required_argument, O_BATCH, "N", "global batch (default: the spec's train.batch)" },
        { "iters", required_argument, O_ITERS, "N", "timed iterations; medians are reported (default 20)" },
        { "warmup", required_argument, O_WARMUP, "N", "untimed iterations first (default 3)" },
        { "threads", required_argument, O_THREADS, "N", "BLAS threads per rank (default: as for run)" },
        { "conv", required_argument, O_CONV, "auto|im2col|onednn",
          "\nthe cpu backend's convolutions (default: as for run); each\n"
          "conv layer's row names the path it took" },
        { "json", no_argument, O_JSON, NULL, "print one JSON array (an object per model) instead of tables" },
        { "cluster", required_argument, O_CLUSTER, "FILE",
          "cluster spec (bucket size, compression, threads; with\n"
          "strategy model or hybrid, the pipeline stages are timed)" },
        { "set", required_argument, O_SET, "KEY=VALUE", "override a spec key of every model, as for run (repeatable)" },
        { "one-rank", no_argument, O_ONE_RANK, NULL, "with pipeline stages, also time the whole model on one rank" },
        { "network", no_argument, O_NETWORK, NULL,
          "instead of models: point-to-point and all-reduce times from 8 B\n"
          "to 16 MiB under mpirun, alpha and beta fitted (for dtrain plan)" },
        { NULL, 0, 0, NULL, NULL },
};

const dt_cli_cmd dt_bench_cmd = {
        .name = "bench", .synopsis = "bench [MODELS]",
        .summary = "time each layer, the training step and (under mpirun) the\n"
                   "gradient sync on random data (default: the bundled models)",
        .usage = "usage: dtrain bench [MODEL.yaml ...] [options]\n"
                 "       mpirun -np N dtrain bench [MODEL.yaml ...] [options]\n"
                 "\n"
                 "Times each layer's forward and backward, the whole training step and, under mpirun,\n"
                 "the gradient allreduce and its overlap with backward, on random in-memory data;\n"
                 "with pipeline stages, each stage's compute, idle time and messages, and the bubble.\n"
                 "Without a model: models/mlp.yaml, lenet, cnn and lstm, those that exist.\n",
        .opts = opts,
};

int dt_bench_parse(int argc, char **argv, dt_bench_opts *o)
{
        memset(o, 0, sizeof *o);
        o->iters = 20;
        o->warmup = 3;
        dt_cli_getopt g;
        dt_cli_getopt_init(&g, &dt_bench_cmd);
        long long v;
        int c;
        while ((c = dt_cli_next(&g, argc, argv)) != -1) {
                switch (c) {
                case 'h': dt_cli_help(&dt_bench_cmd, stdout); return 1;
                case O_BATCH: if (dt_cli_int("bench", "--batch", optarg, 1, 1048576, &v)) return DT_EXIT_USAGE; o->batch = (long)v; break;
                case O_ITERS: if (dt_cli_int("bench", "--iters", optarg, 1, 1000000, &v)) return DT_EXIT_USAGE; o->iters = (int)v; break;
                case O_WARMUP: if (dt_cli_int("bench", "--warmup", optarg, 0, 1000000, &v)) return DT_EXIT_USAGE; o->warmup = (int)v; break;
                case O_THREADS: if (dt_cli_int("bench", "--threads", optarg, 1, 1024, &v)) return DT_EXIT_USAGE; o->threads = (int)v; break;
                case O_JSON: o->json = 1; break;
                case O_CONV: if (dt_cli_conv("bench", optarg)) return DT_EXIT_USAGE; o->conv = optarg; break;
                case O_CLUSTER: o->cluster = optarg; break;
                case O_ONE_RANK: o->one_rank = 1; break;
                case O_NETWORK: o->network = 1; break;
                case O_SET: dt_sets_add(&o->sets, optarg, NULL); break;
                default: return dt_cli_bad_option("bench", argv, 0);
                }
        }
        o->models = argv + optind;      /* GNU getopt moved the operands to the end */
        o->nmodels = argc - optind;
        return 0;
}
