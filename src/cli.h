/* cli.h - command-line parsing shared by the commands, and the --help texts. */
#ifndef DT_CLI_H
#define DT_CLI_H

#include <stdio.h>
#include "train/train.h"

/* Parses argv (after the command name) for run/check. Returns 0, 1 for --help (printed), or
 * DT_EXIT_USAGE after printing the problem. */
int dt_cli_parse(const char *cmd, int argc, char **argv, dt_run_opts *o);
void dt_cli_usage(FILE *f);
void dt_cli_cmd_help(const char *cmd, FILE *f);

#endif
