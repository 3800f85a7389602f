/* plotting/canvas_cairo.c - the cairo canvas: an image surface written as PNG at the end, or an
 * SVG surface. Built only when configure finds cairo (canvas_nocairo.c otherwise). */
#include "plotting/canvas.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cairo.h>
#include <cairo-svg.h>

typedef struct cc {
        cairo_surface_t *s;
        cairo_t *cr;
        char *png;              /* the path to write at the end; NULL for SVG (written as drawn) */
} cc;

static cairo_t *CR(dt_canvas *c) { return ((cc *)c->priv)->cr; }

static void cairo_polyline(dt_canvas *c, const double *x, const double *y, int n, dt_rgb k, double w, int dashed)
{
        cairo_t *cr = CR(c);
        if (n < 1) return;
        cairo_set_source_rgb(cr, k.r, k.g, k.b);
        cairo_set_line_width(cr, w);
        static const double dash[] = { 5, 3 };
        cairo_set_dash(cr, dash, dashed ? 2 : 0, 0);
        cairo_move_to(cr, x[0], y[0]);
        for (int i = 1; i < n; i++) cairo_line_to(cr, x[i], y[i]);
        cairo_stroke(cr);
        cairo_set_dash(cr, NULL, 0, 0);
}

static void cairo_dot(dt_canvas *c, double x, double y, double r, dt_rgb k)
{
        cairo_t *cr = CR(c);
        cairo_set_source_rgb(cr, k.r, k.g, k.b);
        cairo_arc(cr, x, y, r, 0, 6.283185307179586);
        cairo_fill(cr);
}

static void cairo_rect(dt_canvas *c, double x, double y, double w, double h, dt_rgb k, int fill)
{
        cairo_t *cr = CR(c);
        cairo_set_source_rgb(cr, k.r, k.g, k.b);
        cairo_rectangle(cr, x, y, w, h);
        if (fill) cairo_fill(cr);
        else {
                cairo_set_line_width(cr, 1);
                cairo_stroke(cr);
        }
}

static void cairo_txt(dt_canvas *c, double x, double y, const char *s, double size, int anchor, int vertical, dt_rgb k)
{
        cairo_t *cr = CR(c);
        cairo_save(cr);
        cairo_select_font_face(cr, "sans-serif", CAIRO_FONT_SLANT_NORMAL, CAIRO_FONT_WEIGHT_NORMAL);
        cairo_set_font_size(cr, size);
        cairo_set_source_rgb(cr, k.r, k.g, k.b);
        cairo_text_extents_t e;
        cairo_text_extents(cr, s, &e);
        cairo_translate(cr, x, y);
        if (vertical) cairo_rotate(cr, -1.5707963267948966);
        cairo_move_to(cr, anchor == 0 ? 0 : anchor == 1 ? -e.x_advance / 2 : -e.x_advance, 0);
        cairo_show_text(cr, s);
        cairo_restore(cr);
}

static int cairo_finish(dt_canvas *c)
{
        cc *p = c->priv;
        int rc = 0;
        cairo_destroy(p->cr);
        if (p->png && cairo_surface_write_to_png(p->s, p->png) != CAIRO_STATUS_SUCCESS) {
                errno = EIO;
                rc = -1;
        }
        cairo_surface_finish(p->s);
        if (cairo_surface_status(p->s) != CAIRO_STATUS_SUCCESS) {
                errno = EIO;
                rc = -1;
        }
        cairo_surface_destroy(p->s);
        free(p->png);
        free(p);
        return rc;
}

static const dt_canvas_ops cairo_ops = { cairo_polyline, cairo_dot, cairo_rect, cairo_txt, cairo_finish };

int dt_canvas_have_cairo(void) { return 1; }

int dt_canvas_cairo(dt_canvas *c, const char *path, double w, double h)
{
        size_t n = strlen(path);
        int png = n > 4 && !strcasecmp(path + n - 4, ".png");
        cc *p = calloc(1, sizeof *p);
        if (!p) return -1;
        if (png) {
                p->s = cairo_image_surface_create(CAIRO_FORMAT_RGB24, (int)w, (int)h);
                p->png = strdup(path);
        } else {
                p->s = cairo_svg_surface_create(path, w, h);
        }
        if (cairo_surface_status(p->s) != CAIRO_STATUS_SUCCESS || (png && !p->png)) {
                cairo_surface_destroy(p->s);
                free(p->png);
                free(p);
                errno = EIO;
                return -1;
        }
        if (png) {      /* the PNG is written at the end: fail now, not after drawing, when it cannot be */
                FILE *t = fopen(path, "wb");
                if (!t) {
                        int e = errno;
                        cairo_surface_destroy(p->s);
                        free(p->png);
                        free(p);
                        errno = e;
                        return -1;
                }
                fclose(t);
        }
        p->cr = cairo_create(p->s);
        cairo_set_source_rgb(p->cr, 1, 1, 1);
        cairo_paint(p->cr);
        c->ops = &cairo_ops;
        c->w = w;
        c->h = h;
        c->priv = p;
        return 0;
}
