/* plot_cmd.h - `dtrain plot RUN_DIR [-o FILE.png|.svg]`: the run's loss and accuracy curves (train
 * per step and per epoch, test per epoch) from its metrics.jsonl. Returns an exit status. */
#ifndef DT_PLOT_CMD_H
#define DT_PLOT_CMD_H

#include "cli.h"

extern const dt_cli_cmd dt_plot_cmd;

int dt_cmd_plot(int argc, char **argv);

#endif
