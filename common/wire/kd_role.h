/*  kd_role: what each role may send to each service.

    Under CURVE every client key has a role, written into its certificate
    by `kudus keygen` and handed to the service with each message by the
    ZAP handler (kd_curve).  This class refuses, with ERROR 403 and a log
    line naming the key, what the protocol's schema (the senders column of
    s_types in kd_msg.c, stated in docs/protocol.md's role table) does not
    allow that role to send to that service.

    An observer may send nothing: it only subscribes to the stream.  A
    message from a key without a role (no CURVE, the trusted network; or a
    keys directory from before roles) is not checked.
*/
#ifndef KD_ROLE_H_INCLUDED
#define KD_ROLE_H_INCLUDED

#include "kd_msg.h"

#ifdef __cplusplus
extern "C" {
#endif

//  True when a key of role may send type to service (KD_SVC_SCHEDULER,
//  KD_SVC_SHARD or KD_SVC_MONITOR).  An empty role may send anything.
bool
    kd_role_allows (unsigned service, const char *role, kd_msg_type_t type);

//  Check a received message against the table.  When it is forbidden, log
//  it with the sender's key, answer ERROR 403 on router and return false.
bool
    kd_role_check (unsigned service, const kd_msg_source_t *src, kd_msg_t *msg,
                   zsock_t *router);

#ifdef __cplusplus
}
#endif

#endif
