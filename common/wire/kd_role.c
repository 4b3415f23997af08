/*  kd_role: what each role may send to each service (see kd_role.h).
*/
#include "kd_role.h"
#include "kd_config.h"
#include "kd_log.h"

//  The bit of a role, 0 for observer and anything unknown.
static unsigned
s_bit (const char *role)
{
    if (!strcmp (role, "worker"))
        return KD_ROLE_WORKER;
    if (!strcmp (role, "shard"))
        return KD_ROLE_SHARD;
    if (!strcmp (role, "monitor"))
        return KD_ROLE_MONITOR;
    if (!strcmp (role, "scheduler"))
        return KD_ROLE_SCHEDULER;
    if (!strcmp (role, "evaluator"))
        return KD_ROLE_EVALUATOR;
    return 0;
}

bool
kd_role_allows (unsigned service, const char *role, kd_msg_type_t type)
{
    if (!role || !*role)
        return true;
    //  The rules are the schema's (kd_msg.c, s_types): written once.
    kd_msg_to_t to = service == KD_SVC_SCHEDULER ? KD_TO_SCHEDULER
                   : service == KD_SVC_SHARD ? KD_TO_SHARD
                   : service == KD_SVC_MONITOR ? KD_TO_MONITOR : KD_TO_COUNT;
    return (kd_msg_type_senders (type, to) & s_bit (role)) != 0;
}

bool
kd_role_check (unsigned service, const kd_msg_source_t *src, kd_msg_t *msg, zsock_t *router)
{
    assert (src);
    assert (msg);
    kd_msg_type_t type = kd_msg_type (msg);
    if (kd_role_allows (service, src->role, type))
        return true;
    char reason [128];
    snprintf (reason, sizeof reason, "forbidden: role %s may not send %s here",
              src->role, kd_msg_type_name (type));
    kd_warn ("%s role=%s key=%s address=%s", reason, src->role, src->user,
             *src->address ? src->address : "?");
    //  Never answer an ERROR with an ERROR.
    if (type != KD_MSG_ERROR) {
        kd_msg_t *reply = kd_msg_new_error (kd_msg_routing_id (msg), KD_ERR_FORBIDDEN, reason);
        kd_msg_send (&reply, router);
    }
    return false;
}
