/*  kudus-shard: wires the config to the shard loop in kd_shard.c.
*/
#include "kd_shard.h"
#include "kd_service.h"

int
main (int argc, char **argv)
{
    return kd_service_main (argc, argv, KD_SVC_SHARD, "kudus-shard", "shard",
                            kd_shard_run);
}
