/* cli.h - command-line parsing shared by the commands, and the --help texts. */
#ifndef DT_CLI_H
#define DT_CLI_H

#include <stdio.h>
#include "train/train.h"

/* Parses argv (after the command name) for run/check. Returns 0, 1 for --help (printed), or
 * DT_EXIT_USAGE after printing the problem. */
int dt_cli_parse(const char *cmd, int argc, char **argv, dt_run_opts *o);
void dt_cli_usage(FILE *f);
/* A flag's integer: strtoll with the whole string, errno and [min, max] checked; on error prints
 * "dtrain[ CMD]: error: FLAG must be an integer in [min, max], got 'S'" and returns -1. */
int dt_cli_int(const char *cmd, const char *flag, const char *s, long long min, long long max, long long *out);
/* s is a decimal integer and nothing else: an optional sign and digits, no blanks, no base
 * prefix, within long long. 0 with *out set, or -1. Every integer a flag takes goes through it. */
int dt_cli_decimal(const char *s, long long *out);
void dt_cli_cmd_help(const char *cmd, FILE *f);
/* --conv's value: 0 when it names a dt_conv_algo, else -1 after printing "dtrain CMD: error: ...". */
int dt_cli_conv(const char *cmd, const char *s);

#endif
