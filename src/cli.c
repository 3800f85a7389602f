/* cli.c - the option tables' help and getopt_long arrays, and the numbers flags take, range-checked
 * (man/dtrain.1 documents every flag the tables hold; tests/cli/man-coverage.sh keeps them in
 * step). */
#include "cli.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "util/common.h"
#include "backend/backend.h"

/* text with each "\n" followed by indent spaces */
static void put_indented(const char *text, int indent, FILE *f)
{
        for (const char *p = text; *p; p++) {
                fputc(*p, f);
                if (*p == '\n' && p[1]) fprintf(f, "%*s", indent, "");
        }
}

void dt_cli_help(const dt_cli_cmd *c, FILE *f)
{
        enum { LEFT = 22, COL = 25 };   /* "  " + the left column + at least one blank */
        fputs(c->usage, f);
        for (const dt_cli_opt *o = c->opts; o->name; o++) {
                if (!o->help) continue;
                char left[96];
                int n = 0;
                if (o->val > 0 && o->val < 256) n = snprintf(left, sizeof left, "-%c, ", o->val);
                n += snprintf(left + n, sizeof left - (size_t)n, "--%s%s%s", o->name,
                              o->arg && o->arg[0] != '[' ? " " : "", o->arg ? o->arg : "");
                if (o->help[0] == '\n') fprintf(f, "  %s\n%*s", left, COL, "");
                else if (n <= LEFT) fprintf(f, "  %-*s ", LEFT, left);
                else fprintf(f, "  %s  ", left);
                put_indented(o->help[0] == '\n' ? o->help + 1 : o->help, COL, f);
                fputc('\n', f);
        }
        fprintf(f, "  %-*s show this help\n", LEFT, "-h, --help");
        if (c->after) fputs(c->after, f);
}

void dt_cli_getopt_init(dt_cli_getopt *g, const dt_cli_cmd *c)
{
        int n = 0, s = 0;
        g->shorts[s++] = 'h';
        for (const dt_cli_opt *o = c->opts; o->name; o++) {
                DT_ASSERT(n < DT_CLI_MAXOPTS);
                g->longs[n++] = (struct option){ o->name, o->has_arg, 0, o->val };
                if (o->val > 0 && o->val < 256) {
                        g->shorts[s++] = (char)o->val;
                        if (o->has_arg != no_argument) g->shorts[s++] = ':';
                        if (o->has_arg == optional_argument) g->shorts[s++] = ':';
                }
        }
        g->longs[n++] = (struct option){ "help", no_argument, 0, 'h' };
        g->longs[n] = (struct option){ 0, 0, 0, 0 };
        g->shorts[s] = 0;
        optind = 1;
        opterr = 0;
}

int dt_cli_next(dt_cli_getopt *g, int argc, char **argv)
{
        return getopt_long(argc, argv, g->shorts, g->longs, NULL);
}

int dt_cli_bad_option(const char *cmd, char **argv, int explain)
{
        if (explain && optopt)
                fprintf(stderr, "dtrain %s: error: option '%s' needs no argument or is unknown\n", cmd, argv[optind - 1]);
        else
                fprintf(stderr, "dtrain %s: error: unknown or incomplete option '%s'\n", cmd, argv[optind - 1]);
        fprintf(stderr, "try 'dtrain %s --help'\n", cmd);
        return DT_EXIT_USAGE;
}

int dt_cli_decimal(const char *s, long long *out)
{
        /* strtoll alone would take leading blanks (' 16') and refuse trailing ones ('16 ') */
        size_t sign = s[0] == '-' || s[0] == '+', digits = strspn(s + sign, "0123456789");
        if (!digits || s[sign + digits]) return -1;
        char *end;
        errno = 0;
        long long v = strtoll(s, &end, 10);
        if (errno || *end) return -1;
        *out = v;
        return 0;
}

int dt_cli_int(const char *cmd, const char *flag, const char *s, long long min, long long max, long long *out)
{
        long long v = 0;
        if (dt_cli_decimal(s, &v) < 0 || v < min || v > max) {
                fprintf(stderr, "dtrain%s%s: error: %s must be an integer in [%lld, %lld], got '%s'\n",
                        cmd ? " " : "", cmd ? cmd : "", flag, min, max, s);
                return -1;
        }
        *out = v;
        return 0;
}

int dt_cli_conv(const char *cmd, const char *s)
{
        for (int k = 0; dt_conv_algo_names[k]; k++)
                if (!strcmp(s, dt_conv_algo_names[k])) return 0;
        fprintf(stderr, "dtrain %s: error: --conv must be auto, im2col or onednn, got '%s'\n", cmd, s);
        return -1;
}
