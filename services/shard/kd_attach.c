/*  kd_attach: the workers a shard shares memory with (see kd_attach.h).
*/
#include "kd_attach.h"
#include "kd_log.h"
#include "kd_shm.h"

#define S_MAX_PEERS     256     //  workers attached at once
#define S_MAX_SLOTS     16      //  push slots of a range's size a region may hold

typedef struct {
    zframe_t *id;               //  the worker's routing id
    kd_shm_t *region;           //  its push region, mapped read-only
} s_peer_t;

struct _kd_attach_t {
    char *off;                  //  why shared memory is off, or NULL
    char host [KD_SHM_HOST_MAX];    //  our host identity ("" unknown)
    s_peer_t peers [S_MAX_PEERS];
    size_t n_peers;
    kd_shm_t *snapshot;         //  our values, for pulls; made at first SHM
    size_t snapshot_n;          //  floats it holds
    bool published;             //  it holds a generation
    uint64_t generation;        //  ... this one
    uint64_t offset, seq;       //  ... here
};

kd_attach_t *
kd_attach_new (const char *off_reason)
{
    kd_attach_t *self = (kd_attach_t *) zmalloc (sizeof *self);
    if (off_reason)
        self->off = strdup (off_reason);
    else
    if (kd_shm_host (self->host, sizeof self->host))
        self->off = strdup ("this host's boot id or pid namespace is unknown");
    return self;
}

static void
s_peer_drop (kd_attach_t *self, size_t i)
{
    zframe_destroy (&self->peers [i].id);
    kd_shm_destroy (&self->peers [i].region);
    self->peers [i] = self->peers [--self->n_peers];
}

void
kd_attach_destroy (kd_attach_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    kd_attach_t *self = *self_p;
    while (self->n_peers)
        s_peer_drop (self, 0);
    kd_shm_destroy (&self->snapshot);
    free (self->off);
    free (self);
    *self_p = NULL;
}

static s_peer_t *
s_find (kd_attach_t *self, zframe_t *id)
{
    for (size_t i = 0; id && i < self->n_peers; i++)
        if (zframe_eq (self->peers [i].id, id))
            return &self->peers [i];
    return NULL;
}

static kd_msg_t *
s_decline (kd_msg_t *msg, int code, const char *reason)
{
    kd_info ("shm: declined pid=%llu reason=\"%s\"", (unsigned long long) kd_msg_uint (msg, KD_F_PID), reason);
    kd_msg_t *reply = kd_msg_new_error (kd_msg_routing_id (msg), code, reason);
    kd_msg_set_uint (reply, KD_F_SHM, 1);
    return reply;
}

kd_msg_t *
kd_attach_on_shm (kd_attach_t *self, kd_msg_t *msg, size_t n)
{
    assert (self && msg);
    if (self->off)
        return s_decline (msg, KD_ERR_STATE, self->off);
    if (!streq (kd_msg_str (msg, KD_F_HOST), self->host))
        return s_decline (msg, KD_ERR_STATE, "shm: the worker is on another host or namespace");
    if (n == 0)
        return s_decline (msg, KD_ERR_STATE, "shm: this shard holds no dense values");
    uint64_t bytes = kd_msg_uint (msg, KD_F_BYTES);
    uint64_t slot = (n * sizeof (float) + KD_SHM_ALIGN - 1) / KD_SHM_ALIGN * KD_SHM_ALIGN;
    if (bytes > slot * S_MAX_SLOTS)
        return s_decline (msg, KD_ERR_TOO_LARGE, "shm: push region larger than 16 slices of this range");
    s_peer_t *peer = s_find (self, kd_msg_routing_id (msg));
    if (!peer && self->n_peers == S_MAX_PEERS) {
        //  Make room from the dead before saying no.
        kd_attach_reap (self);
        if (self->n_peers == S_MAX_PEERS)
            return s_decline (msg, KD_ERR_LIMIT, "shm: too many workers attached");
    }
    if (self->snapshot && self->snapshot_n != n) {
        //  Our range changed (a new WELCOME): a new snapshot, and every
        //  worker attaches again (their pushes are refused until then).
        while (self->n_peers)
            s_peer_drop (self, 0);
        kd_shm_destroy (&self->snapshot);
        self->published = false;
        peer = NULL;
    }
    if (!self->snapshot) {
        self->snapshot = kd_shm_new_snapshot ("kudus-shard-snapshot", n);
        self->snapshot_n = n;
        if (!self->snapshot)
            return s_decline (msg, KD_ERR_INTERNAL, "shm: cannot make the snapshot region");
    }
    char why [160];
    kd_shm_t *region = kd_shm_attach (kd_msg_uint (msg, KD_F_PID), kd_msg_uint (msg, KD_F_FD),
                                      kd_msg_uint (msg, KD_F_TOKEN), bytes, false, why, sizeof why);
    if (!region)
        return s_decline (msg, KD_ERR_STATE, why);
    if (peer)
        //  Attached again (a retry, or a new region): the old mapping goes.
        kd_shm_destroy (&peer->region);
    else {
        peer = &self->peers [self->n_peers++];
        peer->id = zframe_dup (kd_msg_routing_id (msg));
    }
    peer->region = region;
    kd_info ("shm: attached pid=%llu bytes=%llu workers=%zu", (unsigned long long) kd_msg_uint (msg, KD_F_PID),
             (unsigned long long) bytes, self->n_peers);
    kd_msg_t *ok = kd_msg_new (KD_MSG_SHM_OK);
    kd_msg_set_routing_id (ok, kd_msg_routing_id (msg));
    kd_msg_set_uint (ok, KD_F_PID, kd_shm_pid (self->snapshot));
    kd_msg_set_str (ok, KD_F_HOST, self->host);
    kd_msg_set_uint (ok, KD_F_FD, kd_shm_fd (self->snapshot));
    kd_msg_set_uint (ok, KD_F_TOKEN, kd_shm_token (self->snapshot));
    kd_msg_set_uint (ok, KD_F_BYTES, kd_shm_size (self->snapshot));
    return ok;
}

const float *
kd_attach_values (kd_attach_t *self, zframe_t *routing_id, uint64_t offset, size_t count,
                  char *why, size_t why_size)
{
    s_peer_t *peer = s_find (self, routing_id);
    if (!peer) {
        snprintf (why, why_size, "shm: this worker is not attached (resend by TCP)");
        return NULL;
    }
    size_t size = kd_shm_size (peer->region);
    if (offset % sizeof (float) || offset > size || count > (size - offset) / sizeof (float)) {
        snprintf (why, why_size, "shm: offset %llu and count %zu are outside the %zu-byte region",
                  (unsigned long long) offset, count, size);
        return NULL;
    }
    return (const float *) ((const uint8_t *) kd_shm_data (peer->region) + offset);
}

bool
kd_attach_has (kd_attach_t *self, zframe_t *routing_id)
{
    return s_find (self, routing_id) != NULL;
}

int
kd_attach_publish (kd_attach_t *self, const float *params, size_t n, uint64_t generation,
                   uint64_t *offset, uint64_t *seq)
{
    if (!self->snapshot || n != self->snapshot_n)
        return -1;
    if (!self->published || self->generation != generation) {
        self->seq = kd_shm_publish (self->snapshot, params, n, &self->offset);
        self->generation = generation;
        self->published = true;
    }
    *offset = self->offset;
    *seq = self->seq;
    return 0;
}

size_t
kd_attach_reap (kd_attach_t *self)
{
    size_t dropped = 0;
    for (size_t i = 0; i < self->n_peers; )
        if (kd_shm_orphaned (self->peers [i].region)) {
            kd_info ("shm: worker pid=%llu exited or let go of its region, its mapping is released",
                     (unsigned long long) kd_shm_pid (self->peers [i].region));
            s_peer_drop (self, i);
            dropped++;
        }
        else
            i++;
    return dropped;
}

size_t
kd_attach_count (kd_attach_t *self)
{
    return self->n_peers;
}
