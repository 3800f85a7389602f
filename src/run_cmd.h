/* run_cmd.h - `dtrain run` and `dtrain check`: their flags (one parser, two tables). */
#ifndef DT_RUN_CMD_H
#define DT_RUN_CMD_H

#include "cli.h"
#include "train/run_opts.h"

extern const dt_cli_cmd dt_run_cmd, dt_check_cmd;

/* Parses argv (after the command name) for c (dt_run_cmd or dt_check_cmd). Returns 0, 1 for
 * --help (printed), or DT_EXIT_USAGE after printing the problem. */
int dt_run_parse(const dt_cli_cmd *c, int argc, char **argv, dt_run_opts *o);

#endif
