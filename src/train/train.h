/* train/train.h - `dtrain run` and `dtrain check`: spec -> graph -> data -> training loop with
 * evaluation, metrics, checkpoints and the final safetensors. Returns an exit status. */
#ifndef DT_TRAIN_H
#define DT_TRAIN_H

#include "train/run_opts.h"

int dt_cmd_run(const dt_run_opts *o);
int dt_cmd_check(const dt_run_opts *o);

#endif
