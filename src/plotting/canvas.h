/* plotting/canvas.h - the few drawing calls `dtrain plot` needs, behind one small vtable: a plain
 * SVG writer (always built) and cairo (PNG or SVG, built when configure finds cairo). Coordinates
 * in pixels from the top left. */
#ifndef DT_CANVAS_H
#define DT_CANVAS_H

typedef struct dt_rgb { double r, g, b; } dt_rgb;
typedef struct dt_canvas dt_canvas;

typedef struct dt_canvas_ops {
        void (*polyline)(dt_canvas *c, const double *x, const double *y, int n, dt_rgb col, double width, int dashed);
        void (*dot)(dt_canvas *c, double x, double y, double r, dt_rgb col);
        void (*rect)(dt_canvas *c, double x, double y, double w, double h, dt_rgb col, int fill);
        /* anchor: 0 left, 1 centre, 2 right; vertical: rotated a quarter turn anticlockwise */
        void (*text)(dt_canvas *c, double x, double y, const char *s, double size, int anchor, int vertical, dt_rgb col);
        int (*finish)(dt_canvas *c);    /* writes the file: 0, or -1 with errno */
} dt_canvas_ops;

struct dt_canvas {
        const dt_canvas_ops *ops;
        double w, h;
        void *priv;
};

/* Opens path for a w x h picture. 0, or -1 with errno. */
int dt_canvas_svg(dt_canvas *c, const char *path, double w, double h);
/* The same through cairo: PNG when path ends in .png, else SVG. -1 with errno; ENOTSUP when dtrain
 * was built without cairo. */
int dt_canvas_cairo(dt_canvas *c, const char *path, double w, double h);
/* 1 when built with cairo. */
int dt_canvas_have_cairo(void);

#endif
