/*  first_touch: what a first write to fresh memory costs on this machine.

    Both sparse programs time a single first push and pull of 10 million
    keys, which write about 120 MB of memory no one has touched.  On a VM
    whose balloon reports free pages to the host (Firecracker here), a page
    freed a few seconds ago is no longer backed by the host, and its next
    first touch costs a host fault: several times a page that is still
    backed.  This probe maps CHUNKS chunks of 64 MiB, writes one byte a
    page, and frees them; then again at once (the pages just freed, still
    backed); then again after WAIT seconds (by then reported to the host).
    It prints one JSON line: for each pass, the median microseconds a page
    over its chunks, and its slowest chunk's.  Ask for more memory than the
    machine freed lately, or the first pass, too, gets backed pages.

        first_touch [CHUNKS [WAIT]]     default 64 chunks (4 GiB), 30 s
*/
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
#include "probe.h"

#define S_CHUNK (64ul << 20)
#define S_MAX_CHUNKS 256

//  Maps and touches n chunks, keeping all of them mapped so that each gets
//  pages of its own; fills us[] with microseconds a page.  Returns 0 or -1.
static int
s_pass (size_t n, double *us)
{
    char *chunk [S_MAX_CHUNKS] = { NULL };
    int rc = 0;
    for (size_t k = 0; k < n && !rc; k++) {
        chunk [k] = mmap (NULL, S_CHUNK, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (chunk [k] == MAP_FAILED) {
            chunk [k] = NULL;
            rc = -1;
            break;
        }
        //  4 KiB pages, as the programs' allocations mostly get.
        madvise (chunk [k], S_CHUNK, MADV_NOHUGEPAGE);
        double t = s_now ();
        for (size_t i = 0; i < S_CHUNK; i += 4096)
            chunk [k][i] = 1;
        us [k] = (s_now () - t) * 1e6 / (S_CHUNK / 4096);
    }
    for (size_t k = 0; k < n; k++)
        if (chunk [k])
            munmap (chunk [k], S_CHUNK);
    return rc;
}

int
main (int argc, char *argv [])
{
    long n = argc > 1 ? strtol (argv [1], NULL, 10) : 64;
    long wait = argc > 2 ? strtol (argv [2], NULL, 10) : 30;
    if (n < 1 || n > S_MAX_CHUNKS || wait < 0 || wait > 3600) {
        fprintf (stderr, "first_touch: CHUNKS is 1 to %d and WAIT 0 to 3600 seconds\n", S_MAX_CHUNKS);
        return 2;
    }
    static double us [3][S_MAX_CHUNKS];
    for (int p = 0; p < 3; p++) {
        if (p == 2)
            sleep ((unsigned) wait);
        if (s_pass ((size_t) n, us [p])) {
            fprintf (stderr, "first_touch: cannot map %ld MiB\n", n * 64);
            return 1;
        }
        qsort (us [p], (size_t) n, sizeof (double), s_cmp);
    }
    printf ("{\"bench\": \"first-touch\", \"mib\": %ld, \"wait_s\": %ld, "
            "\"first_us_per_page\": %.2f, \"first_max\": %.2f, "
            "\"again_us_per_page\": %.2f, \"again_max\": %.2f, "
            "\"after_wait_us_per_page\": %.2f, \"after_wait_max\": %.2f}\n",
            n * 64, wait, us [0][n / 2], us [0][n - 1], us [1][n / 2], us [1][n - 1],
            us [2][n / 2], us [2][n - 1]);
    return 0;
}
