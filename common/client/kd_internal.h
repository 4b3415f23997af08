/*  kd_internal.h: umbrella header of the classes the Kudus services share.

    Internal: not installed, and no API promise.  Programs outside this tree
    use the public <kudus/kudus.h>.  It sits in common/client/, the top layer
    of common/, because it pulls in every layer below (base, wire, core, net)
    and the client's public API; only the client, the services, bench/ and
    the tests include it, never a file of a lower layer.
*/
#ifndef KD_INTERNAL_H_INCLUDED
#define KD_INTERNAL_H_INCLUDED

#include <czmq.h>
#include "kudus/kudus.h"
#include "kd_log.h"
#include "kd_util.h"
#include "kd_config.h"
#include "kd_history.h"
#include "kd_msg.h"
#include "kd_range.h"
#include "kd_dataset.h"
#include "kd_model.h"
#include "kd_controller.h"
#include "kd_peer.h"
#include "kd_curve.h"
#include "kd_service.h"
#include "kd_speed.h"
#include "kd_optimizer.h"
#include "kd_checkpoint.h"

//  Internal to the services: a client run inside an actor (kudus-worker as
//  a kd_service) ends its waits as if interrupted once "$TERM" is queued on
//  the actor's pipe.  The client does not read the pipe.
void
    kd_client_set_cancel (kd_client_t *self, zsock_t *pipe);

#endif
