/*  libFuzzer harness for the LIBSVM line parser: any bytes give a row, a
    blank line or an error, and a row's indices increase.
*/
#include <assert.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include "kudus/kd_libsvm.h"

int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
    static kd_libsvm_t *reader = NULL;
    if (!reader)
        reader = kd_libsvm_new (1000000);
    kd_libsvm_row_t row;
    char err [256];
    int rc = kd_libsvm_parse (reader, (const char *) data, size, &row, err, sizeof err);
    assert (rc == 1 || rc == 0 || rc == -2);
    if (rc == 1) {
        assert (isfinite (row.label));
        for (size_t i = 0; i < row.nnz; i++) {
            assert (isfinite (row.value [i]) && row.index [i] <= 1000000);
            assert (i == 0 || row.index [i] > row.index [i - 1]);
        }
    }
    return 0;
}
