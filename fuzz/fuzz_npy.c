/* fuzz/fuzz_npy.c - libFuzzer harness: the input is a NumPy .npy file, plain or gzip'd. It goes
 * through dt_npy_read and, when accepted, through the dataset loader as samples, labels and
 * targets (fuzz_data.c). Any outcome but a clean return is a finding. */
#include "fuzz.h"
#include "fuzz_data.h"

const char fuzz_name[] = "npy";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        const char *path = fuzz_write("data.npy", data, size);
        char msg[2048];
        dt_array a;
        if (dt_npy_read(path, &a, msg, sizeof msg) == 0) {
                fuzz_dataset(DT_FMT_NPY, path, &a, -1, 0);
                dt_array_free(&a);
        }
        return 0;
}
