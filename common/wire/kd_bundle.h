/*  kd_bundle: many peers' control messages in one RELAY.

    A barrier aggregator (kudus aggregate) sits between a group of workers
    and the scheduler.  It packs the messages its workers send into one
    RELAY for the scheduler, and the scheduler packs what it sends to those
    workers (RELEASE, HEARTBEAT, ...) into one RELAY back, which the
    aggregator unpacks and sends on.  So the scheduler handles one message
    per aggregator and burst instead of one per worker.

    A RELAY is a kd_msg: its header says how many items ("items"), and its
    data frame holds them back to back, padded with zero bytes to a multiple
    of 4 (the codec's data-frame rule):

        u8 id_len, id              the worker's routing id at the aggregator
        u8 len, role               its CURVE role ("" without CURVE)
        u8 len, user               its CURVE key ("" without CURVE)
        u8 len, address            its peer address
        u32 (little-endian) len,   the message, one encoded kd_msg header
        message                    frame (no data frames are relayed)

    The reader checks every length against the bytes left and returns -2
    on anything malformed, and an item count that disagrees with "items".
*/
#ifndef KD_BUNDLE_H_INCLUDED
#define KD_BUNDLE_H_INCLUDED

#include "kd_msg.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KD_BUNDLE_MAX_ITEMS     4096        //  items in one RELAY
#define KD_BUNDLE_MAX_BYTES     (8u << 20)  //  bytes of one RELAY's items
#define KD_BUNDLE_MAX_MSG       KD_MSG_MAX_HEADER   //  bytes of one relayed message

//  One relayed message.  The pointers borrow from the RELAY being read (or
//  from the caller, when adding).
typedef struct {
    const byte *id;             //  routing id at the aggregator
    size_t id_size;             //  1 .. 255 bytes
    kd_msg_source_t src;        //  role, user and address (fd unused)
    const byte *msg;            //  encoded header frame
    size_t msg_size;            //  1 .. KD_BUNDLE_MAX_MSG bytes
} kd_bundle_item_t;

typedef struct _kd_bundle_t kd_bundle_t;

//  An empty bundle.
kd_bundle_t *
    kd_bundle_new (void);

//  Destroy and null the caller's pointer.  Safe on NULL.
void
    kd_bundle_destroy (kd_bundle_t **self_p);

//  Append an item.  Returns 0, or -1 when a field is out of bounds or the
//  bundle is full (take it, then add again).
int
    kd_bundle_add (kd_bundle_t *self, const kd_bundle_item_t *item);

//  Append a message for a routing id, encoded here.  Returns as
//  kd_bundle_add, and -1 also when the message cannot be encoded or has a
//  data frame.  Does not take the message.
int
    kd_bundle_add_msg (kd_bundle_t *self, zframe_t *id, const kd_msg_source_t *src,
                       kd_msg_t *msg);

//  Items held.
size_t
    kd_bundle_items (kd_bundle_t *self);

//  The RELAY holding the items, and the bundle is empty again; NULL when
//  it was empty.  Caller owns the message.
kd_msg_t *
    kd_bundle_take (kd_bundle_t *self);

//  Read the next item of a RELAY from *offset (start at 0).  Returns 0 with
//  item filled, 1 after the last item (when exactly "items" were read and
//  only padding is left), or -2 with reason filled when malformed.
int
    kd_bundle_next (kd_msg_t *relay, size_t *offset, size_t *index,
                    kd_bundle_item_t *item, char *reason, size_t reason_size);

//  Decode an item's message as if it had come from its worker over a
//  ROUTER: *out holds the item's routing id.  Returns as kd_msg_decode.
int
    kd_bundle_decode (const kd_bundle_item_t *item, kd_msg_t **out, kd_msg_err_t *err);

#ifdef __cplusplus
}
#endif

#endif
