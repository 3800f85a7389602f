/* train/runlog.h - what a run says about itself beside the model: the learning-rate schedule in
 * words (kept in state.json, compared on resume), which checkpoint is the best, and the scalars
 * TensorBoard gets per step and per epoch. train.c calls these; they print and write, no MPI. */
#ifndef DT_RUNLOG_H
#define DT_RUNLOG_H

#include <stddef.h>
#include "spec/model_spec.h"
#include "train/ckpt.h"
#include "train/tbevents.h"

/* "cosine from lr 0.01 to 0 over 1410 steps after 5 warm-up steps": what decides the lr of a step. */
void dt_runlog_schedule(const dt_train_spec *tr, long steps_per_epoch, char *buf, size_t n);

/* On resume: warnings on stderr when the checkpoint's run had another epoch count or schedule
 * (the learning-rate curve changes from the resumed step on). Returns how many were printed. */
int dt_runlog_resume_warnings(const dt_train_state *ck, const dt_train_spec *tr, long steps_per_epoch);

/* After an epoch's evaluation: 1 when (tl, ta, trl) beats st's best by train.best_metric (st is
 * updated to name step st->step), 0 when not, -1 when the metric is none. A test metric without a
 * test set falls back to the training loss. */
int dt_runlog_best(dt_train_state *st, int metric, int have_test, double test_loss, double test_acc,
                   double train_loss);

/* TensorBoard scalars of an epoch and of a step line (non-finite values are left out). */
void dt_runlog_tb_epoch(dt_tb *tb, long step, double train_loss, double train_acc, double test_loss,
                        double test_acc, double lr, double sps, double step_ms, double comm_wait_ms);
void dt_runlog_tb_step(dt_tb *tb, long step, double loss, double acc, double lr, double grad_norm, double sps);

#endif
