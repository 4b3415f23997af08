/*  kd_shmlink: a worker's shared memory with one shard (see kd_shmlink.h).
*/
#include "kd_shmlink.h"
#include "kd_log.h"
#include "kd_shm.h"

struct _kd_shmlink_t {
    kd_shm_t *push;             //  ours: slots slices the shard reads
    kd_shm_t *snapshot;         //  the shard's values, mapped read-only
    size_t slots;               //  push slots
    size_t slot_bytes;          //  bytes between push slots
    char host [KD_SHM_HOST_MAX];
};

kd_shmlink_t *
kd_shmlink_new (size_t n, size_t slots)
{
    if (n == 0 || slots == 0 || n > KD_SHM_MAX_BYTES / sizeof (float) / slots)
        return NULL;
    kd_shmlink_t *self = (kd_shmlink_t *) zmalloc (sizeof *self);
    self->slots = slots;
    self->slot_bytes = (n * sizeof (float) + KD_SHM_ALIGN - 1) / KD_SHM_ALIGN * KD_SHM_ALIGN;
    if (kd_shm_host (self->host, sizeof self->host)
    ||  !(self->push = kd_shm_new ("kudus-worker-push", self->slot_bytes * slots))) {
        kd_debug ("shm: this host cannot share memory");
        free (self);
        return NULL;
    }
    return self;
}

void
kd_shmlink_destroy (kd_shmlink_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    kd_shmlink_t *self = *self_p;
    kd_shm_destroy (&self->push);
    kd_shm_destroy (&self->snapshot);
    free (self);
    *self_p = NULL;
}

kd_msg_t *
kd_shmlink_offer (kd_shmlink_t *self)
{
    kd_msg_t *msg = kd_msg_new (KD_MSG_SHM);
    kd_msg_set_uint (msg, KD_F_PID, kd_shm_pid (self->push));
    kd_msg_set_str (msg, KD_F_HOST, self->host);
    kd_msg_set_uint (msg, KD_F_FD, kd_shm_fd (self->push));
    kd_msg_set_uint (msg, KD_F_TOKEN, kd_shm_token (self->push));
    kd_msg_set_uint (msg, KD_F_BYTES, kd_shm_size (self->push));
    return msg;
}

int
kd_shmlink_accept (kd_shmlink_t *self, kd_msg_t *reply, char *why, size_t why_size)
{
    if (kd_msg_type (reply) == KD_MSG_ERROR) {
        snprintf (why, why_size, "%s", kd_msg_str (reply, KD_F_REASON));
        return -1;
    }
    if (kd_msg_type (reply) != KD_MSG_SHM_OK) {
        snprintf (why, why_size, "shm: the shard answered %s", kd_msg_type_name (kd_msg_type (reply)));
        return -1;
    }
    if (!streq (kd_msg_str (reply, KD_F_HOST), self->host)) {
        snprintf (why, why_size, "shm: the shard is on another host or namespace");
        return -1;
    }
    kd_shm_t *snapshot = kd_shm_attach (kd_msg_uint (reply, KD_F_PID), kd_msg_uint (reply, KD_F_FD),
                                        kd_msg_uint (reply, KD_F_TOKEN), kd_msg_uint (reply, KD_F_BYTES),
                                        false, why, why_size);
    if (!snapshot)
        return -1;
    kd_shm_destroy (&self->snapshot);
    self->snapshot = snapshot;
    return 0;
}

float *
kd_shmlink_slot (kd_shmlink_t *self, size_t i)
{
    assert (i < self->slots);
    return (float *) ((uint8_t *) kd_shm_data (self->push) + i * self->slot_bytes);
}

uint64_t
kd_shmlink_offset (kd_shmlink_t *self, size_t i)
{
    assert (i < self->slots);
    return i * self->slot_bytes;
}

int
kd_shmlink_read (kd_shmlink_t *self, kd_msg_t *reply, float *dst, size_t n)
{
    if (!self->snapshot || n != kd_msg_uint (reply, KD_F_COUNT))
        return -2;
    return kd_shm_read (self->snapshot, kd_msg_uint (reply, KD_F_OFFSET), kd_msg_uint (reply, KD_F_SEQ),
                        dst, n);
}

bool
kd_shmlink_shard_gone (kd_shmlink_t *self)
{
    return self->snapshot && kd_shm_owner_gone (self->snapshot);
}
