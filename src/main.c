/* main.c - command dispatch: run, check, bench, sample, keys; --help and --version. Only main decides to exit. */
#include <stdio.h>
#include <string.h>
#include <mpi.h>
#include "cli.h"
#include "sample.h"
#include "bench/bench.h"
#include "util/common.h"
#include "util/cpu_fix.h"
#include "util/fault.h"
#include "parallel/mpierr.h"
#include "spec/model_spec.h"
#include "config.h"

/* Open MPI's nonblocking allreduce (libnbc) picks, by default, an algorithm that ran at 0.5-0.65x
 * of the blocking MPI_Allreduce for gradient buckets here; the ring algorithm ran at 1.3-1.5x.
 * MCA parameters are read at MPI_Init, so set it first unless the user chose one. */
static void mpi_defaults(void)
{
        setenv("OMPI_MCA_coll_libnbc_iallreduce_algorithm", "1", 0);
}

int main(int argc, char **argv)
{
        dt_blas_fix(argv);  /* may re-exec: before MPI and before any math */
        mpi_defaults();
        if (argc < 2) {
                dt_cli_usage(stderr);
                return DT_EXIT_USAGE;
        }
        const char *cmd = argv[1];
        if (!strcmp(cmd, "-h") || !strcmp(cmd, "--help") || !strcmp(cmd, "help")) {
                dt_cli_usage(stdout);
                return 0;
        }
        if (!strcmp(cmd, "-V") || !strcmp(cmd, "--version")) {
                printf("dtrain %s\n", PACKAGE_VERSION);
                return 0;
        }
        if (!strcmp(cmd, "keys")) {
                if (argc > 2 && (!strcmp(argv[2], "-h") || !strcmp(argv[2], "--help"))) {
                        dt_cli_cmd_help(cmd, stdout);
                        return 0;
                }
                dt_model_spec_list_keys(stdout);
                return 0;
        }
        if (!strcmp(cmd, "sample"))     /* one process, no MPI */
                return dt_cmd_sample(argc - 1, argv + 1);
        if (!strcmp(cmd, "bench")) {
                dt_bench_opts bo;
                int rc = dt_bench_parse(argc - 1, argv + 1, &bo);
                if (rc) return rc == 1 ? 0 : rc;
                MPI_Init(&argc, &argv);
                dt_mpi_errhandler_set(MPI_COMM_WORLD);
                rc = dt_cmd_bench(&bo);
                int size = 1;
                MPI_Comm_size(MPI_COMM_WORLD, &size);
                if (rc && size > 1) MPI_Abort(MPI_COMM_WORLD, rc);
                MPI_Finalize();
                return rc;
        }
        if (strcmp(cmd, "run") && strcmp(cmd, "check")) {
                fprintf(stderr, "dtrain: error: unknown command '%s'\n", cmd);
                dt_cli_usage(stderr);
                return DT_EXIT_USAGE;
        }
        dt_run_opts o;
        int rc = dt_cli_parse(cmd, argc - 1, argv + 1, &o);
        if (rc) return rc == 1 ? 0 : rc;
        if ((rc = dt_fault_init(getenv("DTRAIN_FAULT")))) return rc;
        MPI_Init(&argc, &argv);
        dt_mpi_errhandler_set(MPI_COMM_WORLD);
        rc = !strcmp(cmd, "run") ? dt_cmd_run(&o) : dt_cmd_check(&o);
        int size = 1;
        MPI_Comm_size(MPI_COMM_WORLD, &size);
        /* a peer must not wait on a failed rank; a signal stop (75) is agreed by all ranks,
         * so they end normally and the launcher sees 75 */
        if (rc && rc != DT_EXIT_SIGNAL && size > 1) MPI_Abort(MPI_COMM_WORLD, rc);
        MPI_Finalize();
        return rc;
}
