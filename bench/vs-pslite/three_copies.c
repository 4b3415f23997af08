/*  three_copies: the floor of a shared-memory push and pull on this machine.

    A Kudus push+pull through shared memory makes three copies of the
    values (docs/performance.md, "Shared memory"): the worker copies its
    gradient into a region slot; the shard copies the slot out into a
    staged buffer, summing squares 16 KiB at a time for its NaN and norm
    guard (OpenBLAS sdot, as kd_sumsq); and the worker copies the model out of the snapshot slot.  This
    probe does the same three copies with the same buffers and the same
    two-thread hand-offs, pinned to two cores, with no messages and no
    system calls between them (the threads spin on a flag): what is left
    of a push+pull once the control messages are free.  It prints one JSON
    line per size: each copy's median microseconds and GB/s, and the
    three's op time and GB/s counted as the bench counts (2 S an op).

        three_copies [SIZE_MIB ...]     default 1 16; 50 ops each
*/
#define _GNU_SOURCE
#include <cblas.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "probe.h"

#define S_OPS   50
#define S_CHUNK 4096            //  floats a guard step (16 KiB), as the shard

static void
s_pin (int cpu)
{
    cpu_set_t set;
    CPU_ZERO (&set);
    CPU_SET (cpu, &set);
    pthread_setaffinity_np (pthread_self (), sizeof set, &set);
}

typedef struct {
    size_t n;                   //  floats
    float *slot;                //  the region's push slot
    float *staged;              //  the shard's staged copy
    atomic_int turn;            //  0: worker, 1: shard, 2: stop
    double shard_us [S_OPS];
    volatile double sumsq;      //  kept, so the guard's pass is not elided
} s_shared_t;

//  The shard's side: copy out of the slot with the guard's sum.
static void *
s_shard (void *arg)
{
    s_shared_t *sh = (s_shared_t *) arg;
    s_pin (1);
    for (int op = 0; op < S_OPS; op++) {
        while (atomic_load (&sh->turn) != 1)
            ;
        double t = s_now (), sum = 0;
        for (size_t at = 0; at < sh->n; at += S_CHUNK) {
            size_t m = sh->n - at < S_CHUNK ? sh->n - at : S_CHUNK;
            memcpy (sh->staged + at, sh->slot + at, m * sizeof (float));
            sum += (double) cblas_sdot ((int) m, sh->staged + at, 1, sh->staged + at, 1);
        }
        sh->sumsq = sum;
        sh->shard_us [op] = (s_now () - t) * 1e6;
        atomic_store (&sh->turn, 0);
    }
    return NULL;
}

int
main (int argc, char **argv)
{
    int sizes [16] = { 1, 16 }, n_sizes = 2;
    if (argc > 1) {
        n_sizes = 0;
        for (int i = 1; i < argc && n_sizes < 16; i++) {
            int mib = atoi (argv [i]);
            if (mib < 1 || mib > 1024) {
                fprintf (stderr, "three_copies: SIZE_MIB must be 1 to 1024, not '%s'\n", argv [i]);
                return 2;
            }
            sizes [n_sizes++] = mib;
        }
    }
    s_pin (0);
    for (int k = 0; k < n_sizes; k++) {
        size_t bytes = (size_t) sizes [k] << 20;
        s_shared_t sh = { .n = bytes / sizeof (float) };
        float *grad = malloc (bytes), *snapshot = malloc (bytes), *out = malloc (bytes);
        sh.slot = malloc (bytes);
        sh.staged = malloc (bytes);
        if (!grad || !snapshot || !out || !sh.slot || !sh.staged) {
            fprintf (stderr, "three_copies: cannot allocate %d MiB five times\n", sizes [k]);
            return 1;
        }
        //  Every buffer touched first, as the bench's are after its warm-up.
        for (size_t i = 0; i < sh.n; i++)
            grad [i] = snapshot [i] = out [i] = sh.slot [i] = sh.staged [i] = (float) (i % 1000) * 1e-3f;
        atomic_store (&sh.turn, 0);
        pthread_t shard;
        pthread_create (&shard, NULL, s_shard, &sh);
        double in_us [S_OPS], pull_us [S_OPS], op_us [S_OPS];
        for (int op = 0; op < S_OPS; op++) {
            double t0 = s_now ();
            memcpy (sh.slot, grad, bytes);
            double t1 = s_now ();
            atomic_store (&sh.turn, 1);
            while (atomic_load (&sh.turn) != 0)
                ;
            double t2 = s_now ();
            memcpy (out, snapshot, bytes);
            double t3 = s_now ();
            in_us [op] = (t1 - t0) * 1e6;
            pull_us [op] = (t3 - t2) * 1e6;
            op_us [op] = (t3 - t0) * 1e6;
        }
        pthread_join (shard, NULL);
        qsort (in_us, S_OPS, sizeof (double), s_cmp);
        qsort (sh.shard_us, S_OPS, sizeof (double), s_cmp);
        qsort (pull_us, S_OPS, sizeof (double), s_cmp);
        qsort (op_us, S_OPS, sizeof (double), s_cmp);
        double m_in = in_us [S_OPS / 2], m_shard = sh.shard_us [S_OPS / 2], m_pull = pull_us [S_OPS / 2];
        double m_op = op_us [S_OPS / 2];
        printf ("{\"size_mib\":%d,\"copy_in_us\":%.1f,\"copy_in_gbps\":%.2f,\"shard_copy_guard_us\":%.1f,"
                "\"shard_copy_guard_gbps\":%.2f,\"copy_out_us\":%.1f,\"copy_out_gbps\":%.2f,"
                "\"op_us\":%.1f,\"op_gbps\":%.2f}\n",
                sizes [k], m_in, bytes / m_in / 1e3, m_shard, bytes / m_shard / 1e3, m_pull,
                bytes / m_pull / 1e3, m_op, 2.0 * bytes / m_op / 1e3);
        free (grad);
        free (snapshot);
        free (out);
        free (sh.slot);
        free (sh.staged);
    }
    return 0;
}
