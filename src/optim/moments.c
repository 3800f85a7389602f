/* optim/moments.c - the optimizer's moment buffers on the host, laid out so that the optimizer's
 * streams over parameters, gradients, m and v do not alias (optim/moments.h). */
#include "optim/moments.h"

#include "util/common.h"

void dt_moments_alloc(dt_moments *mo, size_t n)
{
        enum { PAGE = 1024, M_OFF = 256, V_OFF = 512 };     /* in floats: 4 KiB, 1 KiB, 2 KiB */
        mo->m = mo->v = mo->blk = NULL;
        if (mo->n < 1) return;
        /* blk starts at the page offset of any large allocation (the parameters'); m M_OFF floats
         * past it, v where (v - blk) is V_OFF modulo a page */
        size_t vgap = (size_t)(V_OFF - M_OFF) + (PAGE - n % PAGE) % PAGE;     /* v - (m + n) */
        mo->blk = dt_falloc(M_OFF + n + (mo->n >= 2 ? vgap + n : 0));
        mo->m = mo->blk + M_OFF;
        if (mo->n >= 2) mo->v = mo->m + n + vgap;
}
