/* main.c - command dispatch from one table (each command's flags and help are in its own file,
 * cli.h's dt_cli_cmd); `dtrain --help` lists the table, --version.
 * MPI starts and ends here, around the commands that need it, and only main decides to exit. */
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <mpi.h>
#include "cli.h"
#include "run_cmd.h"
#include "train/train.h"
#include "bench_cmd.h"
#include "plan_cmd.h"
#include "sample.h"
#include "keys_cmd.h"
#include "plot_cmd.h"
#include "eval_cmd.h"
#include "util/common.h"
#include "util/cpu.h"
#include "util/cpu_fix.h"
#include "util/fault.h"
#include "parallel/mpierr.h"
#include "parallel/agree.h"
#include "parallel/comm.h"
#include "config.h"

/* Open MPI's nonblocking allreduce (libnbc) picks, by default, an algorithm that ran at 0.5-0.65x
 * of the blocking MPI_Allreduce for gradient buckets here; the ring algorithm ran at 1.3-1.5x.
 * MCA parameters are read at MPI_Init, so set it first unless the user chose one. */
static void mpi_defaults(void)
{
        setenv("OMPI_MCA_coll_libnbc_iallreduce_algorithm", "1", 0);
}

#if defined(__SANITIZE_ADDRESS__)
/* --enable-sanitizers: the runtimes of GCC 12-13 and LLVM 14-16 misread the bounds of a dlopen'd
 * library's dynamic TLS block at page offset 16 (libdnnl's, with oneDNN's AVX2 kernels) and
 * LeakSanitizer's tracer dies at exit; without their __tls_get_addr interceptor the blocks are
 * still scanned, as chunks ld.so allocated (README, "Sanitizers"). ASAN_OPTIONS overrides this. */
const char *__asan_default_options(void);
const char *__asan_default_options(void)
{
        return "intercept_tls_get_addr=0";
}
#endif

/* A command's parsed flags. */
typedef union opts {
        dt_run_opts run;
        dt_bench_opts bench;
        dt_plan_opts plan;
} opts;

/* ---- the commands: argv[0] is the command's name ---- */

static int parse_run(int argc, char **argv, opts *o) { return dt_run_parse(&dt_run_cmd, argc, argv, &o->run); }
static int parse_check(int argc, char **argv, opts *o) { return dt_run_parse(&dt_check_cmd, argc, argv, &o->run); }
static int parse_bench(int argc, char **argv, opts *o) { return dt_bench_parse(argc, argv, &o->bench); }
static int parse_plan(int argc, char **argv, opts *o) { return dt_plan_parse(argc, argv, &o->plan); }

static int cmd_run(int argc, char **argv, const opts *o) { (void)argc; (void)argv; return dt_cmd_run(&o->run); }
static int cmd_check(int argc, char **argv, const opts *o) { (void)argc; (void)argv; return dt_cmd_check(&o->run); }
static int cmd_bench(int argc, char **argv, const opts *o) { (void)argc; (void)argv; return dt_cmd_bench(&o->bench); }
static int cmd_plan(int argc, char **argv, const opts *o) { (void)argc; (void)argv; return dt_cmd_plan(&o->plan); }
static int cmd_sample(int argc, char **argv, const opts *o) { (void)o; return dt_cmd_sample(argc, argv); }
static int cmd_plot(int argc, char **argv, const opts *o) { (void)o; return dt_cmd_plot(argc, argv); }
static int cmd_eval(int argc, char **argv, const opts *o) { (void)o; return dt_cmd_eval(argc, argv); }
static int cmd_predict(int argc, char **argv, const opts *o) { (void)o; return dt_cmd_predict(argc, argv); }

static int cmd_keys(int argc, char **argv, const opts *o) { (void)o; return dt_cmd_keys(argc, argv); }

static void usage(FILE *f);

static int cmd_help(int argc, char **argv, const opts *o)
{
        (void)argc; (void)argv; (void)o;
        usage(stdout);
        return 0;
}

static int cmd_version(int argc, char **argv, const opts *o)
{
        (void)argc; (void)argv; (void)o;
        printf("dtrain %s\n", PACKAGE_VERSION);
        return 0;
}

static const struct command {
        const char *name;
        const dt_cli_cmd *cli;  /* flags and help; NULL: a name for help or the version */
        /* Reads the flags before MPI starts, so a usage error never starts it: 0 to go on, 1 when
         * it printed the command's help, else an exit status. NULL: nothing to read first. */
        int (*parse)(int argc, char **argv, opts *o);
        int (*run)(int argc, char **argv, const opts *o);
        int mpi;                /* run between MPI_Init and MPI_Finalize */
        int faults;             /* DTRAIN_FAULT applies (util/fault.h), read before MPI starts */
} commands[] = {
        { "run", &dt_run_cmd, parse_run, cmd_run, 1, 1 },
        { "check", &dt_check_cmd, parse_check, cmd_check, 1, 1 },
        { "bench", &dt_bench_cmd, parse_bench, cmd_bench, 1, 0 },
        { "plan", &dt_plan_cmd, parse_plan, cmd_plan, 0, 0 },    /* one process: it plans for other rank counts */
        { "sample", &dt_sample_cmd, NULL, cmd_sample, 0, 0 },    /* one process: the model is small, no ranks */
        { "keys", &dt_keys_cmd, NULL, cmd_keys, 0, 0 },
        { "plot", &dt_plot_cmd, NULL, cmd_plot, 0, 0 },          /* reads a run's metrics: no model, no ranks */
        { "eval", &dt_eval_cmd, NULL, cmd_eval, 0, 0 },          /* one process, like sample */
        { "predict", &dt_predict_cmd, NULL, cmd_predict, 0, 0 },
        { "help", NULL, NULL, cmd_help, 0, 0 },
        { "-h", NULL, NULL, cmd_help, 0, 0 },
        { "--help", NULL, NULL, cmd_help, 0, 0 },
        { "-V", NULL, NULL, cmd_version, 0, 0 },
        { "--version", NULL, NULL, cmd_version, 0, 0 },
};

#define NCOMMANDS (sizeof commands / sizeof commands[0])

/* `dtrain --help`: the commands of the table, each its synopsis and summary */
static void usage(FILE *f)
{
        enum { LEFT = 18, COL = 21 };   /* "  " + the synopsis + at least one blank */
        fputs("usage: dtrain COMMAND [ARGS]\n\nCommands:\n", f);
        for (size_t i = 0; i < NCOMMANDS; i++) {
                const dt_cli_cmd *c = commands[i].cli;
                if (!c) continue;
                fprintf(f, "  %-*s ", LEFT, c->synopsis);
                for (const char *p = c->summary; *p; p++) {
                        fputc(*p, f);
                        if (*p == '\n') fprintf(f, "%*s", COL, "");
                }
                fputc('\n', f);
        }
        fputs("\n"
              "Options:\n"
              "  -h, --help         show this help (dtrain COMMAND --help for a command's flags)\n"
              "  -V, --version      show the version\n"
              "\n"
              "See dtrain(1) and dtrain-model(5).\n", f);
}

static const struct command *find(const char *name)
{
        for (size_t i = 0; i < NCOMMANDS; i++)
                if (!strcmp(commands[i].name, name)) return &commands[i];
        return NULL;
}

/* Runs c under MPI. A failed rank ends the job (MPI_Abort) so no peer waits on it forever; a
 * signal stop (75) is agreed by all ranks, so they end normally and the launcher sees 75.
 * A process no launcher started runs without MPI (parallel/comm.h: dt_comm_launched), unless
 * DTRAIN_FAULT asks for faults, some of which are MPI errors. */
static int run_mpi(const struct command *c, int argc, char **argv, const opts *o)
{
        int rc;
        if (c->faults && (rc = dt_fault_init(getenv("DTRAIN_FAULT")))) return rc;
        if (!dt_comm_launched() && !(c->faults && getenv("DTRAIN_FAULT"))) {
                dt_comm_set_solo();
                return c->run(argc - 1, argv + 1, o) & ~DT_EXIT_AGREED;
        }
        MPI_Init(&argc, &argv);
        dt_mpi_errhandler_set(MPI_COMM_WORLD);
        rc = c->run(argc - 1, argv + 1, o);
        /* a failure every rank agreed on (parallel/agree.h) was printed once: rank 0 alone ends
         * the job, so Open MPI prints one abort notice instead of one per rank */
        int agreed = rc & DT_EXIT_AGREED;
        rc &= ~DT_EXIT_AGREED;
        int size = 1, rank = 0;
        MPI_Comm_size(MPI_COMM_WORLD, &size);
        MPI_Comm_rank(MPI_COMM_WORLD, &rank);
        if (rc && rc != DT_EXIT_SIGNAL && size > 1 && agreed && rank != 0) {
                /* rank 0's MPI_Abort ends this process; a rank leaving on its own (MPI_Finalize,
                 * exit) races the abort inside Open MPI. Abort too only if that never comes. */
                for (int i = 0; i < 600; i++) usleep(100000);
        }
        if (rc && rc != DT_EXIT_SIGNAL && size > 1) MPI_Abort(MPI_COMM_WORLD, rc);
        MPI_Finalize();
        return rc;
}

/* The flags' allocations (the --set lists), freed before exit: nothing is left for LeakSanitizer. */
static void free_opts(const struct command *c, opts *o)
{
        if (c->parse == parse_run || c->parse == parse_check) dt_sets_free(&o->run.sets);
        else if (c->parse == parse_bench) dt_sets_free(&o->bench.sets);
        else if (c->parse == parse_plan) dt_sets_free(&o->plan.sets);
}

/* Commands that do no math skip dt_blas_fix's re-exec (half of `dtrain --version`'s time). */
static int no_math(const char *cmd)
{
        static const char *const light[] = { "--version", "-V", "help", "-h", "--help", "keys", NULL };
        for (int i = 0; cmd && light[i]; i++)
                if (!strcmp(cmd, light[i])) return 1;
        return 0;
}

/* Keep freed memory in the process. glibc's defaults give memory back as soon as the top of the
 * heap is free (trim) and map every block over 128 KiB on its own, so a block allocated and freed
 * every step is unmapped and faulted in again, zeroed page by page, every time. dtrain's own
 * per-step buffers are pooled (the pipeline's messages), but Open MPI's are not: libnbc mallocs
 * a gradient-sized buffer for every nonblocking all-reduce. cnn data 2 x pipeline 2 on 4 ranks,
 * pooled messages: 18.2-19.7 ms per step without this, 17.2-18.5 with it. The 32 MiB cap is
 * glibc's largest mmap threshold on 64-bit; larger blocks are long-lived, allocated once. */
static void malloc_defaults(void)
{
        mallopt(M_MMAP_THRESHOLD, 32 << 20);
        mallopt(M_TRIM_THRESHOLD, 1 << 30);
}

int main(int argc, char **argv)
{
        malloc_defaults();
        dt_argv0 = argv[0];
        /* stdout into a pipe or a file goes out line by line, as on a terminal, so its lines and
         * stderr's messages keep their order (`dtrain check x.yaml 2>&1 | cat` printed the error
         * before the table above it; a Slurm log the same) */
        setvbuf(stdout, NULL, _IOLBF, 0);
        if (argc < 2 || !no_math(argv[1])) {
                dt_blas_fix(argv);      /* may re-exec: before MPI and before any math */
                char msg[160];
                if (dt_cpu_init(msg, sizeof msg)) {     /* the kernels' path, before any kernel runs */
                        fprintf(stderr, "dtrain: error: %s\n", msg);
                        return DT_EXIT_USAGE;
                }
        }
        mpi_defaults();
        if (argc < 2) {
                usage(stderr);
                return DT_EXIT_USAGE;
        }
        const struct command *c = find(argv[1]);
        if (!c) {
                fprintf(stderr, "dtrain: error: unknown command '%s'\n", argv[1]);
                usage(stderr);
                return DT_EXIT_USAGE;
        }
        opts o;
        memset(&o, 0, sizeof o);
        int rc = c->parse ? c->parse(argc - 1, argv + 1, &o) : 0;
        if (!rc) rc = c->mpi ? run_mpi(c, argc, argv, &o) : c->run(argc - 1, argv + 1, &o);
        else if (rc == 1) rc = 0;       /* it printed the command's help */
        free_opts(c, &o);
        return rc;
}
