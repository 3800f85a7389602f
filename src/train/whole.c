/* train/whole.c - the whole model's host copy (see whole.h). */
#include "train/whole.h"

#include <stdlib.h>
#include <string.h>
#include "util/common.h"

void dt_whole_alloc(dt_whole *w, const dt_graph *full, int nmo)
{
        memset(w, 0, sizeof *w);
        w->g = *full;
        size_t np = full->nparams ? full->nparams : 1;
        w->buf[0] = w->g.params = dt_falloc(np);
        w->buf[1] = w->g.buffers = dt_falloc(full->nbuffers ? full->nbuffers : 1);
        w->mo.n = nmo;
        if (nmo >= 1) w->buf[2] = w->mo.m = dt_falloc(np);
        if (nmo >= 2) w->buf[3] = w->mo.v = dt_falloc(np);
}

void dt_whole_free(dt_whole *w)
{
        for (int k = 0; k < 4; k++) free(w->buf[k]);
        memset(w, 0, sizeof *w);
}
