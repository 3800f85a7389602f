/* bench_cmd.h - `dtrain bench`: its flags (bench/bench.h has what they fill and the work). */
#ifndef DT_BENCH_CMD_H
#define DT_BENCH_CMD_H

#include "cli.h"
#include "bench/bench.h"

extern const dt_cli_cmd dt_bench_cmd;

/* Parses argv (after "bench"). Returns 0, 1 for --help (printed), or DT_EXIT_USAGE after printing
 * the problem. Needs no MPI. */
int dt_bench_parse(int argc, char **argv, dt_bench_opts *o);

#endif
