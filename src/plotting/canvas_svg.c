/* plotting/canvas_svg.c - the SVG canvas: each call one SVG element, written as it comes. */
#include "plotting/canvas.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

static FILE *F(dt_canvas *c) { return c->priv; }

static void col(FILE *f, dt_rgb k)
{
        fprintf(f, "#%02x%02x%02x", (int)(k.r * 255 + 0.5), (int)(k.g * 255 + 0.5), (int)(k.b * 255 + 0.5));
}

static void svg_polyline(dt_canvas *c, const double *x, const double *y, int n, dt_rgb k, double w, int dashed)
{
        FILE *f = F(c);
        fputs("<polyline fill=\"none\" stroke=\"", f);
        col(f, k);
        fprintf(f, "\" stroke-width=\"%.2f\"%s points=\"", w, dashed ? " stroke-dasharray=\"5,3\"" : "");
        for (int i = 0; i < n; i++) fprintf(f, "%s%.1f,%.1f", i ? " " : "", x[i], y[i]);
        fputs("\"/>\n", f);
}

static void svg_dot(dt_canvas *c, double x, double y, double r, dt_rgb k)
{
        fprintf(F(c), "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"%.1f\" fill=\"", x, y, r);
        col(F(c), k);
        fputs("\"/>\n", F(c));
}

static void svg_rect(dt_canvas *c, double x, double y, double w, double h, dt_rgb k, int fill)
{
        fprintf(F(c), "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" %s=\"", x, y, w, h, fill ? "fill" : "stroke");
        col(F(c), k);
        fprintf(F(c), "\"%s/>\n", fill ? "" : " fill=\"none\"");
}

static void svg_text(dt_canvas *c, double x, double y, const char *s, double size, int anchor, int vertical, dt_rgb k)
{
        static const char *const an[] = { "start", "middle", "end" };
        FILE *f = F(c);
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-family=\"sans-serif\" font-size=\"%.1f\" text-anchor=\"%s\"", x, y,
                size, an[anchor]);
        if (vertical) fprintf(f, " transform=\"rotate(-90 %.1f %.1f)\"", x, y);
        fputs(" fill=\"", f);
        col(f, k);
        fputs("\">", f);
        for (; *s; s++) {
                if (*s == '<') fputs("&lt;", f);
                else if (*s == '>') fputs("&gt;", f);
                else if (*s == '&') fputs("&amp;", f);
                else fputc(*s, f);
        }
        fputs("</text>\n", f);
}

static int svg_finish(dt_canvas *c)
{
        FILE *f = F(c);
        fputs("</svg>\n", f);
        int bad = ferror(f);
        if (fclose(f) || bad) {
                if (!errno) errno = EIO;
                return -1;
        }
        return 0;
}

static const dt_canvas_ops svg_ops = { svg_polyline, svg_dot, svg_rect, svg_text, svg_finish };

int dt_canvas_svg(dt_canvas *c, const char *path, double w, double h)
{
        FILE *f = fopen(path, "w");
        if (!f) return -1;
        fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg xmlns=\"http://www.w3.org/2000/svg\" "
                "width=\"%.0f\" height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\">\n", w, h, w, h);
        fprintf(f, "<rect width=\"100%%\" height=\"100%%\" fill=\"#ffffff\"/>\n");
        c->ops = &svg_ops;
        c->w = w;
        c->h = h;
        c->priv = f;
        return 0;
}
