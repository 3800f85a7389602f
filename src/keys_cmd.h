/* keys_cmd.h - `dtrain keys [FILTER]`: the keys the model spec accepts. */
#ifndef DT_KEYS_CMD_H
#define DT_KEYS_CMD_H

#include "cli.h"

extern const dt_cli_cmd dt_keys_cmd;

/* argv[0] is "keys"; an optional FILTER follows. Returns an exit status. */
int dt_cmd_keys(int argc, char **argv);

#endif
