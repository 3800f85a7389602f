/* train/progress.c - the progress bar on a terminal and the plain progress lines elsewhere (see
 * progress.h). The ETA of the run is the steps left (to --max-steps when it ends the run sooner)
 * at this process's mean step time so far. */
#include "train/progress.h"
#include "parallel/comm.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

/* Started by a launcher (mpirun, srun)? Read before main, hence before MPI_Init, which sets the
 * same variables for a singleton too. */
static int launched;

__attribute__((constructor)) static void note_launcher(void)
{
        launched = dt_comm_launched();
}

dt_progress_mode dt_progress_mode_for(FILE *f, int quiet)
{
        if (quiet) return DT_PROGRESS_OFF;
        /* under a launcher a rank's stdout may be a pseudo-terminal that ends in a file or a log:
         * lines, never a carriage return */
        if (launched) return DT_PROGRESS_LINES;
        return isatty(fileno(f)) ? DT_PROGRESS_BAR : DT_PROGRESS_LINES;
}

void dt_progress_init(dt_progress *p, dt_progress_mode mode, FILE *f, double every_s, long every_steps,
                      double now, long step)
{
        memset(p, 0, sizeof *p);
        p->mode = mode;
        p->f = f;
        p->every_s = every_s > 0 ? every_s : 10.0;
        p->every_steps = every_steps > 0 ? every_steps : 0;
        p->t0 = p->last_t = now;
        p->step0 = p->last_step = step;
}

const char *dt_progress_dur(double s, char *buf, size_t n)
{
        if (!isfinite(s) || s < 0) snprintf(buf, n, "?");
        else if (s < 60) snprintf(buf, n, "%.1fs", s);
        else if (s < 3600) snprintf(buf, n, "%dm%02ds", (int)(s / 60), (int)fmod(s, 60));
        else snprintf(buf, n, "%dh%02dm", (int)(s / 3600), (int)fmod(s / 60, 60));
        return buf;
}

/* The terminal's columns: the window size, else $COLUMNS, else 80. */
static int columns(const dt_progress *p)
{
        if (p->width > 0) return p->width;
        struct winsize ws;
        if (!ioctl(fileno(p->f), TIOCGWINSZ, &ws) && ws.ws_col > 0) return ws.ws_col;
        const char *c = getenv("COLUMNS");
        int v = c ? atoi(c) : 0;
        return v > 0 ? v : 80;
}

void dt_progress_etas(const dt_progress_info *in, double per, double *ep, double *run, long *end)
{
        /* the steps this epoch still runs: to its end, or to the run's last step when that comes first */
        long left = in->spe - in->k, to_total = in->total - in->step;
        if (to_total >= 0 && to_total < left) left = to_total;
        if (left < 0) left = 0;
        *end = in->k + left;
        *ep = in->k > 0 && in->epoch_elapsed > 0 ? in->epoch_elapsed / (double)in->k * (double)left : NAN;
        if (!isfinite(*ep)) *ep = per * (double)left;
        /* the rest of this epoch at its own rate, the epochs after at the run's */
        long after = to_total - left;
        *run = *ep + (after > 0 ? per * (double)after : 0);
}

/* Seconds left in the epoch and the run, from the epoch's and the run's rates so far. */
static void etas(const dt_progress *p, const dt_progress_info *in, double now, double *ep, double *run, long *end)
{
        long done = in->step - p->step0;
        dt_progress_etas(in, done > 0 ? (now - p->t0) / (double)done : NAN, ep, run, end);
}

static void loss_str(double loss, char *b, size_t n)
{
        if (isfinite(loss)) snprintf(b, n, "%.4f", loss);
        else snprintf(b, n, "-");       /* a pipeline's first stage never sees the loss */
}

static void bar(dt_progress *p, const dt_progress_info *in, double now)
{
        double ee, re;
        long end;
        etas(p, in, now, &ee, &re, &end);
        char ls[32], e1[24], e2[24], head[64], tails[3][160];
        loss_str(in->loss, ls, sizeof ls);
        dt_progress_dur(ee, e1, sizeof e1);
        dt_progress_dur(re, e2, sizeof e2);
        snprintf(head, sizeof head, "epoch %ld/%ld ", in->epoch, in->epochs);
        /* less and less detail until a bar of 10 columns fits beside it */
        /* the bar spans the steps this epoch runs: to the epoch's end, or to --max-steps within it */
        snprintf(tails[0], sizeof tails[0], " %ld/%ld loss %s %.0f/s ETA %s run %s", in->k, end, ls, in->sps, e1, e2);
        snprintf(tails[1], sizeof tails[1], " %ld/%ld loss %s ETA %s run %s", in->k, end, ls, e1, e2);
        snprintf(tails[2], sizeof tails[2], " %ld/%ld loss %s ETA %s", in->k, end, ls, e1);
        int cols = columns(p) - 1;      /* never the last column: some terminals wrap there */
        int t = 0;
        while (t < 2 && cols - (int)strlen(head) - (int)strlen(tails[t]) - 2 < 10) t++;
        int w = cols - (int)strlen(head) - (int)strlen(tails[t]) - 2;
        char line[512];
        if (w >= 8) {
                if (w > 40) w = 40;
                char b[48];
                int fill = (int)((long)w * in->k / (end ? end : 1));
                for (int i = 0; i < w; i++) b[i] = i < fill ? '=' : (i == fill ? '>' : ' ');
                b[w] = 0;
                snprintf(line, sizeof line, "%s[%s]%s", head, b, tails[t]);
        } else {        /* too narrow for a bar: the figures, cut to fit */
                snprintf(line, sizeof line, "%s%s", head, tails[t] + 1);
        }
        if (cols > 0 && (int)strlen(line) > cols) line[cols > (int)sizeof line - 1 ? (int)sizeof line - 1 : cols] = 0;
        fprintf(p->f, "\r%s\033[K", line);
        fflush(p->f);
        p->drawn = 1;
}

static void line(dt_progress *p, const dt_progress_info *in, double now)
{
        double ee, re;
        long end;
        etas(p, in, now, &ee, &re, &end);
        char ls[32], el[24], e1[24], e2[24];
        loss_str(in->loss, ls, sizeof ls);
        fprintf(p->f, "progress: epoch %ld/%ld step %ld/%ld (%ld/%ld in epoch) loss %s %.0f samples/s "
                "elapsed %s ETA epoch %s run %s\n", in->epoch, in->epochs, in->step, in->total, in->k, in->spe,
                ls, in->sps, dt_progress_dur(in->elapsed, el, sizeof el), dt_progress_dur(ee, e1, sizeof e1),
                dt_progress_dur(re, e2, sizeof e2));
        fflush(p->f);
}

void dt_progress_step(dt_progress *p, const dt_progress_info *in, double now)
{
        if (p->mode == DT_PROGRESS_BAR) {
                long last = in->total - in->step;       /* the bar's last step: the epoch's, or the run's */
                if (now - p->last_t >= 0.1 || in->k == in->spe || last == 0 || in->k == 1) {
                        bar(p, in, now);
                        p->last_t = now;
                }
        } else if (p->mode == DT_PROGRESS_LINES) {
                int by_steps = p->every_steps && in->step - p->last_step >= p->every_steps;
                if (by_steps || now - p->last_t >= p->every_s) {
                        line(p, in, now);
                        p->last_t = now;
                        p->last_step = in->step;
                }
        }
}

void dt_progress_eval(dt_progress *p, long epoch, long epochs, long samples)
{
        if (p->mode == DT_PROGRESS_BAR) {
                char l[128];
                snprintf(l, sizeof l, "epoch %ld/%ld evaluating the test set (%ld samples)...", epoch, epochs, samples);
                int cols = columns(p) - 1;
                if (cols > 0 && (int)strlen(l) > cols) l[cols < (int)sizeof l ? cols : (int)sizeof l - 1] = 0;
                fprintf(p->f, "\r%s\033[K", l);
                fflush(p->f);
                p->drawn = 1;
        }
}

void dt_progress_clear(dt_progress *p)
{
        if (p->mode == DT_PROGRESS_BAR && p->drawn) {
                fputs("\r\033[K", p->f);
                fflush(p->f);
        }
        p->drawn = 0;
}
