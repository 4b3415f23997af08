/*  kd_role: what each role may send to each service (see kd_role.h).
*/
#include "kd_role.h"
#include "kd_config.h"
#include "kd_log.h"

#define S_W     0x01        //  worker
#define S_S     0x02        //  shard
#define S_M     0x04        //  monitor
#define S_C     0x08        //  scheduler

//  The table: for each service, the roles that may send each type.
typedef struct {
    unsigned service;       //  KD_SVC_*
    kd_msg_type_t type;
    unsigned roles;         //  S_* mask
} s_rule_t;

static const s_rule_t s_rules [] = {
    { KD_SVC_SCHEDULER, KD_MSG_HELLO, S_W | S_S | S_M },
    { KD_SVC_SCHEDULER, KD_MSG_HEARTBEAT, S_W | S_S | S_M },
    { KD_SVC_SCHEDULER, KD_MSG_ERROR, S_W | S_S | S_M },
    { KD_SVC_SCHEDULER, KD_MSG_ARRIVE, S_W },
    { KD_SVC_SCHEDULER, KD_MSG_LEAVE, S_W },
    { KD_SVC_SCHEDULER, KD_MSG_COMMIT_OK, S_S },
    { KD_SVC_SCHEDULER, KD_MSG_SYNC_OK, S_S },
    { KD_SVC_SCHEDULER, KD_MSG_EVAL_OK, S_M },
    //  A barrier aggregator runs with the scheduler's key and vouches for
    //  the roles of the workers behind it.
    { KD_SVC_SCHEDULER, KD_MSG_RELAY, S_C },
    //  A replica forwards writes down its range's chain (kd_chain).
    { KD_SVC_SHARD, KD_MSG_PUSH, S_W | S_S },
    { KD_SVC_SHARD, KD_MSG_INIT, S_W | S_S },
    { KD_SVC_SHARD, KD_MSG_COMMIT, S_S },
    { KD_SVC_SHARD, KD_MSG_SYNC, S_S },
    { KD_SVC_SHARD, KD_MSG_PULL, S_W | S_M },
    { KD_SVC_SHARD, KD_MSG_SHM, S_W },
    { KD_SVC_SHARD, KD_MSG_STATS, S_M },
    { KD_SVC_SHARD, KD_MSG_HEARTBEAT, S_W | S_M | S_S },
    { KD_SVC_SHARD, KD_MSG_ERROR, S_W | S_M | S_S },
    { KD_SVC_MONITOR, KD_MSG_TELEMETRY, S_W },
    { KD_SVC_MONITOR, KD_MSG_HEARTBEAT, S_W },
    { KD_SVC_MONITOR, KD_MSG_ERROR, S_W },
};

//  The bit of a role, 0 for observer and anything unknown.
static unsigned
s_bit (const char *role)
{
    if (!strcmp (role, "worker"))
        return S_W;
    if (!strcmp (role, "shard"))
        return S_S;
    if (!strcmp (role, "monitor"))
        return S_M;
    if (!strcmp (role, "scheduler"))
        return S_C;
    return 0;
}

bool
kd_role_allows (unsigned service, const char *role, kd_msg_type_t type)
{
    if (!role || !*role)
        return true;
    unsigned bit = s_bit (role);
    for (size_t i = 0; i < sizeof s_rules / sizeof s_rules [0]; i++)
        if (s_rules [i].service == service && s_rules [i].type == type)
            return (s_rules [i].roles & bit) != 0;
    return false;
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
