/*  kd_sse_hub: fan-out of server-sent events with replay (see kd_sse_hub.h).

    The log is an array ordered by sequence number.  Replaced slot events
    and dropped old events leave holes (text NULL) that a compaction
    squeezes out once they are half the array, so publishing stays
    amortized O(1) and a read is a binary search.
*/
#include "kd_sse_hub.h"
#include <assert.h>
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct {
    uint64_t seq;               //  1, 2, ... in publishing order
    char *text;                 //  owned; NULL once replaced or dropped
    size_t len;
    int slot;                   //  -1 or the slot it holds
} s_entry_t;

struct _kd_sse_hub_t {
    pthread_mutex_t lock;
    pthread_cond_t cond;        //  signalled on publish and close
    s_entry_t *entries;         //  the log, ordered by seq, with holes
    size_t count;               //  entries used, holes included
    size_t capacity;
    size_t live;                //  entries with text
    size_t first;               //  index of the oldest entry that may be live
    size_t max_events;
    size_t *slot_index;         //  per slot, index + 1 of its entry (0 = none)
    size_t max_slots;
    uint64_t seq;               //  last sequence number given
    bool closed;
};

kd_sse_hub_t *
kd_sse_hub_new (size_t max_events, size_t max_slots)
{
    assert (max_events > 0);
    kd_sse_hub_t *self = (kd_sse_hub_t *) calloc (1, sizeof *self);
    assert (self);
    pthread_mutex_init (&self->lock, NULL);
    pthread_condattr_t attr;
    pthread_condattr_init (&attr);
    //  Timed waits on the monotonic clock: a wall clock step must not
    //  stall a reader.
    pthread_condattr_setclock (&attr, CLOCK_MONOTONIC);
    pthread_cond_init (&self->cond, &attr);
    pthread_condattr_destroy (&attr);
    self->max_events = max_events;
    self->max_slots = max_slots;
    self->slot_index = (size_t *) calloc (max_slots + 1, sizeof (size_t));
    assert (self->slot_index);
    return self;
}

void
kd_sse_hub_close (kd_sse_hub_t *self)
{
    assert (self);
    pthread_mutex_lock (&self->lock);
    self->closed = true;
    pthread_cond_broadcast (&self->cond);
    pthread_mutex_unlock (&self->lock);
}

void
kd_sse_hub_destroy (kd_sse_hub_t **self_p)
{
    assert (self_p);
    kd_sse_hub_t *self = *self_p;
    if (!self)
        return;
    kd_sse_hub_close (self);
    for (size_t i = 0; i < self->count; i++)
        free (self->entries [i].text);
    free (self->entries);
    free (self->slot_index);
    pthread_cond_destroy (&self->cond);
    pthread_mutex_destroy (&self->lock);
    free (self);
    *self_p = NULL;
}

//  Drop the entry at index i (a hole from now on).
static void
s_drop (kd_sse_hub_t *self, size_t i)
{
    s_entry_t *e = &self->entries [i];
    if (!e->text)
        return;
    free (e->text);
    e->text = NULL;
    if (e->slot >= 0 && self->slot_index [e->slot] == i + 1)
        self->slot_index [e->slot] = 0;
    self->live--;
}

//  Squeeze the holes out, keeping the order, and renumber the slots.
static void
s_compact (kd_sse_hub_t *self)
{
    size_t out = 0;
    for (size_t i = 0; i < self->count; i++) {
        s_entry_t *e = &self->entries [i];
        if (!e->text)
            continue;
        if (e->slot >= 0)
            self->slot_index [e->slot] = out + 1;
        self->entries [out++] = *e;
    }
    self->count = out;
    self->first = 0;
}

int
kd_sse_hub_publish (kd_sse_hub_t *self, const char *text, size_t len, int slot)
{
    assert (self && (text || len == 0));
    if (slot < -1 || (slot >= 0 && (size_t) slot >= self->max_slots))
        return -1;
    char *copy = (char *) malloc (len + 1);
    assert (copy);
    if (len)
        memcpy (copy, text, len);
    copy [len] = 0;
    pthread_mutex_lock (&self->lock);
    if (slot >= 0 && self->slot_index [slot])
        s_drop (self, self->slot_index [slot] - 1);
    //  Full: the oldest live events go first.
    while (self->live >= self->max_events && self->first < self->count)
        s_drop (self, self->first++);
    if (self->count == self->capacity && self->count - self->live >= self->count / 2)
        s_compact (self);
    if (self->count == self->capacity) {
        self->capacity = self->capacity ? self->capacity * 2 : 256;
        self->entries = (s_entry_t *) realloc (self->entries, self->capacity * sizeof (s_entry_t));
        assert (self->entries);
    }
    s_entry_t *e = &self->entries [self->count++];
    e->seq = ++self->seq;
    e->text = copy;
    e->len = len;
    e->slot = slot;
    self->live++;
    if (slot >= 0)
        self->slot_index [slot] = self->count;
    pthread_cond_broadcast (&self->cond);
    pthread_mutex_unlock (&self->lock);
    return 0;
}

//  Index of the first live entry with seq > cursor, or count.
static size_t
s_find (kd_sse_hub_t *self, uint64_t cursor)
{
    size_t lo = self->first, hi = self->count;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (self->entries [mid].seq <= cursor)
            lo = mid + 1;
        else
            hi = mid;
    }
    while (lo < self->count && !self->entries [lo].text)
        lo++;
    return lo;
}

int
kd_sse_hub_read (kd_sse_hub_t *self, uint64_t *cursor, char **text, size_t *len, int timeout_ms)
{
    assert (self && cursor && text && len);
    struct timespec deadline;
    clock_gettime (CLOCK_MONOTONIC, &deadline);
    deadline.tv_sec += timeout_ms / 1000;
    deadline.tv_nsec += (long) (timeout_ms % 1000) * 1000000L;
    if (deadline.tv_nsec >= 1000000000L) {
        deadline.tv_sec++;
        deadline.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock (&self->lock);
    int rc = 0;
    while (true) {
        if (self->closed) {
            rc = -1;
            break;
        }
        size_t i = s_find (self, *cursor);
        if (i < self->count) {
            s_entry_t *e = &self->entries [i];
            *text = (char *) malloc (e->len + 1);
            assert (*text);
            memcpy (*text, e->text, e->len + 1);
            *len = e->len;
            *cursor = e->seq;
            rc = 1;
            break;
        }
        if (pthread_cond_timedwait (&self->cond, &self->lock, &deadline) == ETIMEDOUT)
            break;
    }
    pthread_mutex_unlock (&self->lock);
    return rc;
}

size_t
kd_sse_hub_size (kd_sse_hub_t *self)
{
    assert (self);
    pthread_mutex_lock (&self->lock);
    size_t live = self->live;
    pthread_mutex_unlock (&self->lock);
    return live;
}

uint64_t
kd_sse_hub_published (kd_sse_hub_t *self)
{
    assert (self);
    pthread_mutex_lock (&self->lock);
    uint64_t seq = self->seq;
    pthread_mutex_unlock (&self->lock);
    return seq;
}
