/* fuzz/fuzz_data.h - what the data harnesses share (fuzz_data.c): the dataset loader driven over
 * a file a reader has accepted, and a batch gathered from a loaded dataset. */
#ifndef DT_FUZZ_DATA_H
#define DT_FUZZ_DATA_H

#include "data/data.h"

/* Loads path (already read by the format's reader into x) through dt_dataset_load in the ways a
 * spec can name it; label_column and header are the CSV settings (ignored by other formats). */
void fuzz_dataset(dt_data_format fmt, const char *path, const dt_array *x, int label_column, int header);
/* Gathers the first and last samples of ds into a batch of two. */
void fuzz_gather(const dt_dataset *ds);

#endif
