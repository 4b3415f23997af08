/*  kudus bench pushpull: dense float32 values through real shards.

    For each shard count N and value size S, a real kudus-scheduler and N
    real kudus-shard processes start on loopback.  The shards register with
    the scheduler as in training; --bench-floats makes each hold S / N
    bytes whatever the model, because the models Kudus trains are far
    smaller than 64 MiB.  This process then plays a worker: it pushes S
    (split over the shards, PUSH and PUSH_OK), pulls S (PULL and PULL_OK),
    or does both at once, with 1, 4 or 8 requests in flight per shard,
    through the real codec (kd_msg) on its side and the real shard code on
    theirs.  The shm columns (one shard, 16 KiB to 16 MiB; null otherwise) time push+pull
    as a worker on the shard's host does it (kd_shmlink): the values are copied into a region the shard maps, the
    PUSH names them, and the PULL_OK names a snapshot slot the client
    copies from; only small control messages cross TCP.  Pushes name `inflight` (rank, clock) keys in turn, so each
    replaces a staged gradient as a retry would, and no commits are needed.

    The ceilings, measured in the same run with the same topology: N plain
    libzmq ROUTER processes that send every message back, and memcpy of S.
    The echo client sends what push+pull sends, as raw frames with no
    Kudus code: a header-sized frame with the values, and a request-sized
    message, so S goes out and S comes back in as many messages as
    push+pull uses, at the same in-flight depth.  Kudus figures are reported as ratios to
    them.  Each timed run is sized by time (--run-seconds), not by count, so
    the default matrix takes minutes whatever the machine.  Each row also
    gives the peak resident set of the processes behind it: the largest
    shard's, the largest echo server's, and this client's.

    Stopped by SIGINT or SIGTERM, the command says "interrupted", names the
    configurations it completed (their rows are already printed), reaps its
    children and exits 130; a real failure names the configuration and why
    it failed, and exits 1.  GB/s counts payload bytes moved: S for push or pull, 2 S for
    push+pull and for the echo.  The op times (us) are medians over the ops
    of one run, meaningful as round trips at inflight 1.
*/
#include "kd_bench.h"
#include "kd_half.h"
#include "kd_shmlink.h"
#include <errno.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#define S_MAX_SHARDS    16              //  shards in one configuration
#define S_BUDGET_BYTES  (256.0 * 1024 * 1024)  //  memcpy: bytes per timed run
#define S_MIN_OPS       4               //  ops per timed run at least
#define S_MAX_OPS       4000            //  ops per timed run at most
#define S_TIMEOUT_MS    30000           //  a reply later than this fails
#define S_READY_MS      20000           //  shards must register by then
#define S_HEADER_BYTES  64              //  echo: stands for a PUSH header
#define S_REQUEST_BYTES 24              //  echo: stands for a PULL

//  S_SHM is push+pull with the values in shared memory (kd_shmlink).
//  S_STAGED is the staged echo (--staged-echo): raw libzmq that keeps each
//  pushed frame until the same rank pushes again and answers a pull from
//  a fixed buffer, the memory a shard touches without any of its code.
typedef enum { S_PUSH, S_PULL, S_PUSHPULL, S_ECHO, S_SHM, S_STAGED, S_MODES } s_mode_t;
#define S_STAGED_RANKS  64      //  the staged echo's slots (in flight at most)
#define S_STAGED_MAX    ((size_t) 1 << 30)      //  the staged echo's largest buffer

#define S_SHM_SLOTS     16      //  push slots per shard (the shard's bound)
#define S_SHM_MIN_SIZE  16384   //  shm columns: sizes from kd_client's threshold
#define S_SHM_MAX_SIZE  (16u << 20)     //  ... to the target's largest

//  One configuration's cluster and client sockets.
typedef struct {
    kd_bench_t *bench;          //  settings
    size_t shards;              //  N
    size_t floats;              //  per shard: S / 4 / N
    pid_t scheduler;            //  kudus-scheduler
    pid_t shard_pid [S_MAX_SHARDS];     //  kudus-shard processes
    pid_t echo_pid [S_MAX_SHARDS];      //  echo servers
    pid_t staged_pid [S_MAX_SHARDS];    //  staged echo servers, or 0
    zsock_t *kudus [S_MAX_SHARDS];      //  DEALER per shard
    zsock_t *echo [S_MAX_SHARDS];       //  DEALER per echo server
    zsock_t *staged [S_MAX_SHARDS];     //  DEALER per staged echo server, or NULL
    uint64_t lo [S_MAX_SHARDS];         //  first key each shard holds
    float *values;              //  what we push: S bytes
    double *op_us;              //  per op duration, scratch
    uint64_t dtype;             //  values on the wire (kd_dtype_t)
    float *scratch;             //  a pulled slice converted back to fp32
    kd_shmlink_t *shm [S_MAX_SHARDS];   //  shared memory with each shard, or NULL
    size_t shm_slots;           //  push slots in each (the deepest in-flight, at most 16)
    size_t done;                //  ops the last run completed
    char why [160];             //  why the last run failed
} s_cluster_t;

//  Ops a timed run issues at least.
static size_t
s_min_ops (size_t inflight)
{
    //  The window filled, and two more: enough for a steady state, and
    //  the 64 MiB rows stay within the matrix's few minutes.
    return inflight + 2 > S_MIN_OPS ? inflight + 2 : S_MIN_OPS;
}

//  --------------------------------------------------------------------------
//  Requests and replies

//  The socket a mode talks through to shard s.
static zsock_t *
s_sock (s_cluster_t *c, s_mode_t mode, size_t s)
{
    return mode == S_ECHO ? c->echo [s] : mode == S_STAGED ? c->staged [s] : c->kudus [s];
}

//  Send the request(s) of one op to shard s.  Ops name rank op % inflight.
static int
s_send_op (s_cluster_t *c, s_mode_t mode, size_t s, size_t op, size_t inflight)
{
    size_t bytes = c->floats * sizeof (float);
    if (mode == S_ECHO || mode == S_STAGED) {
        //  The frames push+pull sends, as raw bytes: a header-sized frame
        //  and the values (borrowed, as the Kudus client borrows them),
        //  then a request-sized frame alone.  The echo sends both back as
        //  they went; the staged echo keeps the values under the rank the
        //  header's first byte names, as a shard stages a push, and
        //  answers the request with its own fixed buffer.
        //  Filled once: ZeroMQ may still be sending one lent earlier.
        static char heads [S_STAGED_RANKS][S_HEADER_BYTES];
        static bool filled = false;
        if (!filled) {
            for (size_t r = 0; r < S_STAGED_RANKS; r++)
                heads [r][0] = (char) r;
            filled = true;
        }
        static const char request [S_REQUEST_BYTES];
        size_t rank = op % inflight % S_STAGED_RANKS;
        void *sock = zsock_resolve (s_sock (c, mode, s));
        zmq_msg_t msg;
        zmq_msg_init_data (&msg, heads [rank], S_HEADER_BYTES, NULL, NULL);
        int rc = zmq_msg_send (&msg, sock, ZMQ_SNDMORE);
        zmq_msg_init_data (&msg, c->values + s * c->floats, bytes, NULL, NULL);
        rc |= zmq_msg_send (&msg, sock, 0);
        zmq_msg_init_data (&msg, (void *) request, sizeof request, NULL, NULL);
        rc |= zmq_msg_send (&msg, sock, 0);
        return rc < 0 ? -1 : 0;
    }
    if (mode == S_SHM) {
        //  As a worker does: the gradient is copied into the region, the
        //  PUSH names it, and the PULL asks for the snapshot.
        //  A slot per request in flight, as kd_client keeps them.
        size_t slot = op % (inflight < c->shm_slots ? inflight : c->shm_slots);
        memcpy (kd_shmlink_slot (c->shm [s], slot), c->values + s * c->floats, bytes);
        kd_msg_t *push = kd_msg_new (KD_MSG_PUSH);
        kd_msg_set_uint (push, KD_F_RANK, op % inflight);
        kd_msg_set_uint (push, KD_F_CLOCK, 0);
        kd_msg_set_uint (push, KD_F_BASE, 0);
        kd_msg_set_uint (push, KD_F_LO, c->lo [s]);
        kd_msg_set_uint (push, KD_F_COUNT, c->floats);
        kd_msg_set_uint (push, KD_F_SHM, 1);
        kd_msg_set_uint (push, KD_F_OFFSET, kd_shmlink_offset (c->shm [s], slot));
        kd_msg_t *pull = kd_msg_new (KD_MSG_PULL);
        kd_msg_set_uint (pull, KD_F_VERSION, 0);
        kd_msg_set_uint (pull, KD_F_SHM, 1);
        return kd_msg_send (&push, c->kudus [s]) || kd_msg_send (&pull, c->kudus [s]) ? -1 : 0;
    }
    if (mode == S_PUSH || mode == S_PUSHPULL) {
        kd_msg_t *push = kd_msg_new (KD_MSG_PUSH);
        kd_msg_set_uint (push, KD_F_RANK, op % inflight);
        kd_msg_set_uint (push, KD_F_CLOCK, 0);
        kd_msg_set_uint (push, KD_F_BASE, 0);
        kd_msg_set_uint (push, KD_F_LO, c->lo [s]);
        if (c->dtype != KD_DTYPE_F32) {
            //  Converted per push, as a worker would: the cost is timed.
            zframe_t *data = zframe_new (NULL, c->floats * 2);
            if (c->dtype == KD_DTYPE_F16)
                kd_half_from_float ((uint16_t *) zframe_data (data), c->values + s * c->floats, c->floats);
            else
                kd_bf16_from_float ((uint16_t *) zframe_data (data), c->values + s * c->floats, c->floats);
            kd_msg_set_uint (push, KD_F_DTYPE, c->dtype);
            kd_msg_set_data (push, &data);
        }
        else
        //  The values never change during a run, so ZeroMQ may read them
        //  until the reply comes without a copy or a callback.
        kd_msg_set_data_ref (push, c->values + s * c->floats, bytes, NULL, NULL);
        if (kd_msg_send (&push, c->kudus [s]))
            return -1;
    }
    if (mode == S_PULL || mode == S_PUSHPULL) {
        kd_msg_t *pull = kd_msg_new (KD_MSG_PULL);
        kd_msg_set_uint (pull, KD_F_VERSION, 0);
        if (c->dtype != KD_DTYPE_F32)
            kd_msg_set_uint (pull, KD_F_DTYPE, c->dtype);
        if (kd_msg_send (&pull, c->kudus [s]))
            return -1;
    }
    return 0;
}

//  Receive one reply from shard s; returns 0 if it is the one expected.
static int
s_recv_reply (s_cluster_t *c, s_mode_t mode, size_t s)
{
    if (mode == S_ECHO || mode == S_STAGED) {
        //  One whole message: the echo's header-and-values one or the
        //  request; the staged echo's header alone or request and values.
        size_t total = 0;
        int more = 1, rc = 0;
        while (more && rc >= 0) {
            zmq_msg_t msg;
            zmq_msg_init (&msg);
            rc = zmq_msg_recv (&msg, zsock_resolve (s_sock (c, mode, s)), 0);
            total += zmq_msg_size (&msg);
            more = zmq_msg_more (&msg);
            zmq_msg_close (&msg);
        }
        size_t values = c->floats * sizeof (float);
        size_t a = mode == S_STAGED ? S_HEADER_BYTES : S_REQUEST_BYTES;
        size_t b = mode == S_STAGED ? S_REQUEST_BYTES + values : S_HEADER_BYTES + values;
        if (rc >= 0 && total != a && total != b)
            snprintf (c->why, sizeof c->why, "%s %zu answered %zu bytes, not %zu or %zu",
                      mode == S_STAGED ? "staged echo" : "echo", s, total, a, b);
        return rc >= 0 && (total == a || total == b) ? 0 : -1;
    }
    kd_msg_t *reply = NULL;
    kd_msg_err_t err;
    if (kd_msg_recv (c->kudus [s], &reply, NULL, &err) != 0) {
        snprintf (c->why, sizeof c->why, "shard %zu: no reply within %d ms", s, S_TIMEOUT_MS);
        return -1;
    }
    int rc = -1;
    if (kd_msg_type (reply) == KD_MSG_PUSH_OK)
        rc = 0;
    else
    //  Copied out of the snapshot into the worker's buffer: timed.
    if (mode == S_SHM && kd_msg_type (reply) == KD_MSG_PULL_OK && kd_msg_uint (reply, KD_F_SHM)) {
        rc = kd_shmlink_read (c->shm [s], reply, c->scratch, c->floats);
        if (rc)
            snprintf (c->why, sizeof c->why, "shard %zu: shared-memory pull failed (%d)", s, rc);
    }
    else
    //  A 16-bit pull is converted back, as a worker would: timed too.
    if (kd_msg_type (reply) == KD_MSG_PULL_OK && kd_msg_uint (reply, KD_F_COUNT) == c->floats
    &&  (c->dtype == KD_DTYPE_F32 || kd_msg_data_to_floats (reply, c->scratch, c->floats) == 0))
        rc = 0;
    else
        snprintf (c->why, sizeof c->why, "shard %zu answered %s (%s)", s,
                  kd_msg_type_name (kd_msg_type (reply)),
                  kd_msg_type (reply) == KD_MSG_ERROR ? kd_msg_str (reply, KD_F_REASON) : "unexpected");
    kd_msg_destroy (&reply);
    return rc;
}

//  Run ops with `inflight` in flight on every shard: at least the minimum,
//  then more while `seconds` have not passed, at most `ops`.  Shards answer
//  in order, so op i is done once every shard has sent its i-th reply (or
//  pair of replies).  Returns the elapsed seconds, -1 on a failure (why in
//  c->why) or -2 when a signal stopped it; the ops done go to c->done and
//  their times to c->op_us.
static double
s_run (s_cluster_t *c, s_mode_t mode, size_t ops, size_t inflight, double seconds)
{
    c->why [0] = 0;
    c->done = 0;
    size_t replies_per_op = mode == S_PUSHPULL || mode == S_ECHO || mode == S_SHM || mode == S_STAGED ? 2 : 1;
    size_t got [S_MAX_SHARDS] = { 0 };
    zmq_pollitem_t items [S_MAX_SHARDS];
    for (size_t s = 0; s < c->shards; s++)
        items [s] = (zmq_pollitem_t) {
            zsock_resolve (s_sock (c, mode, s)), 0, ZMQ_POLLIN, 0 };
    double *start = (double *) malloc (ops * sizeof (double));
    assert (start);
    size_t sent = 0, done = 0, min_ops = s_min_ops (inflight);
    double t0 = kd_now_msf ();
    while (true) {
        //  Fill the window; nothing in flight after that means we are done.
        while (sent < ops && sent - done < inflight
           &&  (sent < min_ops || kd_now_msf () - t0 < seconds * 1000)) {
            start [sent] = kd_now_msf ();
            for (size_t s = 0; s < c->shards; s++)
                if (s_send_op (c, mode, s, sent, inflight)) {
                    if (zsys_interrupted)
                        goto interrupted;
                    snprintf (c->why, sizeof c->why, "shard %zu: cannot send", s);
                    goto failed;
                }
            sent++;
        }
        if (done == sent)
            break;
        int rc = zmq_poll (items, (int) c->shards, S_TIMEOUT_MS);
        if (zsys_interrupted)
            goto interrupted;
        if (rc == 0)
            snprintf (c->why, sizeof c->why, "no reply within %d ms", S_TIMEOUT_MS);
        if (rc <= 0)
            goto failed;
        for (size_t s = 0; s < c->shards; s++)
            while (zsock_events (s_sock (c, mode, s)) & ZMQ_POLLIN) {
                if (s_recv_reply (c, mode, s)) {
                    if (zsys_interrupted)
                        goto interrupted;
                    goto failed;
                }
                got [s]++;
            }
        size_t all = SIZE_MAX;
        for (size_t s = 0; s < c->shards; s++)
            if (got [s] / replies_per_op < all)
                all = got [s] / replies_per_op;
        double now = kd_now_msf ();
        for (; done < all && done < sent; done++)
            c->op_us [done] = (now - start [done]) * 1000.0;
    }
    free (start);
    c->done = done;
    return (kd_now_msf () - t0) / 1000.0;
failed:
    if (!c->why [0])
        snprintf (c->why, sizeof c->why, "%s", zmq_strerror (zmq_errno ()));
    snprintf (c->why + strlen (c->why), sizeof c->why - strlen (c->why),
              " (mode %s, sent %zu, done %zu)",
              mode == S_PUSH ? "push" : mode == S_PULL ? "pull" : mode == S_PUSHPULL ? "push+pull"
            : mode == S_SHM ? "push+pull (shm)" : mode == S_STAGED ? "staged echo" : "echo",
              sent, done);
    free (start);
    return -1;
interrupted:
    free (start);
    return -2;
}

//  CPU ns the server processes behind a mode have run so far (the shards,
//  the echo servers or the staged ones); -1 for the other modes.
static double
s_servers_cpu_ns (s_cluster_t *c, s_mode_t mode)
{
    if (mode != S_PUSHPULL && mode != S_ECHO && mode != S_STAGED)
        return -1;
    double ns = 0;
    for (size_t s = 0; s < c->shards; s++) {
        double one = kd_bench_cpu_ns (mode == S_ECHO ? c->echo_pid [s]
                                    : mode == S_STAGED ? c->staged_pid [s] : c->shard_pid [s]);
        if (one < 0)
            return -1;
        ns += one;
    }
    return ns;
}

//  --------------------------------------------------------------------------
//  The cluster

//  Stop and reap everything a configuration started.
static void
s_cluster_stop (s_cluster_t *c)
{
    for (size_t s = 0; s < c->shards; s++) {
        zsock_destroy (&c->kudus [s]);
        zsock_destroy (&c->echo [s]);
        zsock_destroy (&c->staged [s]);
        kd_shmlink_destroy (&c->shm [s]);
    }
    for (size_t s = 0; s < c->shards; s++) {
        kd_bench_stop (c->shard_pid [s]);
        kd_bench_stop (c->echo_pid [s]);
        kd_bench_stop (c->staged_pid [s]);
        c->shard_pid [s] = c->echo_pid [s] = c->staged_pid [s] = 0;
    }
    kd_bench_stop (c->scheduler);
    c->scheduler = 0;
}

//  Start the scheduler, the shards and the echo servers, and wait until
//  every shard answers a PULL (it has registered).  Returns 0 or -1.
static int
s_cluster_start (s_cluster_t *c)
{
    kd_bench_t *b = c->bench;
    char sched_bind [64], sched_ep [64], shards [16], floats [32];
    snprintf (sched_bind, sizeof sched_bind, "tcp://127.0.0.1:%d", b->base_port);
    snprintf (sched_ep, sizeof sched_ep, "tcp://127.0.0.1:%d", b->base_port);
    snprintf (shards, sizeof shards, "%zu", c->shards);
    snprintf (floats, sizeof floats, "%zu", c->floats);
    const char *sargv [] = { "kudus-scheduler", "--bind", sched_bind, "--shards", shards,
                             "--min-workers", "1", "--log-level", "error", NULL };
    c->scheduler = kd_bench_spawn (b, sargv);
    for (size_t s = 0; s < c->shards; s++) {
        char bind [64], name [48], echo_bind [64];
        snprintf (bind, sizeof bind, "tcp://127.0.0.1:%d", b->base_port + 1 + (int) s);
        snprintf (name, sizeof name, "bench-shard-%zu", s);
        const char *argv [] = { "kudus-shard", "--bind", bind, "--scheduler", sched_ep,
                                "--bench-floats", floats, "--name", name,
                                "--log-level", "error", NULL };
        c->shard_pid [s] = kd_bench_spawn (b, argv);
        snprintf (echo_bind, sizeof echo_bind, "tcp://127.0.0.1:%d",
                  b->base_port + 1 + S_MAX_SHARDS + (int) s);
        const char *eargv [] = { b->self_exe, "bench", "zmq-echo", echo_bind, NULL };
        c->echo_pid [s] = kd_bench_spawn (b, eargv);
        c->kudus [s] = kd_bench_dealer (b->base_port + 1 + (int) s, S_TIMEOUT_MS);
        c->echo [s] = kd_bench_dealer (b->base_port + 1 + S_MAX_SHARDS + (int) s, S_TIMEOUT_MS);
        if (c->shard_pid [s] < 0 || c->echo_pid [s] < 0 || !c->kudus [s] || !c->echo [s])
            return -1;
        if (kd_config_bool (b->config, "staged-echo")) {
            char staged_bind [64], bytes [32];
            snprintf (staged_bind, sizeof staged_bind, "tcp://127.0.0.1:%d",
                      b->base_port + 1 + 2 * S_MAX_SHARDS + (int) s);
            snprintf (bytes, sizeof bytes, "%zu", c->floats * sizeof (float));
            const char *targv [] = { b->self_exe, "bench", "zmq-staged-echo", staged_bind, bytes, NULL };
            c->staged_pid [s] = kd_bench_spawn (b, targv);
            c->staged [s] = kd_bench_dealer (b->base_port + 1 + 2 * S_MAX_SHARDS + (int) s, S_TIMEOUT_MS);
            if (c->staged_pid [s] < 0 || !c->staged [s])
                return -1;
        }
    }
    if (c->scheduler < 0)
        return -1;
    //  A shard answers 503 until its WELCOME; ask until each says PULL_OK.
    uint64_t deadline = kd_now_ms () + S_READY_MS;
    for (size_t s = 0; s < c->shards; s++) {
        bool ready = false;
        while (!ready && kd_now_ms () < deadline) {
            kd_msg_t *pull = kd_msg_new (KD_MSG_PULL);
            kd_msg_set_uint (pull, KD_F_VERSION, 0);
            kd_msg_send (&pull, c->kudus [s]);
            //  Each probe waits for its answer, which may be a large
            //  PULL_OK, so no late answer is left for a timed run.
            kd_msg_t *reply = NULL;
            //  The scheduler ranks shards in the order they register, so
            //  the range each holds is learnt here.
            if (kd_msg_recv (c->kudus [s], &reply, NULL, NULL) == 0
            &&  kd_msg_type (reply) == KD_MSG_PULL_OK) {
                ready = true;
                c->lo [s] = kd_msg_uint (reply, KD_F_LO);
            }
            kd_msg_destroy (&reply);
            if (!ready)
                zclock_sleep (50);
        }
        if (!ready) {
            kd_error ("shard %zu did not register in %d ms", s, S_READY_MS);
            return -1;
        }
        //  Shared memory with the shard, for the shm columns (one shard).
        if (c->shards > 1)
            continue;
        //  A host or shard that cannot share leaves the columns null.
        c->shm [s] = kd_shmlink_new (c->floats, c->shm_slots);
        if (!c->shm [s]) {
            kd_warn ("shard %zu: this host cannot share memory; shm columns are null", s);
            continue;
        }
        kd_msg_t *offer = kd_shmlink_offer (c->shm [s]);
        kd_msg_send (&offer, c->kudus [s]);
        kd_msg_t *reply = NULL;
        char why [192] = "no answer";
        if (kd_msg_recv (c->kudus [s], &reply, NULL, NULL) != 0
        ||  kd_shmlink_accept (c->shm [s], reply, why, sizeof why)) {
            kd_warn ("shard %zu declined shared memory (%s); shm columns are null", s, why);
            kd_shmlink_destroy (&c->shm [s]);
        }
        kd_msg_destroy (&reply);
    }
    return 0;
}

//  memcpy bandwidth for S bytes, GB/s, median of the repeats.
static double
s_memcpy_gbps (size_t bytes, int repeat)
{
    char *src = (char *) malloc (bytes), *dst = (char *) malloc (bytes);
    assert (src && dst);
    memset (src, 1, bytes);
    memset (dst, 2, bytes);
    size_t rounds = (size_t) (S_BUDGET_BYTES / (double) bytes);
    if (rounds < 4)
        rounds = 4;
    double gbps [KD_BENCH_MAX_LIST * 4];
    int n = repeat < (int) (sizeof gbps / sizeof gbps [0]) ? repeat : (int) (sizeof gbps / sizeof gbps [0]);
    for (int r = 0; r < n; r++) {
        double t0 = kd_now_msf ();
        for (size_t i = 0; i < rounds; i++) {
            memcpy (dst, src, bytes);
            //  Keep the compiler from eliding the copies.
            __asm__ volatile ("" : : "r" (dst) : "memory");
        }
        double s = (kd_now_msf () - t0) / 1000.0;
        gbps [r] = (double) bytes * (double) rounds / s / 1e9;
    }
    free (src);
    free (dst);
    return kd_bench_median (gbps, n);
}

int
kd_bench_pushpull (kd_bench_t *b)
{
    uint64_t sizes [KD_BENCH_MAX_LIST], shard_counts [KD_BENCH_MAX_LIST], inflights [KD_BENCH_MAX_LIST];
    int n_sizes = kd_bench_list (kd_config_str (b->config, "sizes"), sizes, KD_BENCH_MAX_LIST);
    int n_shards = kd_bench_list (kd_config_str (b->config, "shards"), shard_counts, KD_BENCH_MAX_LIST);
    int n_inflight = kd_bench_list (kd_config_str (b->config, "inflight"), inflights, KD_BENCH_MAX_LIST);
    uint64_t dtypes [3];
    int n_dtypes = 0;
    {
        char list [64];
        snprintf (list, sizeof list, "%s", kd_config_str (b->config, "dtypes"));
        char *save = NULL;
        for (char *w = strtok_r (list, ",", &save); w; w = strtok_r (NULL, ",", &save)) {
            int d = kd_dtype_parse (w);
            if (d < 0 || n_dtypes == 3) {
                fprintf (stderr, "kudus bench pushpull: --dtypes lists fp32, fp16, bf16, not '%s'\n", w);
                return 2;
            }
            dtypes [n_dtypes++] = (uint64_t) d;
        }
        if (n_dtypes == 0) {
            fprintf (stderr, "kudus bench pushpull: --dtypes is empty\n");
            return 2;
        }
    }
    if (n_sizes < 1 || n_shards < 1 || n_inflight < 1) {
        fprintf (stderr, "kudus bench pushpull: --sizes, --shards and --inflight are comma-separated positive numbers\n");
        return 2;
    }
    for (int i = 0; i < n_shards; i++)
        if (shard_counts [i] > S_MAX_SHARDS) {
            fprintf (stderr, "kudus bench pushpull: at most %d shards\n", S_MAX_SHARDS);
            return 2;
        }
    for (int i = 0; i < n_inflight; i++)
        if (inflights [i] > 64) {
            fprintf (stderr, "kudus bench pushpull: at most 64 in flight\n");
            return 2;
        }
    //  A dead child must not kill us with SIGPIPE while we report.
    signal (SIGPIPE, SIG_IGN);
    int rc = 0;
    bool header = false;
    double seconds = kd_config_double (b->config, "run-seconds");
    int total = n_sizes * n_shards * n_inflight * n_dtypes, completed = 0;
    char last [96] = "none";
    for (int si = 0; si < n_sizes && rc == 0; si++) {
        double memcpy_gbps = s_memcpy_gbps (sizes [si], b->repeat);
        for (int ni = 0; ni < n_shards && rc == 0; ni++) {
            size_t size = sizes [si], shards = shard_counts [ni];
            if (size % (shards * sizeof (float))) {
                fprintf (stderr, "kudus bench pushpull: size %zu does not split into %zu shards of floats\n",
                         size, shards);
                return 2;
            }
            s_cluster_t c = { .bench = b, .shards = shards, .floats = size / sizeof (float) / shards };
            for (int i = 0; i < n_inflight; i++)
                if (inflights [i] > c.shm_slots)
                    c.shm_slots = inflights [i] < S_SHM_SLOTS ? (size_t) inflights [i] : S_SHM_SLOTS;
            c.values = (float *) malloc (size);
            assert (c.values);
            for (size_t i = 0; i < size / sizeof (float); i++)
                c.values [i] = (float) (i % 1000) * 1e-3f;
            c.op_us = (double *) malloc (S_MAX_OPS * sizeof (double) + 64 * 2 * sizeof (double));
            c.scratch = (float *) malloc (c.floats * sizeof (float) + 4);
            assert (c.op_us && c.scratch);
            if (s_cluster_start (&c)) {
                if (zsys_interrupted)
                    rc = 130;
                else {
                    fprintf (stderr, "kudus bench pushpull: configuration size=%zu shards=%zu failed: "
                             "the shards did not start (see above)\n", size, shards);
                    rc = 1;
                }
            }
            //  Each in-flight depth with each dtype; fp32's push+pull, when
            //  it ran first, is what the others are a ratio to.
            double fp32_pushpull = 0;
            for (int k = 0; k < n_inflight * n_dtypes && rc == 0; k++) {
                size_t inflight = inflights [k / n_dtypes];
                c.dtype = dtypes [k % n_dtypes];
                if (k % n_dtypes == 0)
                    fp32_pushpull = 0;
                double gbps [S_MODES][KD_BENCH_MAX_LIST * 4] = { { 0 } }, us [S_MODES][KD_BENCH_MAX_LIST * 4] = { { 0 } };
                //  CPU the servers and this client ran during each mode's
                //  timed runs, and the ops they did: CPU per op, by side.
                double server_ns [S_MODES] = { 0 }, client_ns [S_MODES] = { 0 }, ops_done [S_MODES] = { 0 };
                bool cpu_known [S_MODES];
                for (int m = 0; m < S_MODES; m++)
                    cpu_known [m] = true;
                //  Shared memory carries fp32 only, and is timed with one
                //  shard (the co-located pair), which keeps the default
                //  matrix within minutes.
                //  Sizes from the client's threshold (16 KiB) to the target's
                //  16 MiB.
                bool shm_on = c.dtype == KD_DTYPE_F32 && c.shm [0] && inflight <= S_SHM_SLOTS
                           && size >= S_SHM_MIN_SIZE && size <= S_SHM_MAX_SIZE;
                bool staged_on = c.staged [0] && c.dtype == KD_DTYPE_F32 && inflight <= S_STAGED_RANKS;
                s_mode_t run [S_MODES];
                int modes = 0;
                for (int m = 0; m < S_MODES; m++)
                    if ((m != S_SHM || shm_on) && (m != S_STAGED || staged_on))
                        run [modes++] = (s_mode_t) m;
                int repeat = b->repeat < KD_BENCH_MAX_LIST * 4 ? b->repeat : KD_BENCH_MAX_LIST * 4;
                //  One untimed round of each mode first: connections, page
                //  faults and allocator warm-up belong to no figure.
                double secs = 0;
                for (int m = 0; m < modes && rc == 0; m++)
                    if ((secs = s_run (&c, run [m], inflight * 2, inflight, 0)) < 0) {
                        rc = secs == -2 ? 130 : 1;
                    }
                //  The modes take turns within each repeat, so that a
                //  change in machine load touches them all alike.
                for (int r = 0; r < repeat && rc == 0; r++)
                    for (int k = 0; k < modes && rc == 0; k++) {
                        s_mode_t m = run [k];
                        size_t op_bytes = (m == S_PUSH || m == S_PULL) ? size : 2 * size;
                        double server0 = s_servers_cpu_ns (&c, m), client0 = kd_bench_cpu_ns (0);
                        secs = s_run (&c, m, S_MAX_OPS, inflight, seconds);
                        if (secs <= 0) {
                            rc = secs == -2 ? 130 : 1;
                            break;
                        }
                        //  This client's first, so that reading the servers'
                        //  clocks is not counted as its work.
                        double client1 = kd_bench_cpu_ns (0), server1 = s_servers_cpu_ns (&c, m);
                        if (server0 >= 0 && server1 >= 0 && client0 >= 0 && client1 >= 0) {
                            server_ns [m] += server1 - server0;
                            client_ns [m] += client1 - client0;
                            ops_done [m] += (double) c.done;
                        }
                        else
                            cpu_known [m] = false;
                        gbps [m][r] = (double) op_bytes * (double) c.done / secs / 1e9;
                        us [m][r] = kd_bench_median (c.op_us, (int) c.done);
                    }
                if (rc == 1)
                    fprintf (stderr, "kudus bench pushpull: configuration size=%zu shards=%zu inflight=%zu "
                             "failed: %s\n", size, shards, inflight, c.why);
                if (rc)
                    break;
                double med [S_MODES], med_us [S_MODES];
                for (int m = 0; m < S_MODES; m++) {
                    med [m] = kd_bench_median (gbps [m], repeat);
                    med_us [m] = kd_bench_median (us [m], repeat);
                }
                //  GB/s with four significant digits: on a loaded machine a
                //  4 KiB push may move less than a thousandth of one.
                char v [16][32];
                snprintf (v [0], 32, "%zu", size);
                snprintf (v [1], 32, "%zu", shards);
                snprintf (v [2], 32, "%zu", inflight);
                snprintf (v [3], 32, "%.4g", med [S_PUSH]);
                snprintf (v [4], 32, "%.4g", med [S_PULL]);
                snprintf (v [5], 32, "%.4g", med [S_PUSHPULL]);
                snprintf (v [6], 32, "%.4g", med [S_ECHO]);
                snprintf (v [7], 32, "%.3f", memcpy_gbps);
                snprintf (v [8], 32, "%.4g", med [S_PUSHPULL] / med [S_ECHO]);
                snprintf (v [9], 32, "%.4g", med [S_PUSHPULL] / memcpy_gbps);
                snprintf (v [10], 32, "%.1f", med_us [S_PUSHPULL]);
                snprintf (v [11], 32, "%.1f", med_us [S_ECHO]);
                snprintf (v [12], 32, "%.3f", med_us [S_PUSHPULL] / med_us [S_ECHO]);
                snprintf (v [13], 32, "%d", repeat);
                if (c.dtype == KD_DTYPE_F32)
                    fp32_pushpull = med [S_PUSHPULL];
                char shm [4][32];
                snprintf (shm [0], 32, "%.4g", med [S_SHM]);
                snprintf (shm [1], 32, "%.4g", med [S_SHM] / med [S_ECHO]);
                snprintf (shm [2], 32, "%.4g", med [S_SHM] / memcpy_gbps);
                snprintf (shm [3], 32, "%.1f", med_us [S_SHM]);
                if (!shm_on)
                    for (int k = 0; k < 4; k++)
                        snprintf (shm [k], 32, "null");
                //  The staged echo, and push+pull as a ratio to it: what is
                //  left of the gap to the echo once the memory is a shard's.
                char staged [3][32];
                snprintf (staged [0], 32, "%.4g", med [S_STAGED]);
                snprintf (staged [1], 32, "%.4g", med [S_STAGED] / med [S_ECHO]);
                snprintf (staged [2], 32, "%.4g", med [S_PUSHPULL] / med [S_STAGED]);
                if (!staged_on)
                    for (int k = 0; k < 3; k++)
                        snprintf (staged [k], 32, "null");
                //  CPU us per op (size bytes out and back over all shards):
                //  the servers' (all threads: I/O and main) and this
                //  client's, for push+pull, the echo and the staged echo.
                char cpu [6][32];
                const s_mode_t cpu_modes [3] = { S_PUSHPULL, S_ECHO, S_STAGED };
                for (int k = 0; k < 3; k++) {
                    s_mode_t m = cpu_modes [k];
                    bool known = cpu_known [m] && ops_done [m] > 0 && (m != S_STAGED || staged_on);
                    snprintf (cpu [k], 32, known ? "%.2f" : "null", server_ns [m] / 1000.0 / ops_done [m]);
                    snprintf (cpu [3 + k], 32, known ? "%.2f" : "null", client_ns [m] / 1000.0 / ops_done [m]);
                }
                char dtype_json [16], vs_fp32 [32];
                snprintf (dtype_json, sizeof dtype_json, "\"%s\"", kd_dtype_name (c.dtype));
                //  GB/s count fp32-equivalent payload, so a ratio above 1 is
                //  a 16-bit wire that moves the model faster.
                snprintf (vs_fp32, sizeof vs_fp32, "%.4g", fp32_pushpull > 0 ? med [S_PUSHPULL] / fp32_pushpull : 0.0);
                //  Peak resident sets, read while the processes live.
                long shard_rss = -1, echo_rss = -1;
                for (size_t s = 0; s < shards; s++) {
                    long k = kd_bench_peak_rss (c.shard_pid [s]), e = kd_bench_peak_rss (c.echo_pid [s]);
                    shard_rss = k > shard_rss ? k : shard_rss;
                    echo_rss = e > echo_rss ? e : echo_rss;
                }
                struct rusage self_usage;
                getrusage (RUSAGE_SELF, &self_usage);
                snprintf (v [14], 32, "%ld", shard_rss);
                snprintf (v [15], 32, "%ld", echo_rss);
                char client_rss [32];
                snprintf (client_rss, sizeof client_rss, "%ld", self_usage.ru_maxrss);
                const char *kv [] = {
                    "size_bytes", v [0], "shards", v [1], "inflight", v [2], "dtype", dtype_json,
                    "ratio_vs_fp32", vs_fp32,
                    "push_gbps", v [3], "pull_gbps", v [4], "pushpull_gbps", v [5],
                    "zmq_echo_gbps", v [6], "memcpy_gbps", v [7],
                    "ratio_vs_zmq", v [8], "ratio_vs_memcpy", v [9],
                    "pushpull_us", v [10], "zmq_echo_us", v [11], "rtt_ratio", v [12],
                    "shm_pushpull_gbps", shm [0], "shm_ratio_vs_zmq", shm [1],
                    "shm_ratio_vs_memcpy", shm [2], "shm_pushpull_us", shm [3],
                    "staged_echo_gbps", staged [0], "staged_ratio_vs_zmq", staged [1],
                    "ratio_vs_staged_echo", staged [2],
                    "shard_cpu_us_op", cpu [0], "echo_cpu_us_op", cpu [1], "staged_cpu_us_op", cpu [2],
                    "client_cpu_us_op", cpu [3], "client_echo_cpu_us_op", cpu [4],
                    "client_staged_cpu_us_op", cpu [5],
                    "repeat", v [13], "shard_rss_kib", v [14], "echo_rss_kib", v [15],
                    "client_rss_kib", client_rss, NULL };
                kd_bench_row (b, "pushpull", &header, kv);
                completed++;
                snprintf (last, sizeof last, "size=%zu shards=%zu inflight=%zu dtype=%s", size, shards,
                          inflight, kd_dtype_name (c.dtype));
            }
            s_cluster_stop (&c);
            free (c.values);
            free (c.op_us);
            free (c.scratch);
        }
    }
    if (rc == 130)
        fprintf (stderr, "kudus bench pushpull: interrupted; %d of %d configurations completed "
                 "(the last: %s), their rows above; every child stopped\n", completed, total, last);
    return rc;
}

//  --------------------------------------------------------------------------
//  The echo server (a helper process; no Kudus code on its path)

int
kd_bench_echo_server (const char *endpoint)
{
    void *ctx = zmq_ctx_new ();
    void *router = kd_bench_raw_router (ctx, endpoint, "zmq-echo");
    if (!router) {
        zmq_ctx_term (ctx);
        return 1;
    }
    //  Every part goes back as it came, flags and all: the received
    //  message is moved, not copied.
    while (!kd_bench_raw_stop) {
        zmq_msg_t part;
        zmq_msg_init (&part);
        if (zmq_msg_recv (&part, router, 0) < 0) {
            zmq_msg_close (&part);
            continue;
        }
        int more = zmq_msg_more (&part);
        zmq_msg_send (&part, router, more ? ZMQ_SNDMORE : 0);
        zmq_msg_close (&part);
    }
    zmq_close (router);
    zmq_ctx_term (ctx);
    return 0;
}

//  The staged echo: the memory a shard touches, with none of its code.
//  A header-and-values message is a push: its values frame is kept under
//  the rank in the header's first byte, and the frame it replaces (that
//  rank's previous push) is freed now, as a shard frees a replaced staged
//  gradient; the header goes back alone.  A lone frame is a pull: it goes
//  back with a fixed buffer of `bytes`, lent to ZeroMQ without a copy, as
//  a shard lends its snapshot.
int
kd_bench_staged_echo_server (const char *endpoint, const char *size)
{
    size_t bytes = kd_bench_bytes_arg (size, S_STAGED_MAX);
    if (!bytes) {
        fprintf (stderr, "kudus bench zmq-staged-echo: BYTES must be a whole number from 1 to %zu, not '%s'\n",
                 S_STAGED_MAX, size);
        return 1;
    }
    char *snapshot = (char *) malloc (bytes);
    if (!snapshot) {
        fprintf (stderr, "kudus bench zmq-staged-echo: cannot allocate %zu bytes\n", bytes);
        return 1;
    }
    memset (snapshot, 1, bytes);
    void *ctx = zmq_ctx_new ();
    void *router = kd_bench_raw_router (ctx, endpoint, "zmq-staged-echo");
    if (!router) {
        zmq_ctx_term (ctx);
        free (snapshot);
        return 1;
    }
    zmq_msg_t staged [S_STAGED_RANKS];
    bool held [S_STAGED_RANKS] = { false };
    while (!kd_bench_raw_stop) {
        //  A whole message: the peer's id and up to two parts more.
        zmq_msg_t part [3], extra;
        int parts = 0, more = 1;
        bool whole = false;
        while (more) {
            //  Parts past the third are read into `extra` and dropped.
            zmq_msg_t *m = parts < 3 ? &part [parts] : &extra;
            zmq_msg_init (m);
            if (zmq_msg_recv (m, router, 0) < 0) {
                zmq_msg_close (m);
                if (parts == 0 || kd_bench_raw_stop)
                    break;
                continue;
            }
            more = zmq_msg_more (m);
            if (parts < 3)
                parts++;
            else
                zmq_msg_close (m);
            whole = !more;
        }
        //  A message cut short by a stop is not answered.
        if (!whole && parts > 0) {
            for (int i = 0; i < parts; i++)
                zmq_msg_close (&part [i]);
            continue;
        }
        if (parts == 3 && zmq_msg_size (&part [1]) > 0) {
            size_t rank = (unsigned char) ((char *) zmq_msg_data (&part [1])) [0] % S_STAGED_RANKS;
            if (held [rank])
                zmq_msg_close (&staged [rank]);
            zmq_msg_init (&staged [rank]);
            zmq_msg_move (&staged [rank], &part [2]);
            held [rank] = true;
            zmq_msg_send (&part [0], router, ZMQ_SNDMORE);
            zmq_msg_send (&part [1], router, 0);
        }
        else
        if (parts == 2) {
            zmq_msg_t values;
            zmq_msg_init_data (&values, snapshot, bytes, NULL, NULL);
            zmq_msg_send (&part [0], router, ZMQ_SNDMORE);
            zmq_msg_send (&part [1], router, ZMQ_SNDMORE);
            zmq_msg_send (&values, router, 0);
            zmq_msg_close (&values);
        }
        //  Anything else is not the bench's: dropped.
        for (int i = 0; i < parts; i++)
            zmq_msg_close (&part [i]);
    }
    for (size_t r = 0; r < S_STAGED_RANKS; r++)
        if (held [r])
            zmq_msg_close (&staged [r]);
    zmq_close (router);
    //  ZeroMQ may still hold the lent buffer until the context is gone:
    //  a signal must not cut the wait short.
    while (zmq_ctx_term (ctx) == -1 && errno == EINTR)
        ;
    free (snapshot);
    return 0;
}
