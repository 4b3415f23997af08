/*  kd_sse_hub: fan-out of server-sent events to many readers, with replay.

    The dashboard's one producer (the thread that reads the monitor's
    stream) publishes events; every HTTP connection reads them in order
    through a cursor of its own.  A page that connects late must still draw
    the whole run, so the hub keeps a log:

    - an event published with slot -1 (stats, groups, events) stays in the
      log until the log is full, when the oldest goes;
    - an event published with a slot >= 0 (one per worker rank) replaces the
      previous event of that slot, so that a long run keeps one row per
      worker, not every telemetry window.

    A reader starts at the log's beginning.  A reader that falls so far
    behind that its next event was dropped skips ahead to the oldest one
    left; it never blocks the producer.  All calls are thread-safe.
*/
#ifndef KD_SSE_HUB_H_INCLUDED
#define KD_SSE_HUB_H_INCLUDED

#include <stddef.h>
#include <stdint.h>

typedef struct _kd_sse_hub_t kd_sse_hub_t;

//  A hub that keeps at most max_events events and max_slots slots.
//  Caller owns return value.
kd_sse_hub_t *
    kd_sse_hub_new (size_t max_events, size_t max_slots);

//  Wake every reader with end of stream, then destroy and null the
//  caller's pointer.  No reader may be inside kd_sse_hub_read afterwards.
void
    kd_sse_hub_destroy (kd_sse_hub_t **self_p);

//  Append an event (text is copied, as is).  slot -1 keeps it in the log;
//  a slot in [0, max_slots) replaces that slot's previous event.  Returns
//  0, or -1 when slot is out of range.
int
    kd_sse_hub_publish (kd_sse_hub_t *self, const char *text, size_t len, int slot);

//  The next event after *cursor (0 = from the beginning): copies it into a
//  new buffer (*text, caller frees), sets *len, advances *cursor and
//  returns 1.  Waits up to timeout_ms for one: returns 0 on timeout and -1
//  once the hub is closing.
int
    kd_sse_hub_read (kd_sse_hub_t *self, uint64_t *cursor, char **text, size_t *len,
                     int timeout_ms);

//  Stop: every reader, waiting or not, gets -1 from now on.
void
    kd_sse_hub_close (kd_sse_hub_t *self);

//  Events in the log now, and the number published in all.
size_t
    kd_sse_hub_size (kd_sse_hub_t *self);
uint64_t
    kd_sse_hub_published (kd_sse_hub_t *self);

#endif
