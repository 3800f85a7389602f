/* cli.h - what every command file shares: its option table (the getopt_long options and the
 * --help lines in one place), the help printed from it, and range-checked numbers. */
#ifndef DT_CLI_H
#define DT_CLI_H

#include <getopt.h>
#include <stdio.h>

/* One flag: getopt_long's name, has_arg and val (a letter for a short option too, e.g. 'o' for
 * -o, else >= 256), then its help line: arg follows "--name" in the left column ("FILE",
 * "[=auto|DIR]"; NULL: none), help is the right column (each "\n" continues under it; a help that
 * starts with "\n" begins under a left column too long to share its line; NULL: left out of the
 * help, as a flag another line names). -h, --help is every command's and needs no entry. */
typedef struct dt_cli_opt {
        const char *name;
        int has_arg;
        int val;
        const char *arg;
        const char *help;
} dt_cli_opt;

/* A command as `dtrain --help` lists it and `dtrain NAME --help` explains it. */
typedef struct dt_cli_cmd {
        const char *name;
        const char *synopsis;   /* dtrain --help's left column: "run MODEL.yaml" */
        const char *summary;    /* its right column (each "\n" continues under it) */
        const char *usage;      /* the help above the flags: "usage: ...", what it does */
        const dt_cli_opt *opts; /* ended by an entry with name NULL */
        const char *after;      /* the help below the flags, or NULL */
} dt_cli_cmd;

void dt_cli_help(const dt_cli_cmd *c, FILE *f);

/* getopt_long over a command's table: init resets getopt and builds its arrays; next returns
 * getopt_long's answer ('h' for -h and --help). */
#define DT_CLI_MAXOPTS 32
typedef struct dt_cli_getopt {
        struct option longs[DT_CLI_MAXOPTS + 2];
        char shorts[3 * DT_CLI_MAXOPTS + 2];
} dt_cli_getopt;
void dt_cli_getopt_init(dt_cli_getopt *g, const dt_cli_cmd *c);
int dt_cli_next(dt_cli_getopt *g, int argc, char **argv);
/* An option getopt refused (argv[optind - 1]): "dtrain CMD: error: unknown or incomplete option
 * 'X'" (explain: "option 'X' needs no argument or is unknown" for a flag given a value it does
 * not take) and "try 'dtrain CMD --help'"; returns DT_EXIT_USAGE. */
int dt_cli_bad_option(const char *cmd, char **argv, int explain);

/* A flag's integer: strtoll with the whole string, errno and [min, max] checked; on error prints
 * "dtrain[ CMD]: error: FLAG must be an integer in [min, max], got 'S'" and returns -1. */
int dt_cli_int(const char *cmd, const char *flag, const char *s, long long min, long long max, long long *out);
/* s is a decimal integer and nothing else: an optional sign and digits, no blanks, no base
 * prefix, within long long. 0 with *out set, or -1. Every integer a flag takes goes through it. */
int dt_cli_decimal(const char *s, long long *out);
/* --conv's value: 0 when it names a dt_conv_algo, else -1 after printing "dtrain CMD: error: ...". */
int dt_cli_conv(const char *cmd, const char *s);

#endif
