/* train/check_cmd.c - `dtrain check`: the spec, cluster spec and data validated as a run would
 * load them, every on-disk sample checked, the layer table and the memory plan printed. */
#include "train/trainer.h"
#include "train/kernels.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <mpi.h>
#include "config.h"

int dt_cmd_check(const dt_run_opts *o)
{
        trainer t = { .lock_fd = -1, .check_all = 1 };
        int rc = dt_agree_rc(dt_tr_load_model(&t, o));
        if (!rc && t.su.rank != 0) {    /* the other ranks check the same and say nothing */
                rc = dt_tr_load_data_once(&t);
                if (!rc) rc = dt_tr_check_memory(&t);
        } else if (!rc) {
                printf("model: %s (%s)\n", t.su.spec.name, t.su.spec.file);
                printf("BLAS: OpenBLAS, core %s\n", dt_blas_core_desc());
                char kd[512];
                printf("CPU kernels: %s\n", dt_kernels_desc(kd, sizeof kd));
                dt_graph_print_table(dt_setup_model_graph(&t.su), stdout);
                rc = dt_tr_load_data_once(&t);
                dt_tr_print_mem(&t, stdout);
                if (!rc) rc = dt_tr_check_memory(&t);
                if (!rc)
                        printf("data: train %ld samples%s", t.train.n, t.have_test ? "" : "\n");
                if (!rc && t.have_test) printf(", test %ld samples\n", t.test.n);
                if (!rc && (t.su.size > 1 || t.su.cs.strategy != DT_PART_DATA) && t.su.rank == 0)
                        dt_setup_print_plan(&t.su, stdout);
                if (!rc) printf("ok: %s is valid\n", t.su.spec.file);
        }
        dt_tr_free_trainer(&t);
        return rc;
}
