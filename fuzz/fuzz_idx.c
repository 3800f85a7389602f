/* fuzz/fuzz_idx.c - libFuzzer harness: the input is an IDX file (MNIST's format), plain or
 * gzip'd. It goes through dt_idx_read and, when accepted, through the dataset loader as samples,
 * labels and targets (fuzz_data.c). Any outcome but a clean return is a finding. */
#include "fuzz.h"
#include "fuzz_data.h"

const char fuzz_name[] = "idx";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        const char *path = fuzz_write("data.idx", data, size);
        char msg[2048];
        dt_array a;
        if (dt_idx_read(path, &a, msg, sizeof msg) == 0) {
                fuzz_dataset(DT_FMT_IDX, path, &a, -1, 0);
                dt_array_free(&a);
        }
        return 0;
}
