/* eval_cmd.h - `dtrain eval` (loss, accuracy, confusion matrix on a split) and `dtrain predict`
 * (outputs per sample of an input file). Return an exit status. */
#ifndef DT_EVAL_CMD_H
#define DT_EVAL_CMD_H

#include "cli.h"

extern const dt_cli_cmd dt_eval_cmd, dt_predict_cmd;

int dt_cmd_eval(int argc, char **argv);
int dt_cmd_predict(int argc, char **argv);

#endif
