/*  fuzz_kd_dataset: libFuzzer harness for the IDX loader.

    The input is split at the first "\n--\n" into an image file and a label
    file, written to a private directory in /dev/shm (falling back to /tmp),
    and loaded whole and as a slice.  The loader must return a dataset or
    NULL with a message; ASan watches for everything else.  Built and run by
    CTest when clang is available (see CMakeLists.txt).
*/
#define _GNU_SOURCE         //  memmem
#include "kd_dataset.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char s_dir [4096];

//  Write bytes to a file; 0 or -1.
static int
s_write (const char *path, const uint8_t *data, size_t size)
{
    FILE *f = fopen (path, "wb");
    if (!f)
        return -1;
    size_t n = size ? fwrite (data, 1, size, f) : 0;
    return fclose (f) == 0 && n == size ? 0 : -1;
}

//  Load and check the contract.
static void
s_load (const char *images, const char *labels, size_t lo, size_t hi)
{
    char err [256] = "";
    kd_dataset_t *d = kd_dataset_load (images, labels, lo, hi, err, sizeof err);
    if (!d && !err [0])
        abort ();
    if (d) {
        volatile float sink = 0;
        size_t n = kd_dataset_count (d) * kd_dataset_dim (d);
        const float *x = kd_dataset_images (d);
        for (size_t i = 0; i < n; i += 97)
            sink += x [i];
        (void) sink;
        for (size_t i = 0; i < kd_dataset_count (d); i++)
            if (kd_dataset_labels (d) [i] >= 10)
                abort ();
    }
    kd_dataset_destroy (&d);
}

int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size);

//  libFuzzer entry point.
int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
    if (!s_dir [0]) {
        //  Under run-fuzz.sh's folder, which it removes; by hand, /dev/shm.
        const char *base = getenv ("KD_FUZZ_DIR");
        snprintf (s_dir, sizeof s_dir, "%s/kd-fuzz-XXXXXX", base ? base : "/dev/shm");
        if (!mkdtemp (s_dir)) {
            snprintf (s_dir, sizeof s_dir, "/tmp/kd-fuzz-XXXXXX");
            if (!mkdtemp (s_dir))
                abort ();
        }
    }
    char images [4200], labels [4200];
    snprintf (images, sizeof images, "%s/images", s_dir);
    snprintf (labels, sizeof labels, "%s/labels", s_dir);
    const uint8_t *sep = (const uint8_t *) memmem (data, size, "\n--\n", 4);
    size_t isize = sep ? (size_t) (sep - data) : size;
    const uint8_t *ldata = sep ? sep + 4 : data + size;
    size_t lsize = (size_t) (data + size - ldata);
    if (s_write (images, data, isize) || s_write (labels, ldata, lsize))
        return 0;
    s_load (images, labels, 0, 0);
    s_load (images, labels, 1, 3);
    return 0;
}
