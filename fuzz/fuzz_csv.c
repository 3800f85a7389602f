/* fuzz/fuzz_csv.c - libFuzzer harness: the input is a numeric CSV file, plain or gzip'd. It goes
 * through dt_csv_read with the settings a spec can give (label column last or first, a header
 * line or none, a row limit) and, when accepted, through the dataset loader (fuzz_data.c). Any
 * outcome but a clean return is a finding. */
#include "fuzz.h"
#include "fuzz_data.h"

const char fuzz_name[] = "csv";

static void try(const char *path, int label_column, int header, long limit)
{
        char msg[2048];
        dt_array x, y;
        if (dt_csv_read(path, label_column, header, limit, &x, &y, msg, sizeof msg) == 0) {
                if (!limit) fuzz_dataset(DT_FMT_CSV, path, &x, label_column, header);
                dt_array_free(&x);
                dt_array_free(&y);
        }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        const char *path = fuzz_write("data.csv", data, size);
        try(path, -1, 0, 0);
        try(path, 0, 1, 0);
        try(path, 2, 0, 3);
        return 0;
}
