/*  kd_shm and kd_shmlink: regions, attachment checks, the snapshot seqlock.
*/
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>
#include "kd_internal.h"
#include "kd_shm.h"
#include "kd_shmlink.h"

static kd_shm_t *
s_attach_self (kd_shm_t *owner, uint64_t token, char *why, size_t size)
{
    return kd_shm_attach ((uint64_t) getpid (), kd_shm_fd (owner), token, kd_shm_size (owner), false,
                          why, size);
}

Test (kd_shm, host_identity_names_boot_and_pid_namespace)
{
    char host [KD_SHM_HOST_MAX];
    cr_assert_eq (kd_shm_host (host, sizeof host), 0);
    cr_expect (strstr (host, "/pid:[") && strstr (host, "/net:["), "host is %s", host);
    char tiny [8];
    cr_expect_eq (kd_shm_host (tiny, sizeof tiny), -1);
}

Test (kd_shm, a_peer_maps_what_the_owner_wrote)
{
    kd_shm_t *owner = kd_shm_new ("test", 1000);
    cr_assert (owner);
    cr_expect_eq (kd_shm_size (owner), 1024, "rounded to whole cache lines");
    cr_expect_eq ((uintptr_t) kd_shm_data (owner) % KD_SHM_ALIGN, 0);
    memset (kd_shm_data (owner), 0x5a, kd_shm_size (owner));
    char why [160];
    kd_shm_t *peer = s_attach_self (owner, kd_shm_token (owner), why, sizeof why);
    cr_assert (peer, "attach: %s", why);
    cr_expect (memcmp (kd_shm_data (peer), kd_shm_data (owner), 1024) == 0);
    //  Written after the mapping: the same pages.
    ((uint8_t *) kd_shm_data (owner)) [7] = 1;
    cr_expect_eq (((uint8_t *) kd_shm_data (peer)) [7], 1);
    cr_expect (!kd_shm_owner_gone (peer));
    kd_shm_destroy (&peer);
    cr_expect_null (peer);
    kd_shm_destroy (&owner);
    kd_shm_destroy (&owner);
}

Test (kd_shm, a_wrong_token_size_or_descriptor_is_refused)
{
    kd_shm_t *owner = kd_shm_new ("test", 4096);
    cr_assert (owner);
    char why [160];
    cr_expect_null (s_attach_self (owner, kd_shm_token (owner) ^ 1, why, sizeof why));
    cr_expect (strstr (why, "token"), "%s", why);
    cr_expect_null (kd_shm_attach ((uint64_t) getpid (), kd_shm_fd (owner), kd_shm_token (owner), 8192,
                                   false, why, sizeof why));
    cr_expect (strstr (why, "not a region"), "%s", why);
    cr_expect_null (kd_shm_attach ((uint64_t) getpid (), 987654, kd_shm_token (owner), 4096, false,
                                   why, sizeof why));
    cr_expect (strstr (why, "cannot open"), "%s", why);
    cr_expect_null (kd_shm_attach (0, 3, 1, 4096, false, why, sizeof why));
    cr_expect_null (kd_shm_attach ((uint64_t) getpid (), 3, 1, 100, false, why, sizeof why));
    //  An unsealed file could shrink under the mapping: never mapped.
    int fd = memfd_create ("unsealed", MFD_CLOEXEC);
    cr_assert (fd >= 0);
    cr_assert_eq (ftruncate (fd, 4096 + 4096), 0);
    cr_expect_null (kd_shm_attach ((uint64_t) getpid (), (uint64_t) fd, 1, 4096, false, why, sizeof why));
    cr_expect (strstr (why, "sealed"), "%s", why);
    close (fd);
    kd_shm_destroy (&owner);
}

Test (kd_shm, the_owner_s_exit_is_seen)
{
    int pipefd [2];
    cr_assert_eq (pipe (pipefd), 0);
    pid_t child = fork ();
    cr_assert (child >= 0);
    if (child == 0) {
        kd_shm_t *r = kd_shm_new ("child", 4096);
        uint64_t msg [3] = { r ? kd_shm_fd (r) : 0, r ? kd_shm_token (r) : 0, r ? 1 : 0 };
        if (write (pipefd [1], msg, sizeof msg) != (ssize_t) sizeof msg)
            _exit (1);
        pause ();
        _exit (0);
    }
    uint64_t msg [3];
    cr_assert_eq (read (pipefd [0], msg, sizeof msg), (ssize_t) sizeof msg);
    cr_assert_eq (msg [2], 1);
    char why [160];
    kd_shm_t *peer = kd_shm_attach ((uint64_t) child, msg [0], msg [1], 4096, false, why, sizeof why);
    cr_assert (peer, "attach: %s", why);
    cr_expect (!kd_shm_owner_gone (peer));
    kill (child, SIGKILL);
    waitpid (child, NULL, 0);
    cr_expect (kd_shm_owner_gone (peer));
    //  The pages stay valid while we map them.
    cr_expect_eq (((uint8_t *) kd_shm_data (peer)) [0], 0);
    kd_shm_destroy (&peer);
    close (pipefd [0]);
    close (pipefd [1]);
}

Test (kd_shm, a_snapshot_read_sees_its_publication_or_says_torn)
{
    enum { N = 1000 };
    kd_shm_t *owner = kd_shm_new_snapshot ("snap", N);
    cr_assert (owner);
    char why [160];
    kd_shm_t *reader = s_attach_self (owner, kd_shm_token (owner), why, sizeof why);
    cr_assert (reader, "%s", why);
    float a [N], b [N], out [N];
    for (int i = 0; i < N; i++) {
        a [i] = (float) i;
        b [i] = (float) -i;
    }
    uint64_t off_a, off_b, off_c;
    uint64_t seq_a = kd_shm_publish (owner, a, N, &off_a);
    cr_expect (seq_a > 0 && seq_a % 2 == 0);
    cr_assert_eq (kd_shm_read (reader, off_a, seq_a, out, N), 0);
    cr_expect (memcmp (out, a, sizeof a) == 0);
    uint64_t seq_b = kd_shm_publish (owner, b, N, &off_b);
    cr_expect_neq (off_a, off_b, "the next publication goes to the other slot");
    //  The older slot is still whole.
    cr_expect_eq (kd_shm_read (reader, off_a, seq_a, out, N), 0);
    cr_expect (memcmp (out, a, sizeof a) == 0);
    cr_expect_eq (kd_shm_read (reader, off_b, seq_b, out, N), 0);
    cr_expect (memcmp (out, b, sizeof b) == 0);
    //  A third publication reuses a's slot: a's readers are told to retry.
    uint64_t seq_c = kd_shm_publish (owner, b, N, &off_c);
    cr_expect_eq (off_c, off_a);
    cr_expect_neq (seq_c, seq_a);
    cr_expect_eq (kd_shm_read (reader, off_a, seq_a, out, N), -1);
    //  Names of no publication are malformed.
    cr_expect_eq (kd_shm_read (reader, off_a + 4, seq_c, out, N), -2);
    cr_expect_eq (kd_shm_read (reader, off_a, seq_c + 1, out, N), -2);
    cr_expect_eq (kd_shm_read (reader, off_a, 0, out, N), -2);
    cr_expect_eq (kd_shm_read (reader, 1ull << 40, seq_c, out, N), -2);
    cr_expect_eq (kd_shm_read (reader, off_a, seq_c, out, 100000), -2);
    kd_shm_destroy (&reader);
    kd_shm_destroy (&owner);
}

//  A writer that publishes without pause, and a reader that asks it for
//  its newest publication, as a PULL does, then copies it while newer ones
//  are written: every copy it keeps is whole (all values equal).
Test (kd_shm, concurrent_readers_never_keep_a_torn_copy)
{
    enum { N = 1 << 16 };
    kd_shm_t *owner = kd_shm_new_snapshot ("snap", N);
    cr_assert (owner);
    int ask [2], tell [2];
    cr_assert_eq (pipe (ask), 0);
    cr_assert_eq (pipe (tell), 0);
    pid_t child = fork ();
    cr_assert (child >= 0);
    if (child == 0) {
        float *v = (float *) malloc (N * sizeof (float));
        uint64_t news [2] = { 0, 0 };
        for (int round = 1; ; round++) {
            for (int i = 0; i < N; i++)
                v [i] = (float) round;
            news [1] = kd_shm_publish (owner, v, N, &news [0]);
            struct pollfd p = { ask [0], POLLIN, 0 };
            char c;
            if (poll (&p, 1, 0) > 0) {
                if (read (ask [0], &c, 1) != 1 || write (tell [1], news, sizeof news) != (ssize_t) sizeof news)
                    _exit (0);
            }
        }
    }
    char why [160];
    kd_shm_t *reader = s_attach_self (owner, kd_shm_token (owner), why, sizeof why);
    cr_assert (reader, "%s", why);
    float *out = (float *) malloc (N * sizeof (float));
    int whole = 0, torn = 0;
    for (int i = 0; i < 400; i++) {
        uint64_t news [2];
        cr_assert_eq (write (ask [1], "?", 1), 1);
        cr_assert_eq (read (tell [0], news, sizeof news), (ssize_t) sizeof news);
        int rc = kd_shm_read (reader, news [0], news [1], out, N);
        cr_assert (rc == 0 || rc == -1, "rc %d", rc);
        if (rc == 0) {
            bool same = true;
            for (int k = 1; k < N && same; k++)
                same = out [k] == out [0];
            cr_assert (same, "a kept copy was torn");
            whole++;
        }
        else
            torn++;
    }
    kill (child, SIGKILL);
    waitpid (child, NULL, 0);
    cr_expect (whole > 0, "no copy was kept (torn=%d)", torn);
    cr_log_info ("FIGURE shm seqlock: %d copies kept, %d refused as torn", whole, torn);
    free (out);
    kd_shm_destroy (&reader);
    kd_shm_destroy (&owner);
    close (ask [0]); close (ask [1]); close (tell [0]); close (tell [1]);
}

Test (kd_shmlink, offer_names_the_push_region_and_slots_are_apart)
{
    kd_shmlink_t *link = kd_shmlink_new (5000, 2);
    cr_assert (link);
    kd_msg_t *offer = kd_shmlink_offer (link);
    cr_expect_eq (kd_msg_type (offer), KD_MSG_SHM);
    cr_expect_eq (kd_msg_uint (offer, KD_F_PID), (uint64_t) getpid ());
    cr_expect_geq (kd_msg_uint (offer, KD_F_BYTES), 2 * 5000 * sizeof (float));
    cr_expect_eq (kd_shmlink_offset (link, 1) - kd_shmlink_offset (link, 0), 20032);
    cr_expect_eq ((uint8_t *) kd_shmlink_slot (link, 1) - (uint8_t *) kd_shmlink_slot (link, 0), 20032);
    //  The region attaches as a shard would attach it.
    char why [160];
    kd_shm_t *peer = kd_shm_attach (kd_msg_uint (offer, KD_F_PID), kd_msg_uint (offer, KD_F_FD),
                                    kd_msg_uint (offer, KD_F_TOKEN), kd_msg_uint (offer, KD_F_BYTES),
                                    false, why, sizeof why);
    cr_assert (peer, "%s", why);
    kd_shm_destroy (&peer);
    //  An ERROR is a refusal with its reason; another host's SHM_OK too.
    kd_msg_t *err = kd_msg_new_error (NULL, KD_ERR_STATE, "shared memory is off");
    cr_expect_eq (kd_shmlink_accept (link, err, why, sizeof why), -1);
    cr_expect_str_eq (why, "shared memory is off");
    kd_msg_t *ok = kd_msg_new (KD_MSG_SHM_OK);
    kd_msg_set_str (ok, KD_F_HOST, "elsewhere");
    cr_expect_eq (kd_shmlink_accept (link, ok, why, sizeof why), -1);
    cr_expect (strstr (why, "another host"), "%s", why);
    //  No snapshot mapped: a shared-memory PULL_OK cannot be read.
    kd_msg_t *pull_ok = kd_msg_new (KD_MSG_PULL_OK);
    kd_msg_set_uint (pull_ok, KD_F_COUNT, 5000);
    float out [4];
    cr_expect_eq (kd_shmlink_read (link, pull_ok, out, 5000), -2);
    cr_expect (!kd_shmlink_shard_gone (link));
    kd_msg_destroy (&pull_ok);
    kd_msg_destroy (&ok);
    kd_msg_destroy (&err);
    kd_msg_destroy (&offer);
    kd_shmlink_destroy (&link);
    cr_expect_null (link);
}

//  A descriptor that is no region is refused at once, never opened in a
//  way that blocks: a FIFO with no writer would stall the shard's loop.
Test (kd_shm, a_fifo_or_other_file_is_refused_without_blocking)
{
    char *dir = kd_temp_dir ("kd-shm");
    cr_assert (dir);
    char fifo [1100];
    snprintf (fifo, sizeof fifo, "%s/fifo", dir);
    cr_assert_eq (mkfifo (fifo, 0600), 0);
    int fd = open (fifo, O_RDONLY | O_NONBLOCK);
    cr_assert (fd >= 0);
    char why [160];
    //  In a child, so that an attach that blocks (for ever: the FIFO has no
    //  writer) is told from a slow one by a generous ceiling, not by a
    //  second of a busy machine's time.
    pid_t child = fork ();
    cr_assert (child >= 0);
    if (child == 0) {
        kd_shm_t *peer = kd_shm_attach ((uint64_t) getpid (), (uint64_t) fd, 1, 4096, false, why, sizeof why);
        _exit (peer == NULL && strstr (why, "not a region") ? 0 : 1);
    }
    int status = -1;
    pid_t done = 0;
    double t0 = kd_now_msf ();
    while ((done = waitpid (child, &status, WNOHANG)) == 0 && kd_now_msf () - t0 < 60000)
        usleep (10000);
    if (done == 0) {
        kill (child, SIGKILL);
        waitpid (child, NULL, 0);
    }
    cr_expect (done == child, "the attach blocked (60 s)");
    cr_expect (done != child || (WIFEXITED (status) && WEXITSTATUS (status) == 0),
               "the FIFO was not refused as 'not a region'");
    close (fd);
    //  A regular file of the right size, not on shmem, is refused too.
    char file [1100];
    snprintf (file, sizeof file, "%s/file", dir);
    fd = open (file, O_RDWR | O_CREAT, 0600);
    cr_assert (fd >= 0);
    cr_assert_eq (ftruncate (fd, 4096 + 4096), 0);
    cr_expect_null (kd_shm_attach ((uint64_t) getpid (), (uint64_t) fd, 1, 4096, false, why, sizeof why));
    close (fd);
    unlink (file);
    unlink (fifo);
    rmdir (dir);
    free (dir);
}

Test (kd_shm, a_region_its_owner_let_go_of_is_orphaned)
{
    kd_shm_t *owner = kd_shm_new ("test", 4096);
    cr_assert (owner);
    char why [160];
    kd_shm_t *peer = s_attach_self (owner, kd_shm_token (owner), why, sizeof why);
    cr_assert (peer, "%s", why);
    cr_expect (!kd_shm_orphaned (peer));
    cr_expect (!kd_shm_orphaned (owner), "an owner is never orphaned");
    //  The owner closes its descriptor (a closed client, a new link): the
    //  mapping still works, but the peer may let it go.
    kd_shm_destroy (&owner);
    cr_expect (kd_shm_orphaned (peer));
    cr_expect_eq (((uint8_t *) kd_shm_data (peer)) [0], 0);
    kd_shm_destroy (&peer);
}
