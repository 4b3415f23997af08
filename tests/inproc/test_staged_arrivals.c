/*  The short phase path (--phase-path short, protocol 9.3.1), in
    process: a real scheduler, run as an actor of this test, with two fake
    shards and a fake worker that the test drives.

    - An ARRIVE marked `staged` is held until both ranges sent STAGED for
      it, and only then committed and released; STAGED that comes first is
      kept; a range's refusal drops the gradient; an ARRIVE without
      `staged` (an older worker) counts at once.
    - A shard that cannot send STAGED is refused with an error naming the
      setting, and STAGED from a worker is refused.

    The short path's chaos run, on the real binaries, is in
    tests/integration/test_short_path.c.
*/
#include <criterion/criterion.h>
#include "kd_internal.h"
#include "kd_testutil.h"
#include "kd_inproc.h"

#define S_ROWS      60000       //  the training set the fake worker claims
#define S_WAIT_MS   5000        //  for a message that must come
#define S_QUIET_MS  300         //  for one that must not

TestSuite (staged_arrivals, .init = kd_inproc_setup, .fini = kd_inproc_teardown, .timeout = 120);

static kd_msg_t *s_expect_either (zsock_t *sock, kd_msg_type_t type, kd_msg_type_t other, int timeout_ms);

//  The next message of type on sock within timeout_ms, skipping
//  heartbeats and other types; NULL if none came.
static kd_msg_t *
s_expect (zsock_t *sock, kd_msg_type_t type, int timeout_ms)
{
    return s_expect_either (sock, type, type, timeout_ms);
}

//  The next message of either type.
static kd_msg_t *
s_expect_either (zsock_t *sock, kd_msg_type_t type, kd_msg_type_t other, int timeout_ms)
{
    uint64_t deadline = kd_now_ms () + (uint64_t) timeout_ms;
    zpoller_t *poller = zpoller_new (sock, NULL);
    kd_msg_t *found = NULL;
    while (!found && kd_now_ms () < deadline) {
        if (!zpoller_wait (poller, (int) (deadline - kd_now_ms ()) + 1))
            continue;
        kd_msg_t *msg = NULL;
        if (kd_msg_recv (sock, &msg, NULL, NULL) != 0)
            continue;
        if (kd_msg_type (msg) == type || kd_msg_type (msg) == other)
            found = msg;
        else
            kd_msg_destroy (&msg);
    }
    zpoller_destroy (&poller);
    return found;
}

//  A message the scheduler does not take from anyone: its ERROR proves
//  that everything sent before on this connection was handled.
static void
s_probe (zsock_t *sock)
{
    kd_msg_t *probe = kd_msg_new (KD_MSG_PULL);
    kd_msg_set_uint (probe, KD_F_VERSION, 0);
    kd_msg_send (&probe, sock);
    kd_msg_t *err = s_expect (sock, KD_MSG_ERROR, S_WAIT_MS);
    cr_assert (err, "the probe was not answered");
    kd_msg_destroy (&err);
}

//  A HELLO of a fake shard; with staged, it says it can send STAGED.
static void
s_shard_hello (zsock_t *sock, const char *name, bool staged)
{
    kd_msg_t *hello = kd_msg_new (KD_MSG_HELLO);
    kd_msg_set_str (hello, KD_F_ROLE, "shard");
    kd_msg_set_str (hello, KD_F_NAME, name);
    kd_msg_set_str (hello, KD_F_ENDPOINT, "tcp://127.0.0.1:1");
    if (staged)
        kd_msg_set_uint (hello, KD_F_STAGED, 1);
    kd_msg_send (&hello, sock);
}

//  STAGED from a fake shard for the push of registration reg (0: none, as
//  an older shard sends it).  Unless it
//  completes an arrival (whose COMMIT the probe's wait would swallow), a
//  probe follows it.
static void
s_staged (zsock_t *sock, uint64_t rank, uint64_t clock, uint64_t reg, bool refused, bool completes)
{
    kd_msg_t *msg = kd_msg_new (KD_MSG_STAGED);
    kd_msg_set_uint (msg, KD_F_RANK, rank);
    kd_msg_set_uint (msg, KD_F_CLOCK, clock);
    if (reg)
        kd_msg_set_uint (msg, KD_F_REG, reg);
    if (refused)
        kd_msg_set_uint (msg, KD_F_REFUSED, 1);
    kd_msg_send (&msg, sock);
    if (!completes)
        s_probe (sock);
}

//  The fake cluster: two shards, one worker, and what its RELEASE said.
typedef struct {
    zsock_t *shard [2];
    zsock_t *worker;
    uint64_t rank, clock, version, rows;
    uint64_t reg;               //  the fake worker's registration
} s_fake_t;

static void
s_take_release (s_fake_t *f, kd_msg_t *release)
{
    cr_assert (release, "no RELEASE");
    size_t n = 0;
    kd_msg_uints (release, KD_F_ROWS, &n);
    f->clock = kd_msg_uint (release, KD_F_CLOCK);
    f->version = kd_msg_uint (release, KD_F_VERSION);
    f->rows = n;
    kd_msg_destroy (&release);
}

//  ARRIVE from the fake worker, probed unless it completes (the probe's
//  wait would swallow the RELEASE).
static void
s_arrive (s_fake_t *f, bool staged, bool completes)
{
    kd_msg_t *msg = kd_msg_new (KD_MSG_ARRIVE);
    kd_msg_set_uint (msg, KD_F_CLOCK, f->clock);
    kd_msg_set_uint (msg, KD_F_BASE, f->version);
    kd_msg_set_uint (msg, KD_F_SAMPLES, f->rows);
    if (staged)
        kd_msg_set_uint (msg, KD_F_STAGED, 1);
    kd_msg_send (&msg, f->worker);
    if (!completes)
        s_probe (f->worker);
}

//  Both shards get the COMMIT of the worker's clock: applied (dropped
//  false) or dropped.  They answer it.
static void
s_expect_commit (s_fake_t *f, bool dropped)
{
    for (int s = 0; s < 2; s++) {
        kd_msg_t *commit = s_expect (f->shard [s], KD_MSG_COMMIT, S_WAIT_MS);
        cr_assert (commit, "shard %d got no COMMIT for clock %llu", s, (unsigned long long) f->clock);
        size_t n = 0, nd = 0;
        const uint64_t *ranks = kd_msg_uints (commit, KD_F_RANKS, &n);
        const uint64_t *clocks = kd_msg_uints (commit, KD_F_CLOCKS, &n);
        const uint64_t *dclocks = kd_msg_uints (commit, KD_F_DROP_CLOCKS, &nd);
        if (dropped) {
            cr_expect_eq (n, 0, "a refused gradient is not applied");
            cr_expect (nd == 1 && dclocks [0] == f->clock, "the refused gradient is dropped");
        }
        else
            cr_expect (n == 1 && ranks [0] == f->rank && clocks [0] == f->clock,
                       "the COMMIT names the worker's gradient");
        kd_msg_t *ok = kd_msg_new (KD_MSG_COMMIT_OK);
        kd_msg_set_uint (ok, KD_F_VERSION, kd_msg_uint (commit, KD_F_VERSION));
        kd_msg_send (&ok, f->shard [s]);
        kd_msg_destroy (&commit);
    }
}

//  Nothing is committed or released for now.
static void
s_expect_held (s_fake_t *f, const char *why)
{
    kd_msg_t *commit = s_expect (f->shard [0], KD_MSG_COMMIT, S_QUIET_MS);
    kd_msg_t *release = s_expect (f->worker, KD_MSG_RELEASE, 10);
    cr_expect_null (commit, "committed %s", why);
    cr_expect_null (release, "released %s", why);
    kd_msg_destroy (&commit);
    kd_msg_destroy (&release);
}

//  HELLO from the fake worker; its WELCOME's rank and registration.
static void
s_worker_hello (s_fake_t *f)
{
    kd_msg_t *hello = kd_msg_new (KD_MSG_HELLO);
    kd_msg_set_str (hello, KD_F_ROLE, "worker");
    kd_msg_set_str (hello, KD_F_NAME, "fake-worker");
    kd_msg_set_uint (hello, KD_F_SAMPLES, S_ROWS);
    kd_msg_send (&hello, f->worker);
    kd_msg_t *welcome = s_expect (f->worker, KD_MSG_WELCOME, S_WAIT_MS);
    cr_assert (welcome, "the worker's HELLO was not welcomed");
    cr_expect_eq (kd_msg_uint (welcome, KD_F_STAGED), 1, "WELCOME says the short path");
    f->rank = kd_msg_uint (welcome, KD_F_RANK);
    f->reg = kd_msg_uint (welcome, KD_F_REG);
    kd_msg_destroy (&welcome);
}

//  A live worker says HELLO again while its ARRIVE is held (it heard
//  nothing from a busy scheduler for its liveness) and goes on waiting for
//  that RELEASE: the ARRIVE, the STAGED counted so far and its
//  registration stay, nothing is dropped, and the last STAGED releases it.
//  Lost, BSP would wait for the worker's request deadline (a flake round's
//  stall).
static void
s_held_across_hello (s_fake_t *f)
{
    s_arrive (f, true, false);
    s_staged (f->shard [0], f->rank, f->clock, f->reg, false, false);
    uint64_t rank = f->rank, reg = f->reg;
    s_worker_hello (f);
    cr_expect_eq (f->rank, rank, "a live worker keeps its rank");
    cr_expect_eq (f->reg, reg, "a live worker keeps its registration");
    s_probe (f->worker);
    s_expect_held (f, "after the second HELLO, with one range of two staged");
    s_staged (f->shard [1], f->rank, f->clock, f->reg, false, true);
    s_expect_commit (f, false);
    s_take_release (f, s_expect (f->worker, KD_MSG_RELEASE, S_WAIT_MS));
}

Test (staged_arrivals, an_arrival_counts_once_every_range_staged_it)
{
    char bind [64];
    snprintf (bind, sizeof bind, "tcp://127.0.0.1:%d", kd_inproc_port ());
    const char *flags [] = { "--bind", bind, "--shards", "2", "--min-workers", "1",
                             "--consistency", "bsp", "--phase-path", "short", "--epochs", "1000",
                             "--heartbeat-ms", "60000", "--liveness", "100", NULL };
    kd_inproc_run (KD_SVC_SCHEDULER, "scheduler", flags);
    s_fake_t f = { .rank = 0 };
    //  A shard that cannot send STAGED would stall every phase: refused.
    zsock_t *old = kd_test_dealer (bind);
    s_shard_hello (old, "old-shard", false);
    kd_msg_t *err = s_expect (old, KD_MSG_ERROR, S_WAIT_MS);
    cr_assert (err, "a shard without STAGED was not refused");
    cr_expect (strstr (kd_msg_str (err, KD_F_REASON), "phase-path"), "the error names the setting: %s",
               kd_msg_str (err, KD_F_REASON));
    kd_msg_destroy (&err);
    zsock_destroy (&old);
    for (int s = 0; s < 2; s++) {
        char name [16];
        snprintf (name, sizeof name, "shard-%d", s);
        f.shard [s] = kd_test_dealer (bind);
        s_shard_hello (f.shard [s], name, true);
        kd_msg_t *welcome = s_expect (f.shard [s], KD_MSG_WELCOME, S_WAIT_MS);
        cr_assert (welcome, "shard %d was not welcomed", s);
        cr_expect_eq (kd_msg_uint (welcome, KD_F_STAGED), 1, "WELCOME says the short path");
        kd_msg_destroy (&welcome);
    }
    f.worker = kd_test_dealer (bind);
    s_worker_hello (&f);
    cr_expect_neq (f.reg, 0, "a worker's WELCOME on the short path carries its registration");
    s_take_release (&f, s_expect (f.worker, KD_MSG_RELEASE, S_WAIT_MS));
    cr_assert_gt (f.rows, 0, "the RELEASE carries a lease");

    //  ARRIVE first: held until both ranges staged the push.
    s_arrive (&f, true, false);
    s_expect_held (&f, "before any range staged the push");
    s_staged (f.shard [0], f.rank, f.clock, f.reg, false, false);
    s_expect_held (&f, "with one range of two staged");
    //  A STAGED of another clock (a late retry) counts for nothing here,
    //  nor one of an earlier registration of the worker (still on its way
    //  when the worker registered again).
    s_staged (f.shard [1], f.rank, f.clock + 7, f.reg, false, false);
    s_expect_held (&f, "on a STAGED of another clock");
    s_staged (f.shard [1], f.rank, f.clock, f.reg - 1, false, false);
    s_expect_held (&f, "on a STAGED of an earlier registration");
    s_staged (f.shard [1], f.rank, f.clock, f.reg, false, true);
    s_expect_commit (&f, false);
    s_take_release (&f, s_expect (f.worker, KD_MSG_RELEASE, S_WAIT_MS));

    //  STAGED first, from both ranges: the ARRIVE counts at once.
    s_staged (f.shard [0], f.rank, f.clock, f.reg, false, false);
    s_staged (f.shard [1], f.rank, f.clock, f.reg, false, false);
    s_arrive (&f, true, true);
    s_expect_commit (&f, false);
    s_take_release (&f, s_expect (f.worker, KD_MSG_RELEASE, S_WAIT_MS));

    //  One range refused the push: the gradient is dropped everywhere.
    s_arrive (&f, true, false);
    s_staged (f.shard [1], f.rank, f.clock, f.reg, true, false);
    s_expect_held (&f, "with one range of two heard from");
    s_staged (f.shard [0], f.rank, f.clock, f.reg, false, true);
    s_expect_commit (&f, true);
    s_take_release (&f, s_expect (f.worker, KD_MSG_RELEASE, S_WAIT_MS));

    //  An older shard's STAGED, without `reg`, is taken at its word.
    s_arrive (&f, true, false);
    s_staged (f.shard [0], f.rank, f.clock, 0, false, false);
    s_staged (f.shard [1], f.rank, f.clock, 0, false, true);
    s_expect_commit (&f, false);
    s_take_release (&f, s_expect (f.worker, KD_MSG_RELEASE, S_WAIT_MS));

    //  An older worker's ARRIVE, without `staged`, counts at once.
    s_arrive (&f, false, true);
    s_expect_commit (&f, false);
    s_take_release (&f, s_expect (f.worker, KD_MSG_RELEASE, S_WAIT_MS));

    //  A live worker's second HELLO while its ARRIVE is held.
    s_held_across_hello (&f);

    //  The same after a LEAVE while computing, which orphans the clock:
    //  the worker registers again (the orphan is dropped again then) and,
    //  the only one, is readmitted at that clock.  Its second HELLO must
    //  not drop the orphan once more: that would take its new push of the
    //  very clock it computes.
    kd_msg_t *leave = kd_msg_new (KD_MSG_LEAVE);
    kd_msg_send (&leave, f.worker);
    s_expect_commit (&f, true);
    uint64_t reg_before = f.reg;
    s_worker_hello (&f);
    cr_expect_neq (f.reg, reg_before, "a worker that left gets a new registration");
    s_expect_commit (&f, true);
    s_take_release (&f, s_expect (f.worker, KD_MSG_RELEASE, S_WAIT_MS));
    s_held_across_hello (&f);

    //  STAGED is for shards.
    kd_msg_t *staged = kd_msg_new (KD_MSG_STAGED);
    kd_msg_set_uint (staged, KD_F_RANK, f.rank);
    kd_msg_set_uint (staged, KD_F_CLOCK, f.clock);
    kd_msg_send (&staged, f.worker);
    err = s_expect (f.worker, KD_MSG_ERROR, S_WAIT_MS);
    cr_assert (err, "STAGED from a worker was not refused");
    kd_msg_destroy (&err);
    s_expect_held (&f, "on a worker's STAGED");

    for (int s = 0; s < 2; s++)
        zsock_destroy (&f.shard [s]);
    zsock_destroy (&f.worker);
}

//  ARRIVE for clock: on the short path (staged), or as a classic worker
//  whose push a shard refused.
static void
s_send_arrive (zsock_t *sock, uint64_t clock, uint64_t version, size_t rows, bool staged)
{
    kd_msg_t *msg = kd_msg_new (KD_MSG_ARRIVE);
    kd_msg_set_uint (msg, KD_F_CLOCK, clock);
    kd_msg_set_uint (msg, KD_F_BASE, version);
    kd_msg_set_uint (msg, KD_F_SAMPLES, rows);
    kd_msg_set_uint (msg, staged ? KD_F_STAGED : KD_F_REFUSED, 1);
    kd_msg_send (&msg, sock);
}

//  A real shard carries the registration of a push into its STAGED, a
//  refusal's too: a fake worker's push of its own registration is counted
//  and released, and so is its poisoned push that the shard refuses; the
//  same two marked with an earlier registration are not counted.
Test (staged_arrivals, a_real_shard_names_the_registration_that_pushed)
{
    int base = kd_inproc_port ();
    char sched [64], shard [64];
    snprintf (sched, sizeof sched, "tcp://127.0.0.1:%d", base);
    snprintf (shard, sizeof shard, "tcp://127.0.0.1:%d", base + 100);
    const char *a_sched [] = { "--bind", sched, "--shards", "1", "--min-workers", "1", "--model", "softmax",
                               "--consistency", "bsp", "--phase-path", "short", "--epochs", "1000",
                               "--heartbeat-ms", "60000", "--liveness", "100", NULL };
    kd_inproc_run (KD_SVC_SCHEDULER, "scheduler", a_sched);
    const char *a_shard [] = { "--bind", shard, "--scheduler", sched, "--name", "shard-0", NULL };
    kd_inproc_run (KD_SVC_SHARD, "shard-0", a_shard);
    zsock_t *worker = kd_test_dealer (sched), *push = kd_test_dealer (shard);
    kd_msg_t *hello = kd_msg_new (KD_MSG_HELLO);
    kd_msg_set_str (hello, KD_F_ROLE, "worker");
    kd_msg_set_str (hello, KD_F_NAME, "fake-worker");
    kd_msg_set_uint (hello, KD_F_SAMPLES, S_ROWS);
    kd_msg_send (&hello, worker);
    kd_msg_t *welcome = s_expect (worker, KD_MSG_WELCOME, S_WAIT_MS);
    cr_assert (welcome);
    uint64_t rank = kd_msg_uint (welcome, KD_F_RANK), reg = kd_msg_uint (welcome, KD_F_REG);
    size_t n = (size_t) kd_msg_uint (welcome, KD_F_N_PARAMS);
    kd_msg_destroy (&welcome);
    cr_assert (reg != 0 && n > 0);
    float *g = (float *) calloc (n, sizeof (float));
    struct {
        bool poisoned, earlier;
        const char *what;
    } cases [] = {
        { false, false, "a push of our registration" },
        { true, false, "a refused push of our registration" },
        { true, true, "a refused push of an earlier registration" },
        { false, true, "a push of an earlier registration" },
    };
    kd_msg_t *release = s_expect (worker, KD_MSG_RELEASE, S_WAIT_MS);
    for (size_t i = 0; i < 4; i++) {
        cr_assert (release, "no RELEASE before %s", cases [i].what);
        uint64_t clock = kd_msg_uint (release, KD_F_CLOCK), version = kd_msg_uint (release, KD_F_VERSION);
        size_t rows = 0;
        kd_msg_uints (release, KD_F_ROWS, &rows);
        kd_msg_destroy (&release);
        uint64_t as = cases [i].earlier ? reg - 1 : reg;
        g [0] = cases [i].poisoned ? NAN : 0.0f;
        kd_msg_t *answer = NULL;
        //  A shard that has not yet read its WELCOME when the first push
        //  comes (a busy machine) answers ERROR, and a worker sends again:
        //  so does this one, for a push that must be taken.
        for (uint64_t t0 = kd_now_ms (); !answer && kd_now_ms () - t0 < S_WAIT_MS; ) {
            kd_msg_t *msg = kd_msg_new (KD_MSG_PUSH);
            kd_msg_set_uint (msg, KD_F_RANK, rank);
            kd_msg_set_uint (msg, KD_F_CLOCK, clock);
            kd_msg_set_uint (msg, KD_F_BASE, version);
            kd_msg_set_uint (msg, KD_F_LO, 0);
            kd_msg_set_uint (msg, KD_F_SAMPLES, rows);
            kd_msg_set_uint (msg, KD_F_REG, as);
            zframe_t *data = zframe_new (g, n * sizeof (float));
            kd_msg_set_data (msg, &data);
            kd_msg_send (&msg, push);
            if (cases [i].poisoned) {
                answer = s_expect (push, KD_MSG_ERROR, S_WAIT_MS);
                break;
            }
            answer = s_expect_either (push, KD_MSG_PUSH_OK, KD_MSG_ERROR, S_WAIT_MS);
            if (answer && kd_msg_type (answer) == KD_MSG_ERROR) {
                fprintf (stderr, "staged_arrivals: push answered ERROR %llu \"%s\"; sent again\n",
                         (unsigned long long) kd_msg_uint (answer, KD_F_CODE), kd_msg_str (answer, KD_F_REASON));
                kd_msg_destroy (&answer);
                zclock_sleep (100);
            }
        }
        cr_assert (answer, "no answer to %s", cases [i].what);
        if (!cases [i].poisoned)
            cr_expect_eq (kd_msg_uint (answer, KD_F_REG), as, "PUSH_OK names the push's registration");
        kd_msg_destroy (&answer);
        s_send_arrive (worker, clock, version, rows, true);
        release = s_expect (worker, KD_MSG_RELEASE, cases [i].earlier ? 1000 : S_WAIT_MS);
        if (!cases [i].earlier) {
            cr_expect (release, "%s was not counted", cases [i].what);
            continue;
        }
        cr_expect_null (release, "%s was counted", cases [i].what);
        kd_msg_destroy (&release);
        //  Move on as a classic worker whose push was refused would: an
        //  ARRIVE without `staged` counts at once.
        s_send_arrive (worker, clock, version, rows, false);
        release = s_expect (worker, KD_MSG_RELEASE, S_WAIT_MS);
    }
    kd_msg_destroy (&release);
    free (g);
    zsock_destroy (&push);
    zsock_destroy (&worker);
}
