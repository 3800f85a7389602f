/* train/elastic.c - a fixed layout replaced on an elastic relaunch (train/elastic.h): the nearest
 * grid that fits the ranks left, or strategy auto's plan; checked by the spec's own rules first, so
 * a replacement never runs what a user could not have written. */
#include "train/elastic.h"

#include <stdlib.h>
#include <string.h>
#include "util/common.h"

int dt_elastic_relaunch(void)
{
        const char *e = getenv("DTRAIN_RESTART");
        return e && *e;
}

/* The spec's layout as written: its strategy, the grid degrees it gives, its 'ranks'. */
static void describe(const dt_cluster_spec *cs, char *buf, size_t n)
{
        static const dt_cs_bits bits[3] = { DT_CS_GDATA, DT_CS_GPIPE, DT_CS_GTENSOR };
        static const char *const names[3] = { "data", "pipeline", "tensor" };
        const int g[3] = { cs->grid_data, cs->grid_pipeline, cs->grid_tensor };
        size_t len = (size_t)snprintf(buf, n, "strategy %s", dt_part_names[cs->strategy]);
        const char *sep = " ";
        for (int a = 0; a < 3 && len < n; a++)
                if (cs->set & bits[a]) {
                        len += (size_t)snprintf(buf + len, n - len, "%s%s %d", sep, names[a], g[a]);
                        sep = " x ";
                }
        if ((cs->set & DT_CS_RANKS) && cs->ranks && len < n) snprintf(buf + len, n - len, ", ranks %d", cs->ranks);
}

/* Whether the spec, as it stands, passes the checks a run makes for 'size' ranks. */
static int fits(const dt_cluster_spec *cs, const dt_model_spec *m, int size)
{
        dt_diag d = { 0 };
        int ok = dt_cluster_spec_validate(cs, m, size, &d) == 0 && d.n == 0;
        dt_diag_free(&d);
        return ok;
}

dt_elastic_how dt_elastic_fit(dt_cluster_spec *cs, const dt_model_spec *m, int nlayers, int size, dt_elastic *e)
{
        memset(e, 0, sizeof *e);
        const dt_cs_bits layout = DT_CS_RANKS | DT_CS_STRATEGY | DT_CS_GDATA | DT_CS_GPIPE | DT_CS_GTENSOR;
        /* a value that did not parse is the spec's error, whatever the ranks */
        if (!dt_elastic_relaunch() || cs->elastic == 1 || (cs->bad & layout) || cs->strategy == DT_PART_AUTO ||
            fits(cs, m, size))
                return DT_ELASTIC_KEPT;
        describe(cs, e->from, sizeof e->from);
        /* the nearest: the same stages and tensor groups (their cuts, splits and schedule too), fewer
         * replicas; 'ranks' follows the job. Strategy model has one replica: it becomes hybrid. */
        dt_cluster_spec near = *cs;
        near.ranks = 0;
        near.set &= ~(DT_CS_RANKS | DT_CS_GDATA);
        near.grid_data = 0;
        int grid[3];
        dt_diag d = { 0 };
        if (near.strategy != DT_PART_DATA) {
                near.strategy = DT_PART_HYBRID;
                if (dt_cluster_grid(&near, size, nlayers, grid, &d) == 0) {
                        near.grid_data = grid[0];
                        near.set |= DT_CS_GDATA;
                }
        }
        dt_diag_free(&d);
        if ((near.strategy == DT_PART_DATA || (near.set & DT_CS_GDATA)) && fits(&near, m, size)) {
                *cs = near;
                return e->how = DT_ELASTIC_SHRUNK;
        }
        /* else as strategy auto: the planner chooses the grid, cuts, splits and schedule */
        cs->strategy = DT_PART_AUTO;
        cs->ranks = cs->grid_data = cs->grid_pipeline = cs->grid_tensor = 0;
        cs->set &= ~(DT_CS_RANKS | DT_CS_GDATA | DT_CS_GPIPE | DT_CS_GTENSOR | DT_CS_STAGES | DT_CS_MICROS |
                     DT_CS_SCHEDULE | DT_CS_SPLITS);
        memset(&cs->cuts, 0, sizeof cs->cuts);
        memset(&cs->splits, 0, sizeof cs->splits);
        return e->how = DT_ELASTIC_REPLAN;
}

void dt_elastic_done(dt_elastic *e, const int grid[3])
{
        snprintf(e->to, sizeof e->to, "data %d x pipeline %d x tensor %d", grid[0], grid[1], grid[2]);
}
