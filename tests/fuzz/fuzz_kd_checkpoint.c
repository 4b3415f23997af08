/*  fuzz_kd_checkpoint: libFuzzer harness for the checkpoint reader.

    A shard reads checkpoints back from disk after a crash, so the reader
    must survive any bytes: torn writes, bit rot, a file that is not a
    checkpoint at all.  The input is written to a private directory in
    /dev/shm (falling back to /tmp) under a checkpoint's name, read
    directly and through load_latest.  Either call must return a checkpoint
    or an error with a message; ASan watches for everything else.
*/
#include "kd_checkpoint.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char s_dir [4096];

int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
    if (!s_dir [0]) {
        //  Under run-fuzz.sh's folder, which it removes; by hand, /dev/shm.
        const char *base = getenv ("KD_FUZZ_DIR");
        snprintf (s_dir, sizeof s_dir, "%s/kd-fuzz-ckpt-XXXXXX", base ? base : "/dev/shm");
        if (!mkdtemp (s_dir)) {
            snprintf (s_dir, sizeof s_dir, "/tmp/kd-fuzz-ckpt-XXXXXX");
            if (!mkdtemp (s_dir))
                abort ();
        }
    }
    char path [4200];
    snprintf (path, sizeof path, "%s/ckpt-00000000000000000001.kdc", s_dir);
    FILE *f = fopen (path, "wb");
    if (!f)
        abort ();
    if (size)
        fwrite (data, 1, size, f);
    fclose (f);
    kd_checkpoint_meta_t meta;
    float *params = NULL, *velocity = NULL;
    char err [512] = "";
    int rc = kd_checkpoint_read (path, &meta, &params, &velocity, err, sizeof err);
    if (rc == 0 && meta.key_dim > 0) {
        //  A keyed range: key_rows keys inside the range, and their rows.
        size_t n = (size_t) meta.key_rows * (1 + meta.n_state) * meta.key_dim;
        if (!params || velocity || meta.hi <= meta.lo || meta.hi > meta.n_params
        ||  meta.key_rows > meta.hi - meta.lo || (meta.key_rows > 0) != (meta.keys != NULL))
            abort ();
        for (size_t i = 0; i < meta.key_rows; i++)
            if (meta.keys [i] < meta.lo || meta.keys [i] >= meta.hi)
                abort ();
        volatile float sink = n > 0 ? params [n - 1] : 0;
        (void) sink;
    }
    else
    if (rc == 0) {
        //  A file that passes must describe exactly the arrays it returned.
        size_t n = (size_t) (meta.hi - meta.lo);
        if (!params || meta.keys || meta.hi <= meta.lo || meta.hi > meta.n_params || meta.n_state > 2
        ||  (meta.n_state > 0) != (velocity != NULL))
            abort ();
        volatile float sink = params [n - 1] + (velocity ? velocity [meta.n_state * n - 1] : 0);
        (void) sink;
    }
    else
    if (!err [0] || params || velocity || meta.keys)
        abort ();
    free (params);
    free (velocity);
    free (meta.keys);
    rc = kd_checkpoint_load_latest (s_dir, &meta, &params, &velocity, NULL, 0, err, sizeof err);
    if (rc < 0 || (rc == 0) != (params != NULL))
        abort ();
    free (params);
    free (velocity);
    if (rc == 0)
        free (meta.keys);
    unlink (path);
    return 0;
}
