/*  kudus-worker: wires the config to the worker loop in kd_worker.c.
*/
#include "kd_worker.h"
#include "kd_service.h"

int
main (int argc, char **argv)
{
    return kd_service_main (argc, argv, KD_SVC_WORKER, "kudus-worker", "worker",
                            kd_worker_run);
}
