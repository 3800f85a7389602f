/* train/runlog.c - schedule in words, resume warnings, the best checkpoint, TensorBoard scalars
 * (see runlog.h). */
#include "train/runlog.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include "optim/optim.h"

void dt_runlog_schedule(const dt_train_spec *tr, long spe, char *buf, size_t n)
{
        const dt_sched_spec *s = &tr->sched;
        long total = spe * tr->epochs;
        char warm[48] = "";
        if (s->warmup_steps > 0) snprintf(warm, sizeof warm, " after %ld warm-up steps", s->warmup_steps);
        switch (s->kind) {
        case DT_SCHED_STEP:
                snprintf(buf, n, "step: lr %g x %g every %ld %s%s", tr->lr, s->gamma, s->step_size,
                         s->step_unit_epochs ? "epochs" : "steps", warm);
                break;
        case DT_SCHED_COSINE:
        case DT_SCHED_LINEAR:
                snprintf(buf, n, "%s from lr %g to %g over %ld steps%s", dt_sched_names[s->kind], tr->lr, s->min_lr,
                         total, warm);
                break;
        default:
                snprintf(buf, n, "constant lr %g%s", tr->lr, warm);
        }
}

int dt_runlog_resume_warnings(const dt_train_state *ck, const dt_train_spec *tr, long spe)
{
        int n = 0;
        char now[128];
        dt_runlog_schedule(tr, spe, now, sizeof now);
        if (ck->epochs > 0 && ck->epochs != tr->epochs) {
                fprintf(stderr, "dtrain: warning: the checkpoint's run was set for %ld epochs, this one for %d",
                        ck->epochs, tr->epochs);
                if (tr->sched.kind == DT_SCHED_COSINE || tr->sched.kind == DT_SCHED_LINEAR)
                        fprintf(stderr, ": the %s schedule now spans %ld steps, so the learning rate from step %ld "
                                "on is not the one the first part planned\n", dt_sched_names[tr->sched.kind],
                                spe * tr->epochs, ck->step + 1);
                else
                        fputs(" (the learning-rate schedule does not depend on it)\n", stderr);
                n++;
        }
        /* the schedule as the checkpoint's epoch count would give it: only other changes are news */
        dt_train_spec same = *tr;
        if (ck->epochs > 0) same.epochs = (int)ck->epochs;
        char then[128];
        dt_runlog_schedule(&same, spe, then, sizeof then);
        if (ck->schedule[0] && strcmp(ck->schedule, then)) {
                fprintf(stderr, "dtrain: warning: the learning-rate schedule differs from the checkpoint's run: "
                        "was '%s', now '%s' (from step %ld on)\n", ck->schedule, now, ck->step + 1);
                n++;
        }
        return n;
}

int dt_runlog_best(dt_train_state *st, int metric, int have_test, double tl, double ta, double trl)
{
        if (metric == DT_BEST_NONE) return -1;
        if (!have_test && metric != DT_BEST_TRAIN_LOSS) metric = DT_BEST_TRAIN_LOSS;
        double v = metric == DT_BEST_TEST_LOSS ? tl : metric == DT_BEST_TEST_ACCURACY ? ta : trl;
        if (!isfinite(v)) return 0;
        int higher = metric == DT_BEST_TEST_ACCURACY;
        /* a changed metric (resume with another best_metric) starts the comparison over */
        int same = !strcmp(st->best_metric, dt_best_names[metric]) && st->best_step >= 0;
        if (same && (higher ? v <= st->best_value : v >= st->best_value)) return 0;
        st->best_step = st->step;
        st->best_value = v;
        snprintf(st->best_metric, sizeof st->best_metric, "%s", dt_best_names[metric]);
        return 1;
}

void dt_runlog_tb_epoch(dt_tb *tb, long step, double trl, double tra, double tl, double ta, double lr,
                        double sps, double step_ms, double comm_ms)
{
        static const char *const tags[] = { "epoch/train_loss", "epoch/train_accuracy", "epoch/test_loss",
                                            "epoch/test_accuracy", "epoch/lr", "epoch/samples_per_sec",
                                            "epoch/step_ms", "epoch/comm_wait_ms_per_step" };
        double v[] = { trl, tra, tl, ta, lr, sps, step_ms > 0 ? step_ms : NAN, comm_ms };
        dt_tb_scalars(tb, step, 0, tags, v, 8);
}

void dt_runlog_tb_step(dt_tb *tb, long step, double loss, double acc, double lr, double gn, double sps)
{
        static const char *const tags[] = { "step/loss", "step/accuracy", "step/lr", "step/grad_norm",
                                            "step/samples_per_sec" };
        double v[] = { loss, acc, lr, gn, sps };
        dt_tb_scalars(tb, step, 0, tags, v, 5);
}
