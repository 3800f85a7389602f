/* train/restart.c - the restart record of metrics.jsonl (train/restart.h): the launcher's
 * environment parsed and checked, and the one line written after the first step. */
#include "train/restart.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "util/common.h"

static int num(const char *name, double *out, int integer, char *msg, size_t len)
{
        const char *e = getenv(name);
        if (!e || !*e) return 1;
        char *end;
        errno = 0;
        double v = integer ? (double)strtol(e, &end, 10) : strtod(e, &end);
        if (errno || *end || v < 0) {
                snprintf(msg, len, "%s=%s: expected a non-negative %s", name, e, integer ? "integer" : "number");
                return -1;
        }
        *out = v;
        return 0;
}

int dt_restart_from_env(dt_restart *r, long resumed_from, char *msg, size_t len)
{
        memset(r, 0, sizeof *r);
        double count = 0, at = 0, logged = -1;
        int rc = num("DTRAIN_RESTART", &count, 1, msg, len);
        if (rc) return rc < 0 ? -1 : 0;
        if (num("DTRAIN_RESTART_FAILED_AT", &at, 0, msg, len) < 0) return -1;
        if (num("DTRAIN_RESTART_LOGGED_STEP", &logged, 1, msg, len) < 0) return -1;
        const char *ranks = getenv("DTRAIN_RESTART_LOST_RANKS"), *nodes = getenv("DTRAIN_RESTART_LOST_NODES");
        ranks = ranks ? ranks : "";
        nodes = nodes ? nodes : "";
        /* the ranks go into the JSON as they are: digits and commas only, no empty entry */
        int ok = strlen(ranks) < sizeof r->ranks && strlen(nodes) < sizeof r->nodes;
        for (const char *p = ranks; ok && *p; p++)
                ok = (*p >= '0' && *p <= '9') || (*p == ',' && p > ranks && p[1] && p[1] != ',');
        if (!ok) {
                snprintf(msg, len, "DTRAIN_RESTART_LOST_RANKS=%s: expected rank numbers separated by commas "
                         "(e.g. 2,3), at most %zu characters", ranks, sizeof r->ranks - 1);
                return -1;
        }
        snprintf(r->ranks, sizeof r->ranks, "%s", ranks);
        snprintf(r->nodes, sizeof r->nodes, "%s", nodes);
        r->count = (long)count;
        r->failed_at = at;
        r->logged_step = (long)logged;
        r->resumed_from = resumed_from;
        r->pending = 1;
        return 0;
}

void dt_restart_layout(dt_restart *r, const char *how, const char *from, const char *to)
{
        snprintf(r->layout_how, sizeof r->layout_how, "%s", how);
        snprintf(r->layout_from, sizeof r->layout_from, "%s", from);
        snprintf(r->layout_to, sizeof r->layout_to, "%s", to);
}

double dt_restart_clock(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void dt_restart_write(dt_restart *r, FILE *f, long step, double now)
{
        if (!r->pending || !f) return;
        r->pending = 0;
        fprintf(f, "{\"restart\":%ld", r->count);
        if (r->failed_at > 0) fprintf(f, ",\"failed_at\":%.3f", r->failed_at);
        fprintf(f, ",\"lost_ranks\":[%s],\"lost_nodes\":", r->ranks);
        dt_json_str(f, r->nodes);
        fprintf(f, ",\"from_step\":%ld,\"first_step\":%ld", r->resumed_from, step);
        /* the failed launch may have run past its last logged step: at least this many */
        if (r->logged_step >= 0)
                fprintf(f, ",\"steps_redone\":%ld", r->logged_step > r->resumed_from ? r->logged_step - r->resumed_from : 0);
        if (r->failed_at > 0) fprintf(f, ",\"recovery_s\":%.3f", now - r->failed_at);
        if (r->layout_how[0]) {
                fputs(",\"layout_from\":", f);
                dt_json_str(f, r->layout_from);
                fputs(",\"layout\":", f);
                dt_json_str(f, r->layout_to);
                fputs(",\"layout_how\":", f);
                dt_json_str(f, r->layout_how);
        }
        fputs("}\n", f);
        fflush(f);
}
