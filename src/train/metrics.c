/* train/metrics.c - JSON Lines metrics writer: every line flushed to the kernel at once (readers
 * such as `dtrain plot` see it), fsync'd by the checkpoint writer with each commit. */
#include "train/metrics.h"

#include <math.h>
#include <stdio.h>
#include <unistd.h>
#include "util/common.h"

/* JSON has no NaN: write null so every line stays parseable */
static void num(FILE *f, const char *key, double v, const char *fmt)
{
        fprintf(f, ",\"%s\":", key);
        if (isfinite(v)) fprintf(f, fmt, v);
        else fputs("null", f);
}

void dt_metrics_memory(dt_metrics *m, int nranks, const double *mem)
{
        m->nranks = nranks;
        m->mem = mem;
}

int dt_metrics_open(dt_metrics *m, const char *dir, int append)
{
        char path[DT_PATH_MAX];
        snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
        m->f = fopen(path, append ? "a+" : "w");
        if (!m->f) return -1;
        /* a line a kill cut short is ended, so the next line is whole */
        if (append && fseek(m->f, -1, SEEK_END) == 0 && fgetc(m->f) != '\n') {
                fseek(m->f, 0, SEEK_END);
                fputc('\n', m->f);
        }
        fseek(m->f, 0, SEEK_END);
        return 0;
}


void dt_metrics_resumed(dt_metrics *m, long step, long epoch, double time, const char *checkpoint)
{
        if (!m->f) return;
        fprintf(m->f, "{\"resumed_from\":%ld,\"epoch\":%ld", step, epoch);
        num(m->f, "time", time, "%.3f");
        fputs(",\"checkpoint\":", m->f);
        dt_json_str(m->f, checkpoint);
        fputs("}\n", m->f);
        fflush(m->f);
}


void dt_metrics_write(dt_metrics *m, long epoch, long step, const char *split, double loss,
                      double accuracy, double sps, double time, double lr, double step_ms, int partial)
{
        if (!m->f) return;
        fprintf(m->f, "{\"epoch\":%ld,\"step\":%ld,\"split\":\"%s\"", epoch, step, split);
        num(m->f, "loss", loss, "%.6g");
        num(m->f, "accuracy", accuracy, "%.6g");
        num(m->f, "samples_per_sec", sps, "%.1f");
        num(m->f, "time", time, "%.3f");
        num(m->f, "lr", lr, "%.6g");
        if (step_ms > 0) num(m->f, "step_ms", step_ms, "%.3f");
        if (partial) fputs(",\"partial\":true", m->f);
        for (int k = 0; k < 2 && m->nranks > 0; k++) {
                fprintf(m->f, ",\"%s\":[", k ? "mem_peak_mib" : "mem_planned_mib");
                for (int r = 0; r < m->nranks; r++) fprintf(m->f, "%s%.1f", r ? "," : "", m->mem[2 * r + k] / 1048576.0);
                fputc(']', m->f);
        }
        fputs("}\n", m->f);
        fflush(m->f);   /* to the kernel; to the disk with the next checkpoint's commit */
}

void dt_metrics_step(dt_metrics *m, long epoch, long step, double loss, double accuracy, double lr,
                     double grad_norm, double sps, double time)
{
        if (!m->f) return;
        fprintf(m->f, "{\"epoch\":%ld,\"step\":%ld,\"split\":\"step\"", epoch, step);
        num(m->f, "loss", loss, "%.6g");
        num(m->f, "accuracy", accuracy, "%.6g");
        num(m->f, "lr", lr, "%.6g");
        num(m->f, "grad_norm", grad_norm, "%.6g");
        num(m->f, "samples_per_sec", sps, "%.1f");
        num(m->f, "time", time, "%.3f");
        fputs("}\n", m->f);
        fflush(m->f);
}

void dt_metrics_close(dt_metrics *m)
{
        if (m->f) fclose(m->f);
        m->f = NULL;
}
