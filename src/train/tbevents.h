/* train/tbevents.h - TensorBoard event files written natively: DIR/events.out.tfevents.TIME.HOST,
 * records of (length, masked CRC32C of the length, an Event protobuf, masked CRC32C of it), the
 * first Event carrying file_version "brain.Event:2", each later one a Summary of scalar values at
 * a step. TensorBoard reads every events file in a directory, so a resumed run adds a new file. */
#ifndef DT_TBEVENTS_H
#define DT_TBEVENTS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef struct dt_tb {
        FILE *f;
        char path[4096];
} dt_tb;

/* Creates the file in dir. 0, or -1 with errno. */
int dt_tb_open(dt_tb *tb, const char *dir);
/* One Event at 'step' with n scalar values tags[i] = v[i] (non-finite values are left out);
 * flushed. 0, or -1 on a write error. */
int dt_tb_scalars(dt_tb *tb, long step, double wall_time, const char *const *tags, const double *v, int n);
void dt_tb_close(dt_tb *tb);

/* CRC32C (Castagnoli), and TensorFlow's mask of it: ((c >> 15) | (c << 17)) + 0xa282ead8. */
uint32_t dt_crc32c(const void *p, size_t n);
uint32_t dt_tb_mask(uint32_t crc);

#endif
