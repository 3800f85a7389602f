/* plotting/canvas_nocairo.c - stands in for canvas_cairo.c when dtrain is built without cairo:
 * PNG is refused with ENOTSUP, SVG goes through canvas_svg.c. */
#include "plotting/canvas.h"

#include <errno.h>

int dt_canvas_have_cairo(void) { return 0; }

int dt_canvas_cairo(dt_canvas *c, const char *path, double w, double h)
{
        (void)c; (void)path; (void)w; (void)h;
        errno = ENOTSUP;
        return -1;
}
