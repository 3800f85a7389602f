/* train/tbevents.c - the TensorBoard events writer (see tbevents.h). The protobuf encoding is done
 * by hand for the three messages used:
 *   Event   { double wall_time = 1; int64 step = 2; string file_version = 3; Summary summary = 5; }
 *   Summary { repeated Value value = 1; }
 *   Value   { string tag = 1; float simple_value = 2; }
 * (tensorflow/core/util/event.proto, summary.proto); wire types: 0 varint, 1 fixed64,
 * 2 length-delimited, 5 fixed32, all little-endian. */
#include "train/tbevents.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ---- CRC32C: reflected polynomial 0x82f63b78, one table ---- */

static uint32_t crc_table[256];

static void crc_init(void)
{
        for (uint32_t i = 0; i < 256; i++) {
                uint32_t c = i;
                for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ 0x82f63b78u : c >> 1;
                crc_table[i] = c;
        }
}

uint32_t dt_crc32c(const void *p, size_t n)
{
        if (!crc_table[1]) crc_init();
        const unsigned char *b = p;
        uint32_t c = 0xffffffffu;
        for (size_t i = 0; i < n; i++) c = crc_table[(c ^ b[i]) & 0xff] ^ (c >> 8);
        return c ^ 0xffffffffu;
}

uint32_t dt_tb_mask(uint32_t crc)
{
        return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

/* ---- protobuf, into a growing buffer ---- */

typedef struct buf {
        unsigned char *p;
        size_t n, cap;
        int bad;
} buf;

static void put(buf *b, const void *d, size_t n)
{
        if (b->bad) return;
        if (b->n + n > b->cap) {
                size_t cap = b->cap ? b->cap : 256;
                while (cap < b->n + n) cap *= 2;
                unsigned char *q = realloc(b->p, cap);
                if (!q) {
                        b->bad = 1;
                        return;
                }
                b->p = q;
                b->cap = cap;
        }
        memcpy(b->p + b->n, d, n);
        b->n += n;
}

static void varint(buf *b, uint64_t v)
{
        unsigned char t[10];
        int n = 0;
        do {
                t[n++] = (unsigned char)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
                v >>= 7;
        } while (v);
        put(b, t, (size_t)n);
}

static void key(buf *b, int field, int wire) { varint(b, (uint64_t)field << 3 | (uint64_t)wire); }

static void le(buf *b, uint64_t v, int bytes)
{
        unsigned char t[8];
        for (int i = 0; i < bytes; i++) t[i] = (unsigned char)(v >> (8 * i));
        put(b, t, (size_t)bytes);
}

static void f64(buf *b, int field, double v)
{
        uint64_t u;
        memcpy(&u, &v, 8);
        key(b, field, 1);
        le(b, u, 8);
}

static void f32(buf *b, int field, float v)
{
        uint32_t u;
        memcpy(&u, &v, 4);
        key(b, field, 5);
        le(b, u, 4);
}

static void bytes(buf *b, int field, const void *d, size_t n)
{
        key(b, field, 2);
        varint(b, n);
        put(b, d, n);
}

/* ---- records ---- */

static int record(dt_tb *tb, const buf *ev)
{
        if (ev->bad) return -1;
        unsigned char h[12];
        uint64_t n = ev->n;
        for (int i = 0; i < 8; i++) h[i] = (unsigned char)(n >> (8 * i));
        uint32_t lc = dt_tb_mask(dt_crc32c(h, 8)), dc = dt_tb_mask(dt_crc32c(ev->p, ev->n));
        for (int i = 0; i < 4; i++) h[8 + i] = (unsigned char)(lc >> (8 * i));
        unsigned char t[4];
        for (int i = 0; i < 4; i++) t[i] = (unsigned char)(dc >> (8 * i));
        if (fwrite(h, 1, 12, tb->f) != 12 || fwrite(ev->p, 1, ev->n, tb->f) != ev->n || fwrite(t, 1, 4, tb->f) != 4)
                return -1;
        return fflush(tb->f) ? -1 : 0;
}

static double wall(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int dt_tb_open(dt_tb *tb, const char *dir)
{
        char host[256] = "localhost";
        gethostname(host, sizeof host - 1);
        host[sizeof host - 1] = 0;
        double now = wall();
        /* the pid keeps two files of one second apart (a resume straight after a stop) */
        snprintf(tb->path, sizeof tb->path, "%s/events.out.tfevents.%ld.%s.%ld", dir, (long)now, host, (long)getpid());
        tb->f = fopen(tb->path, "wb");
        if (!tb->f) return -1;
        buf ev = { 0 };
        f64(&ev, 1, now);
        static const char ver[] = "brain.Event:2";
        bytes(&ev, 3, ver, sizeof ver - 1);
        int rc = record(tb, &ev);
        free(ev.p);
        return rc;
}

int dt_tb_scalars(dt_tb *tb, long step, double wall_time, const char *const *tags, const double *v, int n)
{
        if (!tb->f) return 0;
        buf sum = { 0 }, val = { 0 }, ev = { 0 };
        for (int i = 0; i < n; i++) {
                if (!isfinite(v[i])) continue;
                val.n = 0;
                bytes(&val, 1, tags[i], strlen(tags[i]));
                f32(&val, 2, (float)v[i]);
                if (val.bad) sum.bad = 1;
                else bytes(&sum, 1, val.p, val.n);
        }
        f64(&ev, 1, wall_time > 0 ? wall_time : wall());
        key(&ev, 2, 0);
        varint(&ev, (uint64_t)(step < 0 ? 0 : step));
        if (sum.bad) ev.bad = 1;
        else bytes(&ev, 5, sum.p ? sum.p : (unsigned char *)"", sum.n);
        int rc = record(tb, &ev);
        free(sum.p);
        free(val.p);
        free(ev.p);
        return rc;
}

void dt_tb_close(dt_tb *tb)
{
        if (tb->f) fclose(tb->f);
        tb->f = NULL;
}
