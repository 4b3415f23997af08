/*  kd_shard: the parameter shard's service loop.

    A shard registers with the scheduler, which answers with its rank and key
    range [lo, hi) and the optimizer settings.  Workers PUSH gradient slices
    that are only staged, keyed by (rank, clock); nothing is applied until the
    scheduler's COMMIT names them with their weights.  That keeps every shard
    making the same decision for a given gradient.  Under ASP and SSP there
    is no such decision to wait for: the shard applies each PUSH as it
    arrives, as ps-lite's and Bosen's servers do, and its version counts
    the gradients it applied.  A PULL that asks for a version the shard does
    not have yet is parked and answered when a commit creates it.

    With --replicas R > 1 the scheduler places each shard in its range's
    chain (CHAIN): the primary takes the workers' writes, and every replica
    forwards what it applied to its successor and answers only when that
    one has it (kd_chain).  A backup applies forwarded writes and state
    transfers (SYNC) only, and serves pulls.

    A keyed (sparse) model's range lives in kd_keyed instead of a dense
    array: pushes and pulls name the keys they touch, and a commit
    combines its gradients key by key.
*/
#include "kd_shard.h"
#include "kd_attach.h"
#include "kd_chain.h"
#include "kd_keyed.h"
#include "kd_checkpoint.h"
#include "kd_guard.h"
#include "kd_half.h"
#include "kd_server.h"
#include "kd_service.h"
#include "kd_stage.h"
#include <cblas.h>
#include <malloc.h>
#include <math.h>
#include <zlib.h>

#define S_MAX_STAGED    KD_STAGE_MAX  //  staged gradients at most (max-staged's bound)
//  The model kind an external model's checkpoint records.
#define S_KIND_EXTERNAL ((kd_model_kind_t) 0xFFFF)
#define S_MAX_LOOKAHEAD 100000  //  versions ahead a pull may wait for
#define S_MAX_RANKS     65536   //  worker ranks we keep a commit mark for
#define S_COPY_CHUNK    4096    //  floats copied and summed at a time (16 KiB: L1)
#define S_REAP_MS       200     //  how often to look for exited attached workers
#define S_BURST         256     //  requests read per poll at most
#define S_SWEEP_MS      1000    //  how often to drop what no commit can name
//  glibc hands out and maps back every block over its mmap threshold (at
//  most 32 MiB), so each large received gradient costs fresh page faults
//  on every byte.  Served from the heap and kept there, freed gradient
//  buffers are reused warm.
#define S_MALLOC_TRIM   (1024L * 1024 * 1024)  //  heap kept before trimming

//  The parameter buffer as lent to PULL_OK frames that ZeroMQ has not sent
//  yet.  refs counts those frames plus one for the shard while params is
//  this buffer; libzmq's I/O thread drops its references, so refs is
//  atomic.  The last reference frees the buffer.
typedef struct {
    void *data;                 //  the buffer
    int refs;                   //  frames in flight, + 1 while it is ours
} s_lent_t;

//  params in a 16-bit dtype, converted once per generation and lent to
//  every PULL_OK that asks for that dtype, like params itself.
typedef struct {
    s_lent_t *lent;             //  the converted values, or NULL
    uint64_t generation;        //  ... of params they were made from
} s_half_t;

typedef struct {
    zframe_t *routing_id;       //  who asked
    uint64_t version;           //  minimum version wanted
    uint64_t dtype;             //  the values it wants (kd_dtype_t)
    zframe_t *keys;             //  a keyed pull's keys, or NULL
    bool shm;                   //  it may be answered through shared memory
    uint64_t parked_at;         //  ms when it was parked (or last renewed)
} s_parked_t;

static void s_parked_destroy (void **item);

typedef struct {
    kd_config_t *config;        //  settings
    zsock_t *router;            //  workers, monitor, tests
    kd_peer_t *peer;            //  link to the scheduler
    char endpoint [256];        //  what we advertise
    bool registered;            //  WELCOME received
    uint64_t rank;              //  our shard rank
    uint64_t lo, hi;            //  key range
    size_t n;                   //  hi - lo
    float *params;              //  values of our range (NULL when keyed)
    kd_keyed_t *keyed;          //  a keyed model's range, or NULL
    bool external;              //  a model whose layout and values come from workers
    kd_tensor_t layout [KD_MODEL_MAX_TENSORS];  //  the model's tensors (checkpoints name them)
    size_t n_layout;            //  tensors in layout
    bool initialized;           //  params hold a model (external: after INIT)
    kd_optimizer_t *opt;        //  the update rule and its state
    char opt_spec [KD_OPTIMIZER_SPEC_MAX];  //  its spec, as WELCOME named it
    float *gsum;                //  a commit's combined gradient
    float *ckpt_state;          //  restored optimizer state, until WELCOME
    kd_checkpoint_meta_t ckpt_meta;  //  what the restored checkpoint said
    float *ckpt_rows;           //  a restored keyed range's rows (keys in
                                //  ckpt_meta.keys), until its WELCOME
    uint64_t version;           //  model version
    uint64_t version_ts;        //  wall ms of the commit that made it
    kd_stage_t *staged;         //  (rank, clock) -> zframe_t gradient
    s_lent_t *lent;             //  params as lent to frames, or NULL
    s_half_t half [2];          //  params as fp16 [0] and bf16 [1], for pulls
    zlistx_t *parked;           //  s_parked_t, pulls waiting for a version
    uint64_t pushes, commits, pulls, errors;  //  counters for the log and STATS
    uint64_t refused, clipped, limited;  //  poisoned gradients and per-peer refusals
    kd_guard_t *guard;          //  connection and malformed-input limits
    size_t max_staged;          //  max-staged
    size_t max_staged_bytes;    //  max-staged-bytes
    size_t max_staged_peer;     //  max-staged-per-peer
    size_t max_parked;          //  max-parked
    double max_norm;            //  max-grad-norm (0: off)
    bool norm_refuse;           //  grad-norm-action refuse (else clip)
    uint64_t bytes_in, bytes_out;   //  gradient and parameter data, for STATS
    uint64_t shm_bytes_in, shm_bytes_out;   //  ... of them through shared memory
    uint64_t ckpt_wall_ms;      //  wall ms of the newest checkpoint (0: none)
    bool stop;                  //  STOP received
    uint64_t samples;           //  samples trained into version
    uint64_t session;           //  scheduler instance of the last WELCOME
    uint64_t lost;              //  updates skipped: version gaps and
                                //  gradients a commit named but we lacked
    kd_model_kind_t kind;       //  model, for checkpoints
    uint32_t hidden;            //  mlp hidden units, for checkpoints
    uint64_t n_params;          //  whole model's parameters
    bool restored;              //  params came from a checkpoint
    const char *ckpt_dir;       //  checkpoint directory, NULL = off
    double ckpt_seconds;        //  checkpoint every this many seconds, or
    uint64_t ckpt_versions;     //  every this many versions
    int ckpt_keep;              //  checkpoints kept
    uint64_t ckpt_version;      //  version of the last checkpoint
    uint64_t ckpt_at_ms;        //  monotonic ms of the last checkpoint
    uint64_t ckpt_written;      //  checkpoints written
    bool direct;                //  ASP/SSP: apply pushes on arrival
    bool short_path;            //  the scheduler waits for our STAGED (9.3.1)
    uint64_t *last_push;        //  direct: by rank, clock + 1 and base of
                                //  the last push applied (2 per rank), so a
                                //  retry is acknowledged, not applied again
    const float **step_grads;   //  s_on_commit scratch: gradients of a step
    double *step_weights;       //  s_on_commit scratch: their weights
    size_t step_cap;            //  entries the scratch holds
    const kd_msg_source_t *src; //  where the request being handled came from
    kd_server_t *server;        //  the request loop
    kd_chain_t *chain;          //  link to our successor in the chain
    bool primary;               //  we take workers' writes (always, unreplicated)
    bool placed;                //  a CHAIN has told us our place
    bool synced;                //  backup: our state is the chain's
    uint64_t chain_gen;         //  generation of the last CHAIN that named
                                //  one: our transfers carry it
    bool sync_failed;           //  a part of the transfer under way was refused
    uint64_t resync_at;         //  ms: send our state to the successor again (0: no)
    kd_attach_t *attach;        //  workers we share memory with
    uint64_t generation;        //  changes whenever params is written
    uint64_t reap_at;           //  ms: look for exited attached workers
    uint64_t sweep_at;          //  ms: drop what no commit can name any more
    uint64_t last_commit_ms;    //  ms of the last commit applied
    uint64_t staged_ttl_ms;     //  staged-ttl: a staged gradient's longest stay
    uint64_t parked_ttl_ms;     //  parked-ttl: a parked pull's longest wait
    uint64_t orphaned;          //  staged gradients dropped: a later clock was named
    uint64_t expired;           //  staged gradients dropped: older than staged-ttl
    uint64_t parked_expired;    //  parked pulls dropped: older than parked-ttl
    kd_history_t *history;      //  --history: what we applied (or NULL)
    uint64_t crc_every;         //  --history-crc-every: versions between CRC points (0 = none)
    uint64_t *hist_u [2];       //  scratch: the ranks and clocks applied
    size_t hist_cap;            //  entries each scratch array holds
    char *hist_buf;             //  scratch: those as JSON text
} self_t;

//  --------------------------------------------------------------------------
//  Staged gradients

//  Staged (rank, clock), or NULL.
static zframe_t *
s_staged_find (self_t *self, uint64_t rank, uint64_t clock)
{
    return kd_stage_find (self->staged, rank, clock);
}

//  Keep large freed blocks in the heap for reuse instead of mapping and
//  unmapping them per message (see S_MALLOC_TRIM); measured in
//  docs/performance.md.
static void
s_tune_allocator (void)
{
    //  One arena: libzmq's I/O thread allocates every received message,
    //  and a 64 MiB block does not fit a thread arena's heap, which glibc
    //  then maps and unmaps per message whatever M_MMAP_MAX says.  Set
    //  before the first socket starts that thread.
    mallopt (M_ARENA_MAX, 1);
    mallopt (M_MMAP_MAX, 0);
    mallopt (M_TRIM_THRESHOLD, (int) S_MALLOC_TRIM);
}


static void s_params_free (self_t *self);

//  Build the optimizer WELCOME names, or keep ours when it names the same
//  rule (registered again).  A checkpoint's state is adopted when it was
//  written by the same rule for a range of our size.  Returns 0, or -1
//  (logged) when the spec is malformed: the WELCOME is then refused.
//  The update rule a WELCOME names, into spec and o.  Returns 0, or -1
//  (logged) when it is malformed.
static int
s_optimizer_spec (kd_msg_t *msg, char *spec, kd_optimizer_opts_t *o)
{
    char err [256];
    if (kd_msg_has (msg, KD_F_OPTIMIZER))
        snprintf (spec, KD_OPTIMIZER_SPEC_MAX, "%s", kd_msg_str (msg, KD_F_OPTIMIZER));
    else
        //  A scheduler that names only lr and momentum means SGD.
        snprintf (spec, KD_OPTIMIZER_SPEC_MAX, "sgd lr=%.17g momentum=%.17g",
                  kd_msg_float (msg, KD_F_LR), kd_msg_float (msg, KD_F_MOMENTUM));
    if (kd_optimizer_parse (spec, o, err, sizeof err)) {
        kd_error ("welcome rejected: %s", err);
        return -1;
    }
    return 0;
}

static int
s_optimizer_adopt (self_t *self, kd_msg_t *msg)
{
    char spec [KD_OPTIMIZER_SPEC_MAX];
    kd_optimizer_opts_t o;
    if (s_optimizer_spec (msg, spec, &o))
        return -1;
    if (self->opt && !strcmp (spec, self->opt_spec))
        return 0;
    kd_optimizer_t *opt = kd_optimizer_new (&o, self->n);
    if (!opt) {
        kd_error ("welcome rejected: optimizer \"%s\" for %zu keys", spec, self->n);
        return -1;
    }
    if (self->opt)
        kd_warn ("optimizer changed from \"%s\" to \"%s\": its state starts again", self->opt_spec, spec);
    kd_optimizer_destroy (&self->opt);
    self->opt = opt;
    snprintf (self->opt_spec, sizeof self->opt_spec, "%s", spec);
    if (self->restored) {
        const kd_checkpoint_meta_t *m = &self->ckpt_meta;
        size_t n_state = kd_optimizer_state_count (opt);
        //  Version 1 checkpoints (opt_kind 0) hold SGD's momentum buffer.
        bool same = m->n_state == n_state && m->hi - m->lo == self->n
                 && (m->opt_kind == (uint32_t) o.kind || (m->opt_kind == 0 && o.kind == KD_OPT_SGD));
        if (same && n_state > 0)
            memcpy (kd_optimizer_state (opt), self->ckpt_state, n_state * self->n * sizeof (float));
        if (same)
            kd_optimizer_set_steps (opt, m->opt_steps);
        else
            kd_warn ("the checkpoint's optimizer state (rule %u, %u buffers) is not %s's: "
                     "it starts again", m->opt_kind, m->n_state, kd_optimizer_kind_name (o.kind));
    }
    free (self->ckpt_state);
    self->ckpt_state = NULL;
    return 0;
}

//  Benchmarks only (--bench-floats n, from kudus bench pushpull): take the
//  rank from a real scheduler's WELCOME but hold n zeros at [rank * n,
//  rank * n + n) whatever the model, so that values of any size go through
//  the real PUSH and PULL paths.  Returns true when it handled the WELCOME.
static void s_welcome_keyed (self_t *self, kd_msg_t *msg, uint64_t lo, uint64_t hi, const kd_tensor_t *tensor);

static bool
s_bench_welcome (self_t *self, kd_msg_t *msg)
{
    uint64_t floats = (uint64_t) kd_config_int (self->config, "bench-floats");
    uint64_t keys = (uint64_t) kd_config_int (self->config, "bench-keys");
    if (keys > 0) {
        //  --bench-keys n (kudus bench sparse): a keyed model of n keys of
        //  one value, under the scheduler's consistency model.
        const char *consistency = kd_msg_str (msg, KD_F_CONSISTENCY);
        self->direct = !strcmp (consistency, "asp") || !strcmp (consistency, "ssp");
        uint64_t rank = kd_msg_uint (msg, KD_F_RANK);
        kd_tensor_t t = { .name = "w", .rows = keys, .cols = 1, .count = keys };
        s_welcome_keyed (self, msg, rank * keys, rank * keys + keys, &t);
        return true;
    }
    if (floats == 0)
        return false;
    self->rank = kd_msg_uint (msg, KD_F_RANK);
    kd_peer_set_rank (self->peer, self->rank);
    if (self->registered && self->lo == self->rank * floats)
        return true;
    kd_stage_purge (self->staged);
    zlistx_purge (self->parked);
    s_params_free (self);
    kd_optimizer_destroy (&self->opt);
    free (self->gsum);
    self->gsum = NULL;
    self->n = (size_t) floats;
    self->lo = self->rank * floats;
    self->hi = self->lo + floats;
    self->params = (float *) calloc (self->n, sizeof (float));
    assert (self->params);
    self->generation++;
    if (s_optimizer_adopt (self, msg))
        return true;
    self->version = 0;
    self->version_ts = kd_wall_ms ();
    self->initialized = true;
    self->registered = true;
    kd_info ("registered for a benchmark rank=%llu lo=%llu floats=%llu",
             (unsigned long long) self->rank, (unsigned long long) self->lo,
             (unsigned long long) floats);
    return true;
}


//  --------------------------------------------------------------------------
//  Parameters lent to ZeroMQ (copy-on-write)

//  Drop one reference to a lent buffer; the last one frees it.  Called by
//  libzmq's I/O thread when a PULL_OK frame has gone, and by the shard.
static void
s_params_release (void *data, void *hint)
{
    s_lent_t *lent = (s_lent_t *) hint;
    assert (lent && lent->data == data);
    (void) data;
    if (__atomic_sub_fetch (&lent->refs, 1, __ATOMIC_ACQ_REL) == 0) {
        free (lent->data);
        free (lent);
    }
}

//  Make self->params the shard's alone before anything writes it.  While
//  frames in flight still read the buffer, it is left to them and params
//  becomes a copy; otherwise (the usual case: workers pull long before the
//  next commit) it is written in place.  Call before every write to
//  self->params.
static float *
s_params_writable (self_t *self)
{
    self->generation++;
    s_lent_t *lent = self->lent;
    if (!lent || __atomic_load_n (&lent->refs, __ATOMIC_ACQUIRE) == 1)
        return self->params;
    float *copy = (float *) malloc (self->n * sizeof (float));
    assert (copy);
    memcpy (copy, self->params, self->n * sizeof (float));
    self->lent = NULL;
    s_params_release (lent->data, lent);
    self->params = copy;
    kd_debug ("params copied on write version=%llu", (unsigned long long) self->version);
    return self->params;
}

//  Free self->params, or leave it to the frames that still read it.  Use
//  instead of free (self->params).
static void
s_params_free (self_t *self)
{
    if (self->lent) {
        s_lent_t *lent = self->lent;
        self->lent = NULL;
        s_params_release (lent->data, lent);
    }
    else
        free (self->params);
    self->params = NULL;
}


//  Answer a request with ERROR and count it.
static void
s_error (self_t *self, zframe_t *routing_id, int code, const char *reason)
{
    char id [64] = "?";
    if (routing_id) {
        char *hex = zframe_strhex (routing_id);
        snprintf (id, sizeof id, "%s", hex);
        free (hex);
    }
    kd_warn ("error peer=%s code=%d reason=\"%s\"", id, code, reason);
    self->errors++;
    kd_msg_t *reply = kd_msg_new_error (routing_id, code, reason);
    kd_msg_send (&reply, self->router);
}

//  Send our range at the current version to one puller, as fp32 (lent,
//  without a copy) or converted to the 16-bit dtype it asked for.
static void
s_send_params (self_t *self, zframe_t *routing_id, uint64_t dtype, bool shm)
{
    kd_msg_t *reply = kd_msg_new (KD_MSG_PULL_OK);
    kd_msg_set_routing_id (reply, routing_id);
    kd_msg_set_uint (reply, KD_F_VERSION, self->version);
    kd_msg_set_uint (reply, KD_F_LO, self->lo);
    kd_msg_set_uint (reply, KD_F_TS_MS, self->version_ts);
    kd_msg_set_uint (reply, KD_F_SAMPLES, self->samples);
    uint64_t offset, seq;
    if (shm && dtype == KD_DTYPE_F32 && kd_attach_has (self->attach, routing_id)
    &&  kd_attach_publish (self->attach, self->params, self->n, self->generation, &offset, &seq) == 0) {
        //  The values are in the snapshot; the reply says where.
        kd_msg_set_uint (reply, KD_F_COUNT, self->n);
        kd_msg_set_uint (reply, KD_F_SHM, 1);
        kd_msg_set_uint (reply, KD_F_OFFSET, offset);
        kd_msg_set_uint (reply, KD_F_SEQ, seq);
        kd_msg_send (&reply, self->router);
        self->pulls++;
        self->bytes_out += self->n * sizeof (float);
        self->shm_bytes_out += self->n * sizeof (float);
        return;
    }
    if (dtype != KD_DTYPE_F32) {
        //  Converted once per change of params and lent to every puller of
        //  that dtype: four workers pulling one version pay one conversion.
        s_half_t *h = &self->half [dtype == KD_DTYPE_F16 ? 0 : 1];
        if (!h->lent || h->generation != self->generation) {
            if (h->lent)
                s_params_release (h->lent->data, h->lent);
            h->lent = (s_lent_t *) zmalloc (sizeof (s_lent_t));
            h->lent->data = malloc (self->n * 2 + 2);
            assert (h->lent->data);
            h->lent->refs = 1;
            if (dtype == KD_DTYPE_F16)
                kd_half_from_float ((uint16_t *) h->lent->data, self->params, self->n);
            else
                kd_bf16_from_float ((uint16_t *) h->lent->data, self->params, self->n);
            h->generation = self->generation;
        }
        __atomic_add_fetch (&h->lent->refs, 1, __ATOMIC_ACQ_REL);
        kd_msg_set_uint (reply, KD_F_DTYPE, dtype);
        kd_msg_set_data_ref (reply, h->lent->data, self->n * 2, s_params_release, h->lent);
        kd_msg_send (&reply, self->router);
        self->pulls++;
        self->bytes_out += self->n * 2;
        return;
    }
    //  No copy: the frame borrows our buffer and holds a reference to it,
    //  and a commit that comes before ZeroMQ has sent it writes a copy
    //  (s_params_writable).
    if (self->lent && self->lent->data != self->params) {
        //  params was replaced while no frame held the old buffer.
        assert (__atomic_load_n (&self->lent->refs, __ATOMIC_ACQUIRE) == 1);
        free (self->lent);
        self->lent = NULL;
    }
    if (!self->lent) {
        self->lent = (s_lent_t *) zmalloc (sizeof (s_lent_t));
        self->lent->data = self->params;
        self->lent->refs = 1;
    }
    __atomic_add_fetch (&self->lent->refs, 1, __ATOMIC_ACQ_REL);
    kd_msg_set_data_ref (reply, self->params, self->n * sizeof (float),
                         s_params_release, self->lent);
    kd_msg_send (&reply, self->router);
    self->pulls++;
    self->bytes_out += self->n * sizeof (float);
}

//  Send the current values of n keys to one puller, as fp32 or converted
//  to the 16-bit dtype it asked for.
static void
s_send_keyed (self_t *self, zframe_t *routing_id, const uint64_t *keys, size_t n, uint64_t dtype)
{
    size_t count = n * kd_keyed_dim (self->keyed);
    kd_msg_t *reply = kd_msg_new (KD_MSG_PULL_OK);
    kd_msg_set_routing_id (reply, routing_id);
    kd_msg_set_uint (reply, KD_F_VERSION, self->version);
    kd_msg_set_uint (reply, KD_F_LO, self->lo);
    kd_msg_set_uint (reply, KD_F_TS_MS, self->version_ts);
    kd_msg_set_uint (reply, KD_F_SAMPLES, self->samples);
    zframe_t *data = zframe_new (NULL, count * sizeof (float));
    float *values = (float *) zframe_data (data);
    kd_keyed_pull (self->keyed, keys, n, values);
    if (dtype != KD_DTYPE_F32) {
        zframe_t *half = zframe_new (NULL, count * 2);
        if (dtype == KD_DTYPE_F16)
            kd_half_from_float ((uint16_t *) zframe_data (half), values, count);
        else
            kd_bf16_from_float ((uint16_t *) zframe_data (half), values, count);
        zframe_destroy (&data);
        data = half;
        kd_msg_set_uint (reply, KD_F_DTYPE, dtype);
    }
    self->bytes_out += zframe_size (data);
    kd_msg_set_data (reply, &data);
    kd_msg_send (&reply, self->router);
    self->pulls++;
}

//  Answer every parked pull the current version satisfies.
static void
s_release_parked (self_t *self)
{
    //  Deleting at the cursor moves it back one node, so the walk goes on
    //  from there; the list is edited in place, not rebuilt per commit.
    if (!self->initialized)
        return;
    s_parked_t *p = (s_parked_t *) zlistx_first (self->parked);
    while (p) {
        if (p->version <= self->version) {
            if (p->keys)
                s_send_keyed (self, p->routing_id, (const uint64_t *) zframe_data (p->keys),
                              zframe_size (p->keys) / sizeof (uint64_t), p->dtype);
            else
                s_send_params (self, p->routing_id, p->dtype, p->shm);
            zlistx_delete (self->parked, zlistx_cursor (self->parked));
        }
        p = (s_parked_t *) zlistx_next (self->parked);
    }
}

//  Write a checkpoint if one is due (or now, with force).  A failed write
//  is logged and retried at the next due time; training goes on.
static void
s_checkpoint (self_t *self, bool force)
{
    if (!self->ckpt_dir || !self->registered || self->version == self->ckpt_version)
        return;
    uint64_t now = kd_now_ms ();
    bool due = force
            || (self->ckpt_versions && self->version - self->ckpt_version >= self->ckpt_versions)
            || (self->ckpt_seconds > 0 && (double) (now - self->ckpt_at_ms) >= self->ckpt_seconds * 1000);
    if (!due)
        return;
    kd_checkpoint_meta_t meta = {
        .version = self->version, .samples = self->samples, .rank = self->rank,
        .lo = self->lo, .hi = self->hi, .n_params = self->n_params,
        .kind = (uint32_t) self->kind, .hidden = self->hidden, .ts_ms = kd_wall_ms (),
        .n_state = self->opt ? (uint32_t) kd_optimizer_state_count (self->opt) : 0,
        .opt_kind = self->opt ? (uint32_t) kd_optimizer_opts (self->opt)->kind : 0,
        .opt_steps = self->opt ? kd_optimizer_steps (self->opt) : 0,
        .n_tensors = (uint32_t) self->n_layout
    };
    memcpy (meta.tensors, self->layout, self->n_layout * sizeof self->layout [0]);
    const float *params = self->params, *state = self->opt ? kd_optimizer_state (self->opt) : NULL;
    if (self->keyed) {
        //  The touched rows only, each with its optimizer state.
        kd_sparse_t *table = kd_keyed_table (self->keyed);
        const kd_optimizer_opts_t *o = kd_keyed_opts (self->keyed);
        meta.kind = (uint32_t) S_KIND_EXTERNAL;
        meta.key_dim = (uint32_t) kd_keyed_dim (self->keyed);
        meta.key_rows = kd_sparse_rows (table);
        meta.keys = (uint64_t *) kd_sparse_keys (table);
        meta.n_state = (uint32_t) kd_optimizer_state_count_of (o);
        meta.opt_kind = (uint32_t) o->kind;
        meta.opt_steps = kd_sparse_steps (table);
        params = kd_sparse_arena (table);
        state = NULL;
    }
    char err [512];
    double t0 = kd_now_msf ();
    if (kd_checkpoint_write (self->ckpt_dir, &meta, params, state, self->ckpt_keep, err, sizeof err)) {
        kd_error ("checkpoint failed version=%llu: %s", (unsigned long long) self->version, err);
        self->ckpt_at_ms = now;
        return;
    }
    self->ckpt_version = self->version;
    self->ckpt_at_ms = now;
    self->ckpt_wall_ms = meta.ts_ms;
    self->ckpt_written++;
    kd_debug ("checkpoint version=%llu ms=%.1f", (unsigned long long) self->version,
              kd_now_msf () - t0);
}

//  Restore the newest valid checkpoint from the directory, if any.  Its
//  rank and range go into our HELLO, so the scheduler gives them back.
static int
s_restore (self_t *self)
{
    //  With the parents; the other shards may be making them at this moment.
    if (kd_dir_create (self->ckpt_dir, 0755)) {
        kd_error ("cannot create checkpoint directory path=%s: %s", self->ckpt_dir, strerror (errno));
        return -1;
    }
    kd_checkpoint_meta_t meta;
    float *params = NULL, *state = NULL;
    char path [4096], err [512];
    double t0 = kd_now_msf ();
    int rc = kd_checkpoint_load_latest (self->ckpt_dir, &meta, &params, &state,
                                        path, sizeof path, err, sizeof err);
    if (rc < 0) {
        kd_error ("cannot read checkpoints: %s", err);
        return -1;
    }
    if (rc > 0) {
        kd_info ("no checkpoint to restore dir=%s", self->ckpt_dir);
        return 0;
    }
    //  The optimizer is built at WELCOME, which names the run's rule; its
    //  state waits here until then.  So do a keyed range's rows, whose
    //  table WELCOME builds.
    if (meta.key_dim > 0)
        self->ckpt_rows = params;
    else
        self->params = params;
    self->generation++;
    self->ckpt_state = state;
    self->ckpt_meta = meta;
    self->ckpt_wall_ms = meta.ts_ms;
    self->version = self->ckpt_version = meta.version;
    self->samples = meta.samples;
    self->rank = meta.rank;
    self->lo = meta.lo;
    self->hi = meta.hi;
    self->n = (size_t) (meta.hi - meta.lo);
    self->n_params = meta.n_params;
    self->kind = (kd_model_kind_t) meta.kind;
    self->hidden = meta.hidden;
    self->version_ts = meta.ts_ms;
    self->restored = meta.key_dim == 0;
    self->external = self->kind == S_KIND_EXTERNAL;
    self->initialized = meta.key_dim == 0;
    self->n_layout = meta.n_tensors;
    memcpy (self->layout, meta.tensors, meta.n_tensors * sizeof meta.tensors [0]);
    kd_peer_set_rank (self->peer, meta.rank);
    kd_peer_set_range (self->peer, meta.lo, meta.hi);
    kd_peer_set_samples (self->peer, meta.samples);
    kd_info ("restored checkpoint path=%s version=%llu rank=%llu lo=%llu hi=%llu ms=%.1f", path,
             (unsigned long long) meta.version, (unsigned long long) meta.rank,
             (unsigned long long) meta.lo, (unsigned long long) meta.hi, kd_now_msf () - t0);
    return 0;
}

//  A restored keyed range's rows, no longer needed.
static void
s_ckpt_rows_free (self_t *self)
{
    free (self->ckpt_rows);
    self->ckpt_rows = NULL;
    free (self->ckpt_meta.keys);
    self->ckpt_meta.keys = NULL;
}

//  Load the restored keyed rows into keyed when the checkpoint is this
//  range's, under the same rule.  Returns true when it did.
static bool
s_restore_keyed (self_t *self, kd_keyed_t *keyed, uint64_t lo, uint64_t hi)
{
    const kd_checkpoint_meta_t *m = &self->ckpt_meta;
    const kd_optimizer_opts_t *o = kd_keyed_opts (keyed);
    if (!self->ckpt_rows)
        return false;
    if (m->lo != lo || m->hi != hi || m->key_dim != kd_keyed_dim (keyed)
    ||  m->opt_kind != (uint32_t) o->kind || m->n_state != kd_optimizer_state_count_of (o)) {
        kd_warn ("keyed checkpoint does not match the cluster's model (lo=%llu hi=%llu dim=%u rule %u, "
                 "cluster lo=%llu hi=%llu dim=%zu rule %u): starting from zero",
                 (unsigned long long) m->lo, (unsigned long long) m->hi, m->key_dim, m->opt_kind,
                 (unsigned long long) lo, (unsigned long long) hi, kd_keyed_dim (keyed), (unsigned) o->kind);
        return false;
    }
    if (kd_sparse_load (kd_keyed_table (keyed), m->keys, self->ckpt_rows, (size_t) m->key_rows,
                        m->opt_steps)) {
        kd_error ("keyed checkpoint: cannot load %llu rows (out of memory, or a repeated key)",
                  (unsigned long long) m->key_rows);
        return false;
    }
    return true;
}

//  WELCOME of a keyed model: its one tensor's rows are our keys, its
//  columns the values per key.  Rows start at zero and take memory only
//  when a gradient touches them, or come from a keyed checkpoint.
static void
s_welcome_keyed (self_t *self, kd_msg_t *msg, uint64_t lo, uint64_t hi, const kd_tensor_t *tensor)
{
    self->rank = kd_msg_uint (msg, KD_F_RANK);
    if (self->registered && self->keyed && lo == self->lo && hi == self->hi
    &&  kd_keyed_dim (self->keyed) == tensor->cols) {
        kd_info ("registered again rank=%llu version=%llu", (unsigned long long) self->rank,
                 (unsigned long long) self->version);
        kd_peer_set_rank (self->peer, self->rank);
        return;
    }
    char spec [KD_OPTIMIZER_SPEC_MAX];
    kd_optimizer_opts_t o;
    if (s_optimizer_spec (msg, spec, &o))
        return;
    kd_keyed_t *keyed = kd_keyed_new (lo, hi, tensor->cols, &o);
    if (!keyed) {
        kd_error ("welcome rejected: keyed range lo=%llu hi=%llu dim=%llu", (unsigned long long) lo,
                  (unsigned long long) hi, (unsigned long long) tensor->cols);
        return;
    }
    bool restored = s_restore_keyed (self, keyed, lo, hi);
    kd_stage_purge (self->staged);
    zlistx_purge (self->parked);
    s_params_free (self);
    kd_optimizer_destroy (&self->opt);
    kd_keyed_destroy (&self->keyed);
    self->keyed = keyed;
    snprintf (self->opt_spec, sizeof self->opt_spec, "%s", spec);
    self->lo = lo;
    self->hi = hi;
    self->n = (size_t) (hi - lo);
    self->n_params = kd_msg_uint (msg, KD_F_N_PARAMS);
    self->n_layout = 1;
    self->layout [0] = *tensor;
    self->external = true;
    self->initialized = true;
    //  A restored range keeps the version, samples and time it was written at.
    if (!restored) {
        self->version = self->ckpt_version = 0;
        self->samples = 0;
        self->version_ts = kd_wall_ms ();
    }
    s_ckpt_rows_free (self);
    self->registered = true;
    kd_peer_set_rank (self->peer, self->rank);
    kd_peer_set_range (self->peer, lo, hi);
    kd_info ("registered %srank=%llu keyed lo=%llu hi=%llu dim=%llu optimizer=\"%s\" version=%llu rows=%zu",
             restored ? "from checkpoint " : "", (unsigned long long) self->rank, (unsigned long long) lo,
             (unsigned long long) hi, (unsigned long long) tensor->cols, spec,
             (unsigned long long) self->version, kd_keyed_rows (keyed));
}

//  WELCOME: take our rank and range, and initialize the parameters (or
//  keep the ones we have: registered before, or restored).
static void
s_on_welcome (self_t *self, kd_msg_t *msg)
{
    if (s_bench_welcome (self, msg))
        return;
    uint64_t lo = kd_msg_uint (msg, KD_F_LO), hi = kd_msg_uint (msg, KD_F_HI);
    bool external = !strcmp (kd_msg_str (msg, KD_F_MODEL), "external");
    bool keyed = external && kd_msg_uint (msg, KD_F_KEYS) == 1;
    int kind = external ? (int) S_KIND_EXTERNAL : kd_model_kind_parse (kd_msg_str (msg, KD_F_MODEL));
    uint64_t n_params = kd_msg_uint (msg, KD_F_N_PARAMS);
    uint64_t hidden = external ? 0 : kd_msg_uint (msg, KD_F_HIDDEN);
    if (kind < 0 || hi <= lo || hi > n_params || hidden > KD_MODEL_MAX_HIDDEN
    ||  (!external && n_params != kd_model_param_count (kind, (uint32_t) hidden))
    ||  (!keyed && hi - lo > KD_CHECKPOINT_MAX_KEYS)) {
        kd_error ("welcome rejected: bad range lo=%llu hi=%llu model=%s",
                  (unsigned long long) lo, (unsigned long long) hi, kd_msg_str (msg, KD_F_MODEL));
        return;
    }
    const char *consistency = kd_msg_str (msg, KD_F_CONSISTENCY);
    self->direct = !strcmp (consistency, "asp") || !strcmp (consistency, "ssp");
    self->short_path = kd_msg_uint (msg, KD_F_STAGED) && !self->direct;
    if (kd_msg_has (msg, KD_F_HEARTBEAT_MS))
        kd_peer_set_heartbeat (self->peer, (int) kd_msg_uint (msg, KD_F_HEARTBEAT_MS));
    //  A new scheduler instance will never commit what the old one saw
    //  staged: forget it, or it would fill the table.
    uint64_t session = kd_msg_uint (msg, KD_F_SESSION);
    if (session != self->session) {
        if (kd_stage_count (self->staged) > 0)
            kd_info ("new scheduler session, dropping staged=%zu", kd_stage_count (self->staged));
        kd_stage_purge (self->staged);
    }
    self->session = session;
    //  The model's tensors: a built-in model's, or the layout WELCOME names.
    kd_tensor_t layout [KD_MODEL_MAX_TENSORS];
    size_t n_layout = 0, layout_params = 0;
    if (external) {
        size_t n = 0, n_shapes = 0;
        const char **names = kd_msg_strs (msg, KD_F_TENSORS, &n);
        const uint64_t *shapes = kd_msg_uints (msg, KD_F_SHAPES, &n_shapes);
        char err [256];
        err [0] = 0;
        if (kd_model_layout_parse (names, n, shapes, n_shapes, layout, &layout_params, err, sizeof err)
        ||  (keyed ? n != 1 || layout [0].rows != n_params : layout_params != n_params)) {
            kd_error ("welcome rejected: external model: %s", err [0] ? err : "size disagrees");
            return;
        }
        n_layout = n;
        if (keyed) {
            s_welcome_keyed (self, msg, lo, hi, &layout [0]);
            return;
        }
    }
    else
        n_layout = kd_model_tensors ((kd_model_kind_t) kind, (uint32_t) hidden, layout, KD_MODEL_MAX_TENSORS);
    //  A checkpoint from before tensors were named (n_layout 0) matches any.
    bool same = lo == self->lo && hi == self->hi && n_params == self->n_params
             && kind == (int) self->kind && hidden == self->hidden
             && (self->n_layout == 0 || kd_model_layout_equal (layout, n_layout, self->layout, self->n_layout));
    self->n_layout = n_layout;
    memcpy (self->layout, layout, n_layout * sizeof layout [0]);
    if ((self->registered || self->restored) && same) {
        self->rank = kd_msg_uint (msg, KD_F_RANK);
        kd_info ("registered %s rank=%llu version=%llu", self->registered ? "again" : "from checkpoint",
                 (unsigned long long) self->rank, (unsigned long long) self->version);
        if (s_optimizer_adopt (self, msg))
            return;
        self->registered = true;
        kd_peer_set_rank (self->peer, self->rank);
        return;
    }
    if (self->restored)
        kd_warn ("checkpoint does not match the cluster's model (lo=%llu hi=%llu, cluster lo=%llu hi=%llu); "
                 "starting from initial values", (unsigned long long) self->lo,
                 (unsigned long long) self->hi, (unsigned long long) lo, (unsigned long long) hi);
    //  A new range makes every staged gradient and parked pull meaningless.
    kd_stage_purge (self->staged);
    zlistx_purge (self->parked);
    self->rank = kd_msg_uint (msg, KD_F_RANK);
    self->lo = lo;
    self->hi = hi;
    self->n = (size_t) (hi - lo);
    self->n_params = n_params;
    self->kind = (kd_model_kind_t) kind;
    self->hidden = (uint32_t) hidden;
    s_params_free (self);
    free (self->ckpt_state);
    self->ckpt_state = NULL;
    s_ckpt_rows_free (self);
    kd_optimizer_destroy (&self->opt);
    free (self->gsum);
    self->gsum = NULL;
    self->params = (float *) calloc (self->n, sizeof (float));
    assert (self->params);
    self->generation++;
    //  A built-in model starts from its seeded values; an external one from
    //  the values a worker sends (INIT), and serves no pull before.
    self->external = external;
    self->initialized = !external;
    if (!external)
        kd_model_init_range (kind, (uint32_t) hidden, kd_msg_uint (msg, KD_F_SEED), lo, hi, self->params);
    self->version = self->ckpt_version = 0;
    self->samples = 0;
    self->restored = false;
    if (s_optimizer_adopt (self, msg))
        return;
    self->version_ts = kd_wall_ms ();
    self->registered = true;
    kd_peer_set_rank (self->peer, self->rank);
    kd_peer_set_range (self->peer, lo, hi);
    kd_info ("registered rank=%llu lo=%llu hi=%llu phase_path=%s optimizer=\"%s\"",
             (unsigned long long) self->rank, (unsigned long long) lo,
             (unsigned long long) hi, self->short_path ? "short" : "classic", self->opt_spec);
}

//  True when a staged frame is a gradient of our range.
static bool
s_staged_ok (self_t *self, zframe_t *g)
{
    if (self->keyed)
        return kd_keyed_staged_ok (self->keyed, g);
    return g && zframe_size (g) == self->n * sizeof (float);
}

//  One optimizer step from n weighted gradients: they are combined into
//  g = sum w_i g_i, and kd_optimizer takes the step.  A lone gradient of
//  weight 1 (ASP, SSP) is used straight from its received frame.
static void
s_apply_step (self_t *self, size_t n, const float *const *grads, const double *weights)
{
    if (n == 0)
        return;
    //  The schedule's clock under unit=samples is what was trained before
    //  this step: the last commit's count, or under ASP and SSP our own.
    if (self->keyed) {
        kd_sparse_set_samples (kd_keyed_table (self->keyed), self->samples);
        //  Keyed: each entry is a staged frame (kd_keyed_stage).
        if (kd_keyed_commit (self->keyed, (const void *const *) grads, weights, n))
            kd_error ("keyed commit failed: out of memory; version %llu's step is lost",
                      (unsigned long long) self->version + 1);
        return;
    }
    s_params_writable (self);
    const float *g = grads [0];
    if (n != 1 || weights [0] != 1.0) {
        if (!self->gsum) {
            self->gsum = (float *) malloc (self->n * sizeof (float));
            assert (self->gsum);
        }
        memset (self->gsum, 0, self->n * sizeof (float));
        for (size_t i = 0; i < n; i++)
            cblas_saxpy ((int) self->n, (float) weights [i], grads [i], 1, self->gsum, 1);
        g = self->gsum;
    }
    kd_optimizer_set_samples (self->opt, self->samples);
    kd_optimizer_step (self->opt, self->params, g);
}

//  The CRC-32 of our parameters, to compare replicas bit for bit.
static unsigned long
s_params_crc (self_t *self)
{
    uLong crc = crc32 (0L, Z_NULL, 0);
    for (size_t done = 0; self->params && done < self->n * sizeof (float); ) {
        size_t chunk = self->n * sizeof (float) - done;
        chunk = chunk > (1u << 30) ? (1u << 30) : chunk;
        crc = crc32 (crc, (const Bytef *) self->params + done, (uInt) chunk);
        done += chunk;
    }
    return (unsigned long) crc;
}

//  The history's line for a step we took: the version it made and the
//  gradients in it (only those we held: a missing one is counted apart).
//  Every crc_every versions it is a CRC point too: every replica makes
//  that version from the same state, so the checker compares them there
//  and not only at the end.
static void
s_history_apply (self_t *self, uint64_t version, const uint64_t *ranks, const uint64_t *clocks,
                 size_t n, size_t missing)
{
    if (!self->history)
        return;
    if (self->crc_every && version % self->crc_every == 0)
        kd_history_line (self->history, "crc", "\"lo\":%llu,\"version\":%llu,\"params_crc\":\"%08lx\"",
                         (unsigned long long) self->lo, (unsigned long long) version, s_params_crc (self));
    size_t size = KD_HISTORY_MAX_LINE / 2, len = 0;
    char *b = self->hist_buf;
    len += (size_t) snprintf (b, size, "\"ranks\":");
    kd_history_uints (b, size, &len, ranks, n);
    if (len < size)
        len += (size_t) snprintf (b + len, size - len, ",\"clocks\":");
    kd_history_uints (b, size, &len, clocks, n);
    kd_history_line (self->history, "apply",
                     "\"lo\":%llu,\"version\":%llu,\"primary\":%s,\"missing\":%zu,%s",
                     (unsigned long long) self->lo, (unsigned long long) version,
                     self->primary ? "true" : "false", missing,
                     len < size - 16 ? b : "\"truncated\":true");
}

//  Room for n entries in the history's scratch arrays.
static void
s_history_reserve (self_t *self, size_t n)
{
    if (n <= self->hist_cap)
        return;
    for (int k = 0; k < 2; k++) {
        self->hist_u [k] = (uint64_t *) realloc (self->hist_u [k], n * sizeof (uint64_t));
        assert (self->hist_u [k]);
    }
    self->hist_cap = n;
}

//  COMMIT: apply the named gradients as one step.  Commits arrive in order
//  on one connection, so a gap or a missing gradient only happens after we
//  lost state (a restart, restored from a checkpoint): we then apply what
//  we have, adopt the scheduler's version and count what was lost, rather
//  than stall the cluster.  A commit for a version we already have is a
//  duplicate and changes nothing.
static void
s_on_commit (self_t *self, kd_msg_t *msg, kd_chain_dest_t dest)
{
    size_t n = 0, nc = 0, nw = 0, nd = 0, ndc = 0;
    const uint64_t *ranks = kd_msg_uints (msg, KD_F_RANKS, &n);
    const uint64_t *clocks = kd_msg_uints (msg, KD_F_CLOCKS, &nc);
    const double *weights = kd_msg_floats (msg, KD_F_WEIGHTS, &nw);
    const uint64_t *dranks = kd_msg_uints (msg, KD_F_DROP_RANKS, &nd);
    const uint64_t *dclocks = kd_msg_uints (msg, KD_F_DROP_CLOCKS, &ndc);
    uint64_t version = kd_msg_uint (msg, KD_F_VERSION);

    if (!self->registered) {
        kd_warn ("commit before registration version=%llu", (unsigned long long) version);
        return;
    }
    bool apply = n > 0 ? version > self->version : false;
    if (n > 0 && version > self->version + 1) {
        kd_warn ("commit gap version=%llu have=%llu: %llu updates lost for this range",
                 (unsigned long long) version, (unsigned long long) self->version,
                 (unsigned long long) (version - 1 - self->version));
        self->lost += version - 1 - self->version;
    }
    if (n == 0 && version > self->version) {
        //  Resync: adopt the version, keep our parameters.
        kd_warn ("resync version=%llu have=%llu: %llu updates lost for this range",
                 (unsigned long long) version, (unsigned long long) self->version,
                 (unsigned long long) (version - self->version));
        self->lost += version - self->version;
        kd_history_line (self->history, "resync", "\"lo\":%llu,\"version\":%llu,\"have\":%llu",
                         (unsigned long long) self->lo, (unsigned long long) version,
                         (unsigned long long) self->version);
        self->version = version;
        self->version_ts = kd_msg_has (msg, KD_F_TS_MS) ? kd_msg_uint (msg, KD_F_TS_MS) : kd_wall_ms ();
    }
    if (apply) {
        size_t missing = 0;
        for (size_t i = 0; i < n; i++) {
            if (!s_staged_ok (self, s_staged_find (self, ranks [i], clocks [i])))
                missing++;
        }
        if (missing > 0) {
            kd_warn ("commit version=%llu names %zu of %zu gradients we do not hold; applying the rest",
                     (unsigned long long) version, missing, n);
            self->lost += missing;
        }
        if (n > self->step_cap) {
            self->step_cap = n;
            self->step_grads = (const float **) realloc (self->step_grads, n * sizeof (float *));
            self->step_weights = (double *) realloc (self->step_weights, n * sizeof (double));
            assert (self->step_grads && self->step_weights);
        }
        size_t found = 0;
        if (self->history)
            s_history_reserve (self, n);
        for (size_t i = 0; i < n; i++) {
            zframe_t *g = s_staged_find (self, ranks [i], clocks [i]);
            if (!s_staged_ok (self, g))
                continue;
            if (self->history) {
                self->hist_u [0][found] = ranks [i];
                self->hist_u [1][found] = clocks [i];
            }
            self->step_grads [found] = (const float *) zframe_data (g);
            self->step_weights [found++] = weights [i];
        }
        s_apply_step (self, found, self->step_grads, self->step_weights);
        s_history_apply (self, version, self->hist_u [0], self->hist_u [1], found, missing);
        self->version = version;
        self->version_ts = kd_msg_has (msg, KD_F_TS_MS) ? kd_msg_uint (msg, KD_F_TS_MS)
                                                         : kd_wall_ms ();
        self->commits++;
    }
    else
    if (n > 0)
        kd_debug ("duplicate commit version=%llu have=%llu", (unsigned long long) version,
                  (unsigned long long) self->version);
    if (kd_msg_has (msg, KD_F_SAMPLES) && version >= self->version)
        self->samples = kd_msg_uint (msg, KD_F_SAMPLES);
    //  Each rank's clocks are named in order: what a commit names, and
    //  every earlier clock of its rank staged before it, is dead (the sweep
    //  drops the latter).
    //  Only a commit applied now marks its ranks' clocks as named: a
    //  duplicate or a resent commit (a chain's promotion resends what the
    //  dead primary did not acknowledge), or a drop-only one, which cannot
    //  be told from a resend, may come after a rejoined worker staged a
    //  lower clock that a later commit will name.
    uint64_t now = kd_now_ms ();
    if (apply)
        self->last_commit_ms = now;
    for (size_t i = 0; i < n && i < nc; i++) {
        kd_stage_remove (self->staged, ranks [i], clocks [i]);
        if (apply)
            kd_stage_named (self->staged, ranks [i], clocks [i], now);
    }
    for (size_t i = 0; i < nd && i < ndc; i++)
        kd_stage_remove (self->staged, dranks [i], dclocks [i]);
    kd_msg_t *ok = kd_msg_new (KD_MSG_COMMIT_OK);
    kd_msg_set_uint (ok, KD_F_VERSION, self->version);
    if (self->lost)
        kd_msg_set_uint (ok, KD_F_LOST, self->lost);
    if (dest == KD_CHAIN_ROUTER)
        kd_msg_set_routing_id (ok, kd_msg_routing_id (msg));
    //  The scheduler hears of the commit once the chain's tail applied it.
    kd_msg_t *fwd = kd_chain_linked (self->chain) ? kd_msg_dup (msg) : NULL;
    if (fwd)
        kd_msg_set_str (fwd, KD_F_ROLE, "shard");
    kd_chain_submit (self->chain, &fwd, &ok, dest);
    kd_debug ("commit version=%llu entries=%zu drops=%zu", (unsigned long long) version, n, nd);
    kd_peer_set_version (self->peer, self->version);
    kd_peer_set_samples (self->peer, self->samples);
    s_checkpoint (self, false);
    s_release_parked (self);
    (void) nc;
}

static void s_on_chain (self_t *self, kd_msg_t *msg);
static void s_on_chain_answer (void *state, zsock_t *sock);

//  A message from the scheduler.
static void
s_on_scheduler (void *state, zsock_t *sock)
{
    self_t *self = (self_t *) state;
    (void) sock;
    kd_msg_t *msg = NULL;
    kd_msg_err_t err;
    int rc = kd_msg_recv (kd_peer_socket (self->peer), &msg, NULL, &err);
    if (rc == -2) {
        kd_warn ("malformed message from scheduler code=%d reason=\"%s\"", err.code, err.reason);
        return;
    }
    if (rc != 0)
        return;
    kd_peer_heard (self->peer);
    switch (kd_msg_type (msg)) {
        case KD_MSG_WELCOME:   s_on_welcome (self, msg); break;
        case KD_MSG_COMMIT:
            if (self->primary)
                s_on_commit (self, msg, KD_CHAIN_SCHEDULER);
            else
                kd_warn ("commit version=%llu from the scheduler at a backup: ignored",
                         (unsigned long long) kd_msg_uint (msg, KD_F_VERSION));
            break;
        case KD_MSG_CHAIN:     s_on_chain (self, msg); break;
        case KD_MSG_HEARTBEAT: break;
        case KD_MSG_STOP:
            kd_info ("stop reason=\"%s\"", kd_msg_str (msg, KD_F_REASON));
            self->stop = true;
            break;
        case KD_MSG_ERROR:
            if (kd_msg_is_not_registered (msg))
                kd_peer_unknown (self->peer);
            kd_warn ("scheduler error code=%llu reason=\"%s\"",
                     (unsigned long long) kd_msg_uint (msg, KD_F_CODE), kd_msg_str (msg, KD_F_REASON));
            break;
        default:
            kd_warn ("unexpected %s from scheduler", kd_msg_type_name (kd_msg_type (msg)));
    }
    kd_msg_destroy (&msg);
}

//  ASP/SSP PUSH: apply the gradient now, as its own step with weight 1, and
//  return the answer: the version it made and the staleness it had here.  A retry
//  (same rank, clock and base as the last push applied for that rank) is
//  acknowledged without applying it again; a worker that rejoined and
//  computes an old clock again does so on a newer base, and is applied.
static kd_msg_t *
s_push_direct (self_t *self, kd_msg_t *msg, uint64_t rank, uint64_t clock, const float *g)
{
    uint64_t base = kd_msg_uint (msg, KD_F_BASE);
    if (!self->last_push) {
        self->last_push = (uint64_t *) calloc (2 * S_MAX_RANKS, sizeof (uint64_t));
        assert (self->last_push);
    }
    uint64_t *last = &self->last_push [2 * rank];
    uint64_t tau = base <= self->version ? self->version - base : 0;
    if (last [0] == clock + 1 && last [1] == base)
        kd_debug ("push retry rank=%llu clock=%llu", (unsigned long long) rank,
                  (unsigned long long) clock);
    else {
        double one = 1.0;
        s_apply_step (self, 1, &g, &one);
        s_history_apply (self, self->version + 1, &rank, &clock, 1, 0);
        self->version++;
        self->version_ts = kd_wall_ms ();
        self->samples += kd_msg_uint (msg, KD_F_SAMPLES);
        self->commits++;
        last [0] = clock + 1;
        last [1] = base;
    }
    self->pushes++;
    kd_msg_t *ok = kd_msg_new (KD_MSG_PUSH_OK);
    kd_msg_set_routing_id (ok, kd_msg_routing_id (msg));
    kd_msg_set_uint (ok, KD_F_CLOCK, clock);
    kd_msg_set_uint (ok, KD_F_VERSION, self->version);
    kd_msg_set_uint (ok, KD_F_STALENESS, tau);
    kd_peer_set_version (self->peer, self->version);
    kd_peer_set_samples (self->peer, self->samples);
    return ok;
}

//  Hash of a routing id: the peer a staged gradient is charged to.
static uint64_t
s_peer_hash (zframe_t *routing_id)
{
    uint64_t h = 1469598103934665603ull;
    const uint8_t *data = routing_id ? zframe_data (routing_id) : NULL;
    size_t n = routing_id ? zframe_size (routing_id) : 0;
    for (size_t i = 0; i < n; i++)
        h = (h ^ data [i]) * 1099511628211ull;
    return h;
}

//  Refuse a poisoned gradient for good: ERROR 406, which a client does not
//  retry, and a log line naming the worker.
static void
s_refuse (self_t *self, zframe_t *id, uint64_t rank, uint64_t clock, uint64_t reg, const char *why)
{
    char reason [160];
    snprintf (reason, sizeof reason, "gradient refused rank=%llu clock=%llu: %s",
              (unsigned long long) rank, (unsigned long long) clock, why);
    self->refused++;
    self->errors++;
    kd_warn ("refused rank=%llu clock=%llu: %s", (unsigned long long) rank,
             (unsigned long long) clock, why);
    //  The clock tells the worker which push this answers, so a late
    //  answer to an old push cannot fail a newer one.
    kd_msg_t *reply = kd_msg_new_error (id, KD_ERR_REFUSED, reason);
    kd_msg_set_uint (reply, KD_F_CLOCK, clock);
    kd_msg_send (&reply, self->router);
    //  On the short path the worker's ARRIVE went before this answer: the
    //  scheduler learns the refusal from us, and the rows go back.
    if (self->short_path) {
        kd_msg_t *staged = kd_msg_new (KD_MSG_STAGED);
        kd_msg_set_uint (staged, KD_F_RANK, rank);
        kd_msg_set_uint (staged, KD_F_CLOCK, clock);
        kd_msg_set_uint (staged, KD_F_REFUSED, 1);
        if (reg)
            kd_msg_set_uint (staged, KD_F_REG, reg);
        kd_peer_send (self->peer, &staged);
    }
}

//  n values of dtype as float32 into dst (copied, or decoded from fp16 or
//  bf16), and their sum of squares, in one pass over memory: each chunk is
//  summed while it is still in the cache the copy filled, so the check that
//  follows needs no second read of the gradient.
static double
s_floats_sumsq (float *dst, const void *src, uint64_t dtype, size_t n)
{
    double sumsq = 0;
    for (size_t at = 0; at < n; at += S_COPY_CHUNK) {
        size_t m = n - at < S_COPY_CHUNK ? n - at : S_COPY_CHUNK;
        if (dtype == KD_DTYPE_F16)
            kd_half_to_float (dst + at, (const uint16_t *) src + at, m);
        else
        if (dtype == KD_DTYPE_BF16)
            kd_bf16_to_float (dst + at, (const uint16_t *) src + at, m);
        else
            memcpy (dst + at, (const float *) src + at, m * sizeof (float));
        sumsq += kd_sumsq (dst + at, m);
    }
    return sumsq;
}

//  Check a gradient slice before it is staged or applied.  Returns false
//  when it was refused (NaN or Inf, or a norm over max-grad-norm under
//  grad-norm-action refuse); a norm over the bound is otherwise scaled
//  down to it, in place.  sumsq is the slice's sum of squares when the
//  caller has it already, NAN otherwise.  reg is the pushing worker's
//  registration (0: none), which a refusal's STAGED names.
static bool
s_guard_gradient (self_t *self, zframe_t *id, uint64_t rank, uint64_t clock, uint64_t reg, float *g,
                  size_t n, double sumsq)
{
    if (isnan (sumsq))
        sumsq = kd_sumsq (g, n);
    if (!isfinite (sumsq)) {
        s_refuse (self, id, rank, clock, reg, "not finite (NaN or Inf)");
        return false;
    }
    double norm = sqrt (sumsq);
    if (self->max_norm > 0 && norm > self->max_norm) {
        if (self->norm_refuse) {
            char why [96];
            snprintf (why, sizeof why, "norm %.6g over max-grad-norm %.6g", norm, self->max_norm);
            s_refuse (self, id, rank, clock, reg, why);
            return false;
        }
        cblas_sscal ((int) n, (float) (self->max_norm / norm), g, 1);
        self->clipped++;
    }
    return true;
}

//  Refuse a request that a per-peer limit stops: ERROR 429, retried later.
static void
s_limit (self_t *self, zframe_t *id, const char *reason)
{
    self->limited++;
    s_error (self, id, KD_ERR_LIMIT, reason);
}

//  True when a write may be applied here: a client's write at the primary,
//  a forwarded one (role "shard") at a synced backup.  Else refused with
//  ERROR (503: the sender retries, or a state transfer follows).
static bool
s_chain_admits (self_t *self, kd_msg_t *msg)
{
    zframe_t *id = kd_msg_routing_id (msg);
    bool forwarded = kd_msg_has (msg, KD_F_ROLE);
    const char *why = NULL;
    if (forwarded && (strcmp (kd_msg_str (msg, KD_F_ROLE), "shard")
                  ||  (*self->src->role && strcmp (self->src->role, "shard")))) {
        char reason [128];
        snprintf (reason, sizeof reason, "forbidden: only a shard forwards %s along a chain",
                  kd_msg_type_name (kd_msg_type (msg)));
        kd_warn ("%s role=%s key=%s", reason, self->src->role, self->src->user);
        s_error (self, id, KD_ERR_FORBIDDEN, reason);
        return false;
    }
    if (!forwarded && !strcmp (self->src->role, "shard")) {
        //  A shard key writes only as a replica: forwards along a chain.
        char reason [128];
        snprintf (reason, sizeof reason, "forbidden: a shard key sends %s only as a chain's forward",
                  kd_msg_type_name (kd_msg_type (msg)));
        kd_warn ("%s key=%s", reason, self->src->user);
        s_error (self, id, KD_ERR_FORBIDDEN, reason);
        return false;
    }
    if (forwarded && self->primary && self->placed)
        why = "this replica is its range's primary, not a backup";
    else
    if (forwarded && !self->synced)
        why = "this replica has not received its state yet";
    else
    if (!forwarded && !self->primary)
        why = "this replica is a backup: writes go to its range's primary";
    if (why) {
        s_error (self, id, KD_ERR_UNAVAILABLE, why);
        return false;
    }
    return true;
}

//  The forward of a write we applied, or NULL when we have no successor.
static kd_msg_t *
s_forward_of (self_t *self, kd_msg_t *msg, zframe_t *data)
{
    if (!kd_chain_linked (self->chain))
        return NULL;
    kd_msg_t *fwd = kd_msg_new (kd_msg_type (msg));
    static const kd_field_t copy [] = { KD_F_RANK, KD_F_CLOCK, KD_F_BASE, KD_F_LO, KD_F_SAMPLES };
    for (size_t i = 0; i < sizeof copy / sizeof copy [0]; i++)
        if (kd_msg_has (msg, copy [i]))
            kd_msg_set_uint (fwd, copy [i], kd_msg_uint (msg, copy [i]));
    //  Always fp32, as applied here: the successor must reach the same bits.
    kd_msg_set_uint (fwd, KD_F_COUNT, zframe_size (data) / sizeof (float));
    zframe_t *copy_data = zframe_dup (data);
    kd_msg_set_data (fwd, &copy_data);
    return fwd;
}

//  Whom a staged gradient counts against: the peer's CURVE key (or without
//  CURVE its address) and the rank it pushes for.  A reconnect keeps both,
//  so it does not reset the count; the rank keeps apart the workers of one
//  host, and under CURVE the workers that share one worker key (kudus
//  keygen issues one per role).  Over inproc (no address) it is the
//  connection.
static uint64_t
s_peer_key (self_t *self, zframe_t *id, uint64_t rank)
{
    const char *who = *self->src->user ? self->src->user : self->src->address;
    if (!*who)
        return s_peer_hash (id);
    uint64_t h = 1469598103934665603ull;
    for (const char *p = who; *p; p++)
        h = (h ^ (uint8_t) *p) * 1099511628211ull;
    return kd_mix64 (h ^ (rank * 0x9e3779b97f4a7c15ull));
}

//  Drop what no commit can name any more: staged gradients of a clock at
//  or below one already named for their rank, or passed over by commits
//  for longer than staged-ttl,
//  and parked pulls waiting longer than parked-ttl (a client that still
//  wants its pull has asked again long before: it retries within its
//  request timeout).  Counted, and logged once per sweep that drops any.
static void
s_sweep (self_t *self)
{
    uint64_t now = kd_now_ms ();
    uint64_t orphaned = 0, expired = 0, parked = 0;
    kd_stage_sweep (self->staged, self->last_commit_ms, self->staged_ttl_ms, &orphaned, &expired);
    if (self->parked_ttl_ms > 0) {
        s_parked_t *p = (s_parked_t *) zlistx_first (self->parked);
        while (p) {
            if (now > p->parked_at && now - p->parked_at > self->parked_ttl_ms) {
                zlistx_delete (self->parked, zlistx_cursor (self->parked));
                parked++;
            }
            p = (s_parked_t *) zlistx_next (self->parked);
        }
    }
    if (orphaned + expired + parked == 0)
        return;
    self->orphaned += orphaned;
    self->expired += expired;
    self->parked_expired += parked;
    kd_warn ("aged out staged=%llu (a later clock of the rank was committed) "
             "staged_expired=%llu (passed over by commits for staged-ttl) parked=%llu (older than parked-ttl)",
             (unsigned long long) orphaned, (unsigned long long) expired, (unsigned long long) parked);
}

//  True when one more staged gradient of bytes from peer keeps within the
//  limits; else refused with 429.
static bool
s_stage_admits (self_t *self, zframe_t *id, uint64_t peer, size_t bytes)
{
    char reason [128];
    if (kd_stage_count (self->staged) >= self->max_staged) {
        snprintf (reason, sizeof reason, "too many staged gradients (max-staged=%zu)", self->max_staged);
        s_limit (self, id, reason);
        return false;
    }
    if (kd_stage_peer_count (self->staged, peer) >= self->max_staged_peer) {
        snprintf (reason, sizeof reason, "too many staged gradients from this peer "
                  "(max-staged-per-peer=%zu)", self->max_staged_peer);
        s_limit (self, id, reason);
        return false;
    }
    if (kd_stage_bytes (self->staged) + bytes > self->max_staged_bytes) {
        snprintf (reason, sizeof reason, "staged gradients hold %zu bytes "
                  "(max-staged-bytes=%zu)", kd_stage_bytes (self->staged), self->max_staged_bytes);
        s_limit (self, id, reason);
        return false;
    }
    return true;
}

//  A keyed request at a dense shard, or a dense one at a keyed shard:
//  answered with ERROR 400.  Returns true when it was.
static bool
s_keyed_mismatch (self_t *self, kd_msg_t *msg)
{
    bool keys = kd_msg_has (msg, KD_F_KEYS);
    if (keys == (self->keyed != NULL))
        return false;
    char reason [128];
    snprintf (reason, sizeof reason, self->keyed ? "this model is keyed: %s must name its keys"
                                                 : "this model is dense: a keyed %s does not apply",
              kd_msg_type_name (kd_msg_type (msg)));
    s_error (self, kd_msg_routing_id (msg), KD_ERR_MALFORMED, reason);
    return true;
}

static kd_msg_t *s_push_direct (self_t *self, kd_msg_t *msg, uint64_t rank, uint64_t clock, const float *g);

//  Apply an accepted push now (ASP, SSP) or stage it for the commit (the
//  rest); either way the frame is consumed.  Returns the PUSH_OK to send.
static kd_msg_t *
s_push_accept (self_t *self, kd_msg_t *msg, zframe_t *id, uint64_t rank, uint64_t clock,
               uint64_t peer, zframe_t **frame_p)
{
    if (self->direct) {
        kd_msg_t *ok = s_push_direct (self, msg, rank, clock, (const float *) zframe_data (*frame_p));
        zframe_destroy (frame_p);
        return ok;
    }
    kd_stage_put (self->staged, rank, clock, peer, frame_p, kd_now_ms ());
    self->pushes++;
    kd_msg_t *ok = kd_msg_new (KD_MSG_PUSH_OK);
    kd_msg_set_routing_id (ok, id);
    kd_msg_set_uint (ok, KD_F_CLOCK, clock);
    return ok;
}

//  Keyed PUSH: check the keys against our range, and stage the gradient
//  as one frame (or, under ASP and SSP, apply it now).
static void
s_on_push_keyed (self_t *self, kd_msg_t *msg)
{
    zframe_t *id = kd_msg_routing_id (msg);
    uint64_t rank = kd_msg_uint (msg, KD_F_RANK), clock = kd_msg_uint (msg, KD_F_CLOCK);
    size_t n = 0, count = (size_t) kd_msg_uint (msg, KD_F_COUNT);
    const uint64_t *keys = kd_msg_keys (msg, &n);
    self->bytes_in += count * kd_dtype_size (kd_msg_uint (msg, KD_F_DTYPE)) + kd_msg_keys_wire_bytes (msg);
    char why [192];
    if (kd_keyed_check (self->keyed, keys, n, count, why, sizeof why)) {
        s_error (self, id, KD_ERR_MALFORMED, why);
        return;
    }
    if (rank >= S_MAX_RANKS) {
        s_error (self, id, KD_ERR_MALFORMED, "rank out of range");
        return;
    }
    uint64_t peer = s_peer_key (self, id, rank);
    bool replaces = s_staged_find (self, rank, clock) != NULL;
    size_t bytes = sizeof (uint64_t) * (1 + n) + count * sizeof (float);
    if (!self->direct && !replaces && !s_stage_admits (self, id, peer, bytes))
        return;
    const float *values = kd_msg_data_floats (msg, NULL);
    float *converted = NULL;
    if (!values && count > 0) {
        converted = (float *) malloc (count * sizeof (float));
        if (!converted || kd_msg_data_to_floats (msg, converted, count)) {
            free (converted);
            s_error (self, id, KD_ERR_INTERNAL, "cannot convert the values");
            return;
        }
        values = converted;
    }
    zframe_t *staged = kd_keyed_stage (self->keyed, keys, n, values);
    free (converted);
    float *g = (float *) (zframe_data (staged) + sizeof (uint64_t) * (1 + n));
    if (!s_guard_gradient (self, id, rank, clock, kd_msg_uint (msg, KD_F_REG), g, count, NAN)) {
        zframe_destroy (&staged);
        return;
    }
    kd_msg_t *ok = s_push_accept (self, msg, id, rank, clock, peer, &staged);
    kd_msg_send (&ok, self->router);
    if (self->direct)
        s_release_parked (self);
}

//  PUSH: stage a gradient slice.  Idempotent per (rank, clock).
static void
s_on_push (void *state, kd_msg_t *msg)
{
    self_t *self = (self_t *) state;
    zframe_t *id = kd_msg_routing_id (msg);
    if (!s_chain_admits (self, msg) || s_keyed_mismatch (self, msg))
        return;
    if (self->keyed) {
        s_on_push_keyed (self, msg);
        return;
    }
    bool forwarded = kd_msg_has (msg, KD_F_ROLE);
    uint64_t rank = kd_msg_uint (msg, KD_F_RANK), clock = kd_msg_uint (msg, KD_F_CLOCK);
    uint64_t dtype = kd_msg_uint (msg, KD_F_DTYPE);
    //  The codec checked that count values of dtype fill the frame.
    size_t count = (size_t) kd_msg_uint (msg, KD_F_COUNT);
    self->bytes_in += count * kd_dtype_size (dtype);
    if (kd_msg_uint (msg, KD_F_LO) != self->lo || count != self->n) {
        char reason [128];
        snprintf (reason, sizeof reason, "push range lo=%llu count=%zu, shard holds lo=%llu count=%zu",
                  (unsigned long long) kd_msg_uint (msg, KD_F_LO), count,
                  (unsigned long long) self->lo, self->n);
        s_error (self, id, KD_ERR_MALFORMED, reason);
        return;
    }
    if (rank >= S_MAX_RANKS) {
        s_error (self, id, KD_ERR_MALFORMED, "rank out of range");
        return;
    }
    //  A push for a staged (rank, clock) replaces it: a retry carries the
    //  same values, and a worker that rejoined under its old rank recomputed
    //  that clock on a newer model.  On the classic path a worker sends
    //  ARRIVE only after every shard acknowledged, so no retry comes after
    //  its commit; on the short path one can (sent before the RELEASE that
    //  ended the wait), and what it stages is dropped by kd_stage_sweep
    //  once the rank's next clock is committed.  The received frame itself
    //  is staged, and a commit hands it to BLAS.
    uint64_t peer = s_peer_key (self, id, rank);
    bool replaces = s_staged_find (self, rank, clock) != NULL;
    //  Limits and guards were the primary's to apply: a backup takes what
    //  its predecessor applied, bit for bit.
    if (!self->direct && !replaces && !forwarded && !s_stage_admits (self, id, peer, count * sizeof (float)))
        return;
    //  The received frame is ours to scale in place; 16-bit values become
    //  a float32 frame first (the shard keeps fp32 master weights).
    zframe_t *data;
    double sumsq = NAN;
    if (kd_msg_uint (msg, KD_F_SHM)) {
        //  Copied once out of the worker's region: the checks below and
        //  the commit then read values the worker can no longer change.
        char why [160];
        const float *values = dtype == KD_DTYPE_F32
            ? kd_attach_values (self->attach, id, kd_msg_uint (msg, KD_F_OFFSET), count, why, sizeof why)
            : NULL;
        if (!values) {
            if (dtype != KD_DTYPE_F32)
                snprintf (why, sizeof why, "shm: a push in shared memory is fp32");
            kd_msg_t *reply = kd_msg_new_error (id, KD_ERR_STATE, why);
            kd_msg_set_uint (reply, KD_F_SHM, 1);
            kd_warn ("error code=%d reason=\"%s\"", KD_ERR_STATE, why);
            self->errors++;
            kd_msg_send (&reply, self->router);
            return;
        }
        data = zframe_new (NULL, count * sizeof (float));
        sumsq = s_floats_sumsq ((float *) zframe_data (data), values, KD_DTYPE_F32, count);
        self->shm_bytes_in += count * sizeof (float);
    }
    else
    if (dtype == KD_DTYPE_F32)
        data = kd_msg_take_data (msg);
    else {
        //  The codec checked that the frame holds count 16-bit values.
        data = zframe_new (NULL, count * sizeof (float));
        sumsq = s_floats_sumsq ((float *) zframe_data (data), zframe_data (kd_msg_data (msg)), dtype, count);
    }
    if (!forwarded && !s_guard_gradient (self, id, rank, clock, kd_msg_uint (msg, KD_F_REG),
                                         (float *) zframe_data (data), count, sumsq)) {
        zframe_destroy (&data);
        return;
    }
    kd_msg_t *fwd = s_forward_of (self, msg, data);
    kd_msg_t *ok = s_push_accept (self, msg, id, rank, clock, peer, &data);
    //  The short path: a worker's own push (not a replica's forward) is
    //  also announced to the scheduler, when the chain has it.
    bool announce = self->short_path && !forwarded;
    if (announce)
        kd_msg_set_uint (ok, KD_F_RANK, rank);
    if (announce && kd_msg_has (msg, KD_F_REG))
        kd_msg_set_uint (ok, KD_F_REG, kd_msg_uint (msg, KD_F_REG));
    kd_chain_submit (self->chain, &fwd, &ok, announce ? KD_CHAIN_ROUTER_STAGED : KD_CHAIN_ROUTER);
    if (self->direct) {
        s_checkpoint (self, false);
        s_release_parked (self);
    }
}

//  PULL: answer now, or park until the version exists.
static void
s_on_pull (void *state, kd_msg_t *msg)
{
    self_t *self = (self_t *) state;
    uint64_t want = kd_msg_uint (msg, KD_F_VERSION);
    //  A version far beyond ours can only be a confused or hostile peer;
    //  parking it would hold a slot for ever.
    if (want > self->version + S_MAX_LOOKAHEAD) {
        s_error (self, kd_msg_routing_id (msg), KD_ERR_STATE, "pull asks for a version too far ahead");
        return;
    }
    uint64_t dtype = kd_msg_uint (msg, KD_F_DTYPE);
    if (kd_dtype_size (dtype) == 0) {
        s_error (self, kd_msg_routing_id (msg), KD_ERR_MALFORMED, "pull asks for an unknown dtype");
        return;
    }
    if (s_keyed_mismatch (self, msg))
        return;
    size_t n_keys = 0;
    const uint64_t *keys = kd_msg_keys (msg, &n_keys);
    if (self->keyed) {
        char why [192];
        if (kd_keyed_check (self->keyed, keys, n_keys, SIZE_MAX, why, sizeof why)) {
            s_error (self, kd_msg_routing_id (msg), KD_ERR_MALFORMED, why);
            return;
        }
        //  A keyed pull's keys are on the wire too.
        self->bytes_in += kd_msg_keys_wire_bytes (msg);
        if (want <= self->version) {
            s_send_keyed (self, kd_msg_routing_id (msg), keys, n_keys, dtype);
            return;
        }
    }
    //  An external model is served once a worker sent its initial values:
    //  until then every pull is parked.
    bool shm = kd_msg_uint (msg, KD_F_SHM) != 0;
    if (want <= self->version && self->initialized) {
        s_send_params (self, kd_msg_routing_id (msg), dtype, shm);
        return;
    }
    //  One parked pull per peer: a retry replaces the one before, so a
    //  peer can never hold more than one slot.
    for (s_parked_t *q = (s_parked_t *) zlistx_first (self->parked); q;
         q = (s_parked_t *) zlistx_next (self->parked))
        if (zframe_eq (q->routing_id, kd_msg_routing_id (msg))) {
            q->version = want;
            q->dtype = dtype;
            q->shm = shm;
            q->parked_at = kd_now_ms ();
            zframe_destroy (&q->keys);
            q->keys = self->keyed ? zframe_new (keys, n_keys * sizeof (uint64_t)) : NULL;
            return;
        }
    if (zlistx_size (self->parked) >= self->max_parked) {
        char reason [96];
        snprintf (reason, sizeof reason, "too many parked pulls (max-parked=%zu)", self->max_parked);
        s_limit (self, kd_msg_routing_id (msg), reason);
        return;
    }
    s_parked_t *p = (s_parked_t *) zmalloc (sizeof *p);
    p->routing_id = zframe_dup (kd_msg_routing_id (msg));
    p->version = want;
    p->dtype = dtype;
    p->shm = shm;
    p->parked_at = kd_now_ms ();
    p->keys = self->keyed ? zframe_new (keys, n_keys * sizeof (uint64_t)) : NULL;
    zlistx_add_end (self->parked, p);
}

//  INIT: an external model's initial values for our range, from a worker.
//  The first one wins; later ones (every worker may send one) and ones
//  after a restore change nothing but are answered alike.
static void
s_on_init (void *state, kd_msg_t *msg)
{
    self_t *self = (self_t *) state;
    if (!s_chain_admits (self, msg))
        return;
    if (self->keyed) {
        s_error (self, kd_msg_routing_id (msg), KD_ERR_STATE,
                 "a keyed model starts from zeros: INIT does not apply");
        return;
    }
    size_t count = 0;
    const float *values = kd_msg_data_floats (msg, &count);
    if (kd_msg_uint (msg, KD_F_LO) != self->lo || count != self->n) {
        s_error (self, kd_msg_routing_id (msg), KD_ERR_MALFORMED,
                 "INIT must carry exactly this shard's key range");
        return;
    }
    if (!self->initialized) {
        for (size_t i = 0; i < count; i++)
            if (!isfinite (values [i])) {
                s_error (self, kd_msg_routing_id (msg), KD_ERR_MALFORMED,
                         "INIT values must be finite");
                return;
            }
        s_params_writable (self);
        memcpy (self->params, values, count * sizeof (float));
        self->initialized = true;
        kd_info ("initialized by a worker lo=%llu keys=%zu", (unsigned long long) self->lo, count);
        s_release_parked (self);
    }
    kd_msg_t *ok = kd_msg_new (KD_MSG_INIT_OK);
    kd_msg_set_routing_id (ok, kd_msg_routing_id (msg));
    kd_msg_set_uint (ok, KD_F_VERSION, self->version);
    //  The values we hold go down the chain, whichever INIT won.
    kd_msg_t *fwd = NULL;
    if (kd_chain_linked (self->chain)) {
        zframe_t *mine = zframe_new (self->params, self->n * sizeof (float));
        fwd = s_forward_of (self, msg, mine);
        zframe_destroy (&mine);
    }
    kd_chain_submit (self->chain, &fwd, &ok, KD_CHAIN_ROUTER);
}

//  --------------------------------------------------------------------------
//  Replication: state transfer and the chain's configuration

//  One SYNC part with an optional copy of n floats.
static kd_msg_t *
s_sync_part (const char *kind, const float *values, size_t n)
{
    kd_msg_t *part = kd_msg_new (KD_MSG_SYNC);
    kd_msg_set_str (part, KD_F_KIND, kind);
    if (values) {
        zframe_t *data = zframe_new (values, n * sizeof (float));
        kd_msg_set_uint (part, KD_F_COUNT, n);
        kd_msg_set_data (part, &data);
    }
    return part;
}

//  Send our whole state to the successor: parameters, optimizer state,
//  staged gradients (BSP, LSP, ALSP) or the last push applied per rank
//  (ASP, SSP), then SYNC end.  The successor replaces its state with it.
static void
s_sync_successor (self_t *self)
{
    self->resync_at = 0;
    if (!kd_chain_linked (self->chain) || !self->registered)
        return;
    double t0 = kd_now_msf ();
    if (self->initialized) {
        kd_msg_t *part = s_sync_part ("params", self->params, self->n);
        kd_msg_set_uint (part, KD_F_VERSION, self->version);
        kd_msg_set_uint (part, KD_F_SAMPLES, self->samples);
        kd_msg_set_uint (part, KD_F_TS_MS, self->version_ts);
        kd_msg_set_uint (part, KD_F_LO, self->lo);
        kd_msg_set_uint (part, KD_F_SESSION, self->session);
        kd_msg_set_uint (part, KD_F_CLOCK, self->opt ? kd_optimizer_steps (self->opt) : 0);
        kd_chain_send_part (self->chain, &part);
        size_t n_state = self->opt ? kd_optimizer_state_count (self->opt) : 0;
        for (size_t i = 0; i < n_state; i++) {
            part = s_sync_part ("state", kd_optimizer_state (self->opt) + i * self->n, self->n);
            kd_msg_set_uint (part, KD_F_RANK, i);
            kd_chain_send_part (self->chain, &part);
        }
    }
    size_t staged = 0;
    kd_stage_item_t item;
    for (bool more = kd_stage_first (self->staged, &item); more;
         more = kd_stage_next (self->staged, &item)) {
        kd_msg_t *part = s_sync_part ("staged", (const float *) zframe_data (item.frame),
                                      zframe_size (item.frame) / sizeof (float));
        kd_msg_set_uint (part, KD_F_RANK, item.rank);
        kd_msg_set_uint (part, KD_F_CLOCK, item.clock);
        kd_chain_send_part (self->chain, &part);
        staged++;
    }
    for (uint64_t r = 0; self->last_push && r < S_MAX_RANKS; r++)
        if (self->last_push [2 * r]) {
            kd_msg_t *part = s_sync_part ("mark", NULL, 0);
            kd_msg_set_uint (part, KD_F_RANK, r);
            kd_msg_set_uint (part, KD_F_CLOCK, self->last_push [2 * r]);
            kd_msg_set_uint (part, KD_F_BASE, self->last_push [2 * r + 1]);
            kd_chain_send_part (self->chain, &part);
        }
    kd_chain_end_sync (self->chain, self->version, self->chain_gen);
    kd_info ("state sent to successor version=%llu keys=%zu staged=%zu ms=%.1f",
             (unsigned long long) self->version, self->n, staged, kd_now_msf () - t0);
}

//  Follow the successor the scheduler named: link to it (or become the
//  tail), and when it is new, send it our state.
static void
s_chain_link (self_t *self, const char *endpoint)
{
    zsock_t *old = kd_chain_socket (self->chain);
    if (old && self->server)
        kd_server_reader_end (self->server, old);
    kd_chain_set_successor (self->chain, endpoint);
    zsock_t *next = kd_chain_socket (self->chain);
    if (next && self->server)
        kd_server_reader (self->server, next, s_on_chain_answer);
}

//  CHAIN: our place in our range's chain.  A primary takes the workers'
//  writes; a backup only forwarded ones.  A replica that was primary and
//  is now a backup (it was cut off, and rejoined) forgets the answers it
//  owed: a state transfer will replace what it holds.
static void
s_on_chain (self_t *self, kd_msg_t *msg)
{
    bool was_primary = self->primary && self->placed;
    self->primary = !strcmp (kd_msg_str (msg, KD_F_ROLE), "primary");
    //  The transfers we send from now on were ordered by this chain's
    //  configuration; an older scheduler names no generation.
    if (kd_msg_has (msg, KD_F_GEN))
        self->chain_gen = kd_msg_uint (msg, KD_F_GEN);
    const char *successor = kd_msg_str (msg, KD_F_ENDPOINT);
    if (self->primary && self->placed && !was_primary)
        kd_info ("promoted to primary version=%llu", (unsigned long long) self->version);
    kd_history_line (self->history, "role", "\"lo\":%llu,\"primary\":%s,\"version\":%llu",
                     (unsigned long long) self->lo, self->primary ? "true" : "false",
                     (unsigned long long) self->version);
    if (self->primary)
        self->synced = true;
    if (was_primary && !self->primary) {
        kd_chain_discard (self->chain);
        self->synced = false;
        kd_info ("demoted to backup: waiting for the state of its predecessor");
    }
    //  A transfer may have come before this CHAIN (another connection):
    //  a backup that is synced stays so.
    self->placed = true;
    kd_info ("chain role=%s lo=%llu successor=%s", self->primary ? "primary" : "backup",
             (unsigned long long) self->lo, *successor ? successor : "none");
    bool relink = kd_msg_uint (msg, KD_F_SYNC) || strcmp (successor, kd_chain_endpoint (self->chain));
    if (!relink)
        return;
    s_chain_link (self, successor);
    if (kd_chain_linked (self->chain) && self->synced)
        s_sync_successor (self);
}

//  SYNC: one part of a state transfer from our predecessor.  Parts are not
//  answered; SYNC end is, with SYNC_OK, to the predecessor and to the
//  scheduler (which may promote us from then on).
static void
s_on_sync (void *state, kd_msg_t *msg)
{
    self_t *self = (self_t *) state;
    zframe_t *id = kd_msg_routing_id (msg);
    const char *kind = kd_msg_str (msg, KD_F_KIND);
    //  Parts are never answered, so that each forward and each transfer
    //  gets one answer: a refused part fails the transfer, and its end
    //  answers ERROR (kind "sync").
    const char *why = NULL;
    int code = KD_ERR_UNAVAILABLE;
    if (*self->src->role && strcmp (self->src->role, "shard")) {
        why = "forbidden: only a shard sends its state";
        code = KD_ERR_FORBIDDEN;
    }
    else
    if (!self->registered)
        why = "shard not registered yet";
    else
    if (self->primary && self->placed)
        why = "this replica is its range's primary, not a backup";
    if (why || self->sync_failed) {
        self->sync_failed = strcmp (kind, "end") != 0;
        if (!why)
            why = "a part of the state transfer was refused";
        if (!strcmp (kind, "end")) {
            kd_warn ("state transfer refused: %s", why);
            kd_msg_t *reply = kd_msg_new_error (id, code, why);
            kd_msg_set_str (reply, KD_F_KIND, "sync");
            kd_msg_send (&reply, self->router);
            self->errors++;
        }
        return;
    }
    size_t count = 0;
    const float *values = kd_msg_data (msg) ? kd_msg_data_floats (msg, &count) : NULL;
    uint64_t rank = kd_msg_uint (msg, KD_F_RANK), clock = kd_msg_uint (msg, KD_F_CLOCK);
    if (!strcmp (kd_msg_str (msg, KD_F_KIND), "params")) {
        if (kd_msg_uint (msg, KD_F_LO) != self->lo || count != self->n || !values) {
            kd_warn ("sync for another range lo=%llu count=%zu (ours lo=%llu count=%zu)",
                     (unsigned long long) kd_msg_uint (msg, KD_F_LO), count,
                     (unsigned long long) self->lo, self->n);
            self->sync_failed = true;
            return;
        }
        //  A transfer before our CHAIN: we are a backup.
        self->primary = false;
        s_params_writable (self);
        memcpy (self->params, values, count * sizeof (float));
        self->version = kd_msg_uint (msg, KD_F_VERSION);
        self->samples = kd_msg_uint (msg, KD_F_SAMPLES);
        self->version_ts = kd_msg_uint (msg, KD_F_TS_MS);
        self->session = kd_msg_uint (msg, KD_F_SESSION);
        if (self->opt)
            kd_optimizer_set_steps (self->opt, clock);
        kd_stage_purge (self->staged);
        if (self->last_push)
            memset (self->last_push, 0, 2 * S_MAX_RANKS * sizeof (uint64_t));
        self->initialized = true;
        self->synced = false;
    }
    else
    if (!strcmp (kind, "state")) {
        if (!self->opt || rank >= kd_optimizer_state_count (self->opt) || count != self->n || !values)
            kd_warn ("sync: optimizer state %llu of %zu keys does not fit", (unsigned long long) rank, count);
        else
            memcpy (kd_optimizer_state (self->opt) + rank * self->n, values, count * sizeof (float));
    }
    else
    if (!strcmp (kind, "staged")) {
        if (count != self->n || !values || rank >= S_MAX_RANKS || kd_stage_count (self->staged) >= S_MAX_STAGED)
            kd_warn ("sync: staged gradient rank=%llu clock=%llu of %zu keys refused",
                     (unsigned long long) rank, (unsigned long long) clock, count);
        else {
            zframe_t *data = kd_msg_take_data (msg);
            kd_stage_put (self->staged, rank, clock, s_peer_hash (id), &data, kd_now_ms ());
        }
    }
    else
    if (!strcmp (kind, "mark")) {
        if (rank < S_MAX_RANKS) {
            if (!self->last_push) {
                self->last_push = (uint64_t *) calloc (2 * S_MAX_RANKS, sizeof (uint64_t));
                assert (self->last_push);
            }
            self->last_push [2 * rank] = clock;
            self->last_push [2 * rank + 1] = kd_msg_uint (msg, KD_F_BASE);
        }
    }
    else
    if (!strcmp (kind, "end")) {
        self->synced = true;
        kd_info ("synced from predecessor version=%llu staged=%zu", (unsigned long long) self->version,
                 kd_stage_count (self->staged));
        kd_history_line (self->history, "sync", "\"lo\":%llu,\"version\":%llu",
                         (unsigned long long) self->lo, (unsigned long long) self->version);
        //  Both answers name the generation of the CHAIN that ordered
        //  this transfer, so that the scheduler can tell one ordered before
        //  the chain last changed.
        kd_msg_t *ok = kd_msg_new (KD_MSG_SYNC_OK);
        kd_msg_set_routing_id (ok, id);
        kd_msg_set_uint (ok, KD_F_VERSION, self->version);
        if (kd_msg_has (msg, KD_F_GEN))
            kd_msg_set_uint (ok, KD_F_GEN, kd_msg_uint (msg, KD_F_GEN));
        kd_msg_send (&ok, self->router);
        ok = kd_msg_new (KD_MSG_SYNC_OK);
        kd_msg_set_uint (ok, KD_F_VERSION, self->version);
        kd_msg_set_uint (ok, KD_F_RANK, self->rank);
        if (kd_msg_has (msg, KD_F_GEN))
            kd_msg_set_uint (ok, KD_F_GEN, kd_msg_uint (msg, KD_F_GEN));
        kd_peer_send (self->peer, &ok);
        kd_peer_set_version (self->peer, self->version);
        kd_peer_set_samples (self->peer, self->samples);
        s_release_parked (self);
        //  A middle replica passes the new state on, under its own
        //  CHAIN's generation.
        s_sync_successor (self);
    }
    else
        kd_warn ("sync: unknown part kind=\"%s\"", kind);
}

//  STATS: our counters, for the monitor's stream and metrics.
static void
s_on_stats (void *state, kd_msg_t *msg)
{
    self_t *self = (self_t *) state;
    uint64_t counters [KD_SC_COUNT] = {
        [KD_SC_PUSHES] = self->pushes, [KD_SC_PULLS] = self->pulls,
        [KD_SC_COMMITS] = self->commits, [KD_SC_BYTES_IN] = self->bytes_in,
        [KD_SC_BYTES_OUT] = self->bytes_out, [KD_SC_STAGED] = kd_stage_count (self->staged),
        [KD_SC_CHECKPOINTS] = self->ckpt_written,
        [KD_SC_CHECKPOINT_AGE_MS] = UINT64_MAX,
        [KD_SC_REFUSED] = self->refused, [KD_SC_CLIPPED] = self->clipped,
        [KD_SC_LIMITED] = self->limited,
        [KD_SC_DISCONNECTS] = kd_guard_disconnects (self->guard),
        [KD_SC_CONNECTIONS] = kd_guard_connections (self->guard),
        [KD_SC_PARKED] = zlistx_size (self->parked),
        [KD_SC_SHM_PEERS] = kd_attach_count (self->attach),
        [KD_SC_SHM_BYTES_IN] = self->shm_bytes_in,
        [KD_SC_SHM_BYTES_OUT] = self->shm_bytes_out,
    };
    uint64_t wall = kd_wall_ms ();
    if (self->ckpt_wall_ms)
        counters [KD_SC_CHECKPOINT_AGE_MS] = wall > self->ckpt_wall_ms ? wall - self->ckpt_wall_ms : 0;
    kd_msg_t *ok = kd_msg_new (KD_MSG_STATS_OK);
    kd_msg_set_routing_id (ok, kd_msg_routing_id (msg));
    kd_msg_set_uint (ok, KD_F_RANK, self->rank);
    kd_msg_set_uint (ok, KD_F_VERSION, self->version);
    kd_msg_set_uints (ok, KD_F_COUNTERS, counters, KD_SC_COUNT);
    kd_msg_set_uint (ok, KD_F_TS_MS, wall);
    kd_msg_send (&ok, self->router);
}

//  The request loop's gate: until the scheduler has registered us, only
//  state transfers and heartbeats are served.
static bool
s_gate (void *state, kd_msg_t *msg)
{
    self_t *self = (self_t *) state;
    if (self->registered)
        return true;
    s_error (self, kd_msg_routing_id (msg), KD_ERR_UNAVAILABLE, "shard not registered yet");
    return false;
}

static void
s_on_error (void *state, zframe_t *id, int code, const char *reason)
{
    self_t *self = (self_t *) state;
    if (id)
        s_error (self, id, code, reason);
    else {
        kd_warn ("error code=%d reason=\"%s\"", code, reason);
        self->errors++;
    }
}

//  COMMIT from the scheduler, through the chain's admission.
static void
s_on_commit_request (void *state, kd_msg_t *msg)
{
    self_t *self = (self_t *) state;
    if (s_chain_admits (self, msg))
        s_on_commit (self, msg, KD_CHAIN_ROUTER);
}

static void
s_on_shm (void *state, kd_msg_t *msg)
{
    self_t *self = (self_t *) state;
    kd_msg_t *reply = kd_attach_on_shm (self->attach, msg, self->keyed ? 0 : self->n);
    kd_msg_send (&reply, self->router);
}

//  A successor's answer to what we forwarded.  One that refused gets our
//  state again, shortly: it may still be registering.
static void
s_on_chain_answer (void *state, zsock_t *sock)
{
    self_t *self = (self_t *) state;
    (void) sock;
    if (kd_chain_on_answer (self->chain) < 0 && !self->resync_at)
        self->resync_at = kd_now_ms () + 200;
}

//  After every turn: timers, and how long the next poll may wait.
static int
s_on_tick (void *state)
{
    self_t *self = (self_t *) state;
    if (self->stop)
        kd_server_stop (self->server);
    if (self->resync_at && kd_now_ms () >= self->resync_at && self->synced)
        s_sync_successor (self);
    kd_peer_set_version (self->peer, self->version);
    kd_peer_tick (self->peer);
    //  Time-based checkpoints also fire while no commits come.
    s_checkpoint (self, false);
    if (kd_now_ms () >= self->reap_at) {
        kd_attach_reap (self->attach);
        self->reap_at = kd_now_ms () + S_REAP_MS;
    }
    if (kd_now_ms () >= self->sweep_at) {
        s_sweep (self);
        self->sweep_at = kd_now_ms () + S_SWEEP_MS;
    }
    return kd_peer_timeout (self->peer) + 1;
}

//  The request loop: what the shard serves, and to whom it listens.
static kd_server_t *
s_server_new (self_t *self)
{
    kd_server_t *server = kd_server_new (KD_SVC_SHARD, self->router, self->guard, self);
    kd_server_on (server, KD_MSG_PUSH, s_on_push);
    kd_server_on (server, KD_MSG_COMMIT, s_on_commit_request);
    kd_server_on (server, KD_MSG_PULL, s_on_pull);
    kd_server_on (server, KD_MSG_SHM, s_on_shm);
    kd_server_on (server, KD_MSG_INIT, s_on_init);
    kd_server_on (server, KD_MSG_STATS, s_on_stats);
    kd_server_on (server, KD_MSG_SYNC, s_on_sync);
    kd_server_echo_heartbeats (server);
    kd_server_set_gate (server, s_gate);
    kd_server_open (server, KD_MSG_SYNC);
    kd_server_open (server, KD_MSG_HEARTBEAT);
    kd_server_set_error (server, s_on_error);
    kd_server_set_tick (server, s_on_tick);
    //  The bound keeps the scheduler's socket served under load.
    kd_server_set_burst (server, S_BURST);
    kd_server_reader (server, kd_peer_socket (self->peer), s_on_scheduler);
    if (kd_chain_socket (self->chain))
        kd_server_reader (server, kd_chain_socket (self->chain), s_on_chain_answer);
    return server;
}

//  Parked-pull destructor.
static void
s_parked_destroy (void **item)
{
    s_parked_t *p = (s_parked_t *) *item;
    if (p) {
        zframe_destroy (&p->routing_id);
        zframe_destroy (&p->keys);
        free (p);
        *item = NULL;
    }
}

int
kd_shard_run (kd_config_t *config, zsock_t *pipe)
{
    int rc = 1;
    self_t self_s = { .config = config }, *self = &self_s;
    s_tune_allocator ();
    int64_t max_msg = kd_config_int (config, "max-msg-bytes");
    openblas_set_num_threads ((int) kd_config_int (config, "threads"));
    if (*kd_config_str (config, "checkpoint-dir")) {
        self->ckpt_dir = kd_config_str (config, "checkpoint-dir");
        self->ckpt_keep = (int) kd_config_int (config, "checkpoint-keep");
        if (kd_checkpoint_parse_every (kd_config_str (config, "checkpoint-every"),
                                       &self->ckpt_seconds, &self->ckpt_versions)) {
            kd_error ("--checkpoint-every: \"%s\" is not seconds (\"30s\") or versions (\"200\")",
                      kd_config_str (config, "checkpoint-every"));
            return 2;
        }
    }

    if (*kd_config_str (config, "history-file")) {
        self->history = kd_history_new (kd_config_str (config, "history-file"));
        if (!self->history) {
            kd_error ("setting 'history-file': cannot open %s: %s", kd_config_str (config, "history-file"),
                      strerror (errno));
            return 2;
        }
        self->hist_buf = (char *) malloc (KD_HISTORY_MAX_LINE / 2);
        assert (self->hist_buf);
        kd_history_line (self->history, "open", "\"name\":\"%s\"", kd_config_str (config, "name"));
        self->crc_every = (uint64_t) kd_config_int (config, "history-crc-every");
    }
    self->router = zsock_new (ZMQ_ROUTER);
    kd_socket_harden (self->router, max_msg);
    kd_curve_server (kd_curve_process (), self->router);
    self->guard = kd_guard_new (self->router, "shard", (int) kd_config_int (config, "max-connections"),
                                (int) kd_config_int (config, "max-malformed"));
    self->max_staged = (size_t) kd_config_int (config, "max-staged");
    self->max_staged_bytes = (size_t) kd_config_int (config, "max-staged-bytes");
    self->max_staged_peer = (size_t) kd_config_int (config, "max-staged-per-peer");
    self->max_parked = (size_t) kd_config_int (config, "max-parked");
    self->staged_ttl_ms = (uint64_t) (kd_config_double (config, "staged-ttl") * 1000);
    self->parked_ttl_ms = (uint64_t) (kd_config_double (config, "parked-ttl") * 1000);
    self->max_norm = kd_config_double (config, "max-grad-norm");
    self->norm_refuse = !strcmp (kd_config_str (config, "grad-norm-action"), "refuse");
    if (zsock_bind (self->router, "%s", kd_config_str (config, "bind")) < 0) {
        kd_error ("cannot bind endpoint=%s: %s", kd_config_str (config, "bind"), zmq_strerror (zmq_errno ()));
        goto cleanup;
    }
    kd_warn_open_bind (kd_config_str (config, "bind"), kd_curve_enabled (kd_curve_process ()));
    if (kd_advertise_endpoint (self->router, kd_config_str (config, "advertise"),
                               self->endpoint, sizeof self->endpoint)) {
        kd_error ("cannot derive an endpoint to advertise");
        goto cleanup;
    }
    self->peer = kd_peer_new (kd_config_str (config, "scheduler"), "shard",
                              kd_config_str (config, "name"), max_msg,
                              (int) kd_config_int (config, "heartbeat-ms"),
                              (int) kd_config_int (config, "liveness"), NULL);
    if (!self->peer) {
        kd_error ("cannot connect to scheduler endpoint=%s", kd_config_str (config, "scheduler"));
        goto cleanup;
    }
    self->parked = zlistx_new ();
    zlistx_set_destructor (self->parked, s_parked_destroy);
    self->staged = kd_stage_new ();
    //  Shared memory trusts every process of our user on this host; under
    //  CURVE the peers are known by key, and a mapping cannot prove one.
    self->attach = kd_attach_new (kd_config_bool (config, "no-shm") ? "shared memory is off on this shard (--no-shm)"
                                : kd_curve_enabled (kd_curve_process ())
                                ? "shared memory is off: CURVE is on, and a mapping cannot be authenticated by key"
                                : NULL);
    //  Unreplicated, a shard is its range's only replica: the primary.
    self->chain = kd_chain_new (self->router, self->peer, max_msg);
    self->primary = true;
    if (self->ckpt_dir && s_restore (self))
        goto cleanup;
    self->ckpt_at_ms = kd_now_ms ();
    kd_peer_set_version (self->peer, self->version);
    kd_peer_set_endpoint (self->peer, self->endpoint);
    kd_info ("listening endpoint=%s advertise=%s", kd_config_str (config, "bind"), self->endpoint);
    kd_peer_hello (self->peer);

    self->server = s_server_new (self);
    self->src = kd_server_source (self->server);
    kd_service_ready (pipe);
    kd_server_run (self->server, pipe);
    //  A clean stop loses nothing: the last version goes to disk.
    s_checkpoint (self, true);
    //  The CRC of the values lets replicas of a range be compared bit for bit.
    unsigned long crc = s_params_crc (self);
    kd_history_line (self->history, "final",
                     "\"lo\":%llu,\"version\":%llu,\"primary\":%s,\"params_crc\":\"%08lx\"",
                     (unsigned long long) self->lo, (unsigned long long) self->version,
                     self->primary ? "true" : "false", crc);
    kd_info ("replica %s version=%llu lo=%llu params_crc=%08lx chain_bytes=%llu bytes_in=%llu",
             self->primary ? "primary" : "backup", (unsigned long long) self->version,
             (unsigned long long) self->lo, crc,
             (unsigned long long) kd_chain_bytes (self->chain), (unsigned long long) self->bytes_in);
    kd_info ("exit version=%llu pushes=%llu commits=%llu pulls=%llu errors=%llu lost=%llu checkpoints=%llu "
             "refused=%llu clipped=%llu limited=%llu disconnects=%llu aged_staged=%llu aged_parked=%llu",
             (unsigned long long) self->version, (unsigned long long) self->pushes,
             (unsigned long long) self->commits, (unsigned long long) self->pulls,
             (unsigned long long) (self->errors + kd_server_forbidden (self->server)),
             (unsigned long long) self->lost,
             (unsigned long long) self->ckpt_written, (unsigned long long) self->refused,
             (unsigned long long) self->clipped, (unsigned long long) self->limited,
             (unsigned long long) kd_guard_disconnects (self->guard),
             (unsigned long long) (self->orphaned + self->expired),
             (unsigned long long) self->parked_expired);
    rc = 0;
cleanup:
    kd_server_destroy (&self->server);
    s_ckpt_rows_free (self);
    kd_stage_destroy (&self->staged);
    free (self->last_push);
    free (self->step_grads);
    free (self->step_weights);
    kd_history_destroy (&self->history);
    free (self->hist_buf);
    free (self->hist_u [0]);
    free (self->hist_u [1]);
    zlistx_destroy (&self->parked);
    kd_chain_destroy (&self->chain);
    kd_attach_destroy (&self->attach);
    kd_peer_destroy (&self->peer);
    kd_guard_destroy (&self->guard);
    zsock_destroy (&self->router);
    s_params_free (self);
    kd_optimizer_destroy (&self->opt);
    kd_keyed_destroy (&self->keyed);
    free (self->gsum);
    free (self->ckpt_state);
    for (int k = 0; k < 2; k++)
        if (self->half [k].lent)
            s_params_release (self->half [k].lent->data, self->half [k].lent);
    return rc;
}
