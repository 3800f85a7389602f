/* keys_cmd.c - `dtrain keys [FILTER]`: every key the model spec accepts, with its type and
 * default, as the spec's readers record them (spec/model_spec.c's dt_model_spec_list_keys). */
#include "keys_cmd.h"

#include <string.h>
#include "util/common.h"
#include "spec/model_spec.h"

static const dt_cli_opt opts[] = {
        { NULL, 0, 0, NULL, NULL },
};

const dt_cli_cmd dt_keys_cmd = {
        .name = "keys", .synopsis = "keys [FILTER]",
        .summary = "list the keys the model spec accepts, with type and default",
        .usage = "usage: dtrain keys [FILTER]\n"
                 "\n"
                 "Prints every key the model spec accepts, one 'section.key  type  default' per line;\n"
                 "a default in parentheses is a rule, e.g. (the kernel), (required); '-' is none.\n"
                 "With FILTER only the keys that start with or contain it (e.g. layers.conv, lr).\n",
        .opts = opts,
};

int dt_cmd_keys(int argc, char **argv)
{
        const char *filter = NULL;
        for (int i = 1; i < argc; i++) {
                if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
                        dt_cli_help(&dt_keys_cmd, stdout);
                        return 0;
                }
                if (argv[i][0] == '-' || filter) {
                        fprintf(stderr, "dtrain keys: error: %s '%s'\ntry 'dtrain keys --help'\n",
                                argv[i][0] == '-' ? "unknown option" : "unexpected argument", argv[i]);
                        return DT_EXIT_USAGE;
                }
                filter = argv[i];
        }
        if (dt_model_spec_list_keys(stdout, filter, 1) == 0 && filter) {
                fprintf(stderr, "dtrain keys: error: no key starts with or contains '%s'\n", filter);
                return DT_EXIT_USAGE;
        }
        return 0;
}
