/*  kudus-scheduler: wires the config to the scheduler loop in kd_scheduler.c.
*/
#include "kd_scheduler.h"
#include "kd_service.h"

int
main (int argc, char **argv)
{
    return kd_service_main (argc, argv, KD_SVC_SCHEDULER, "kudus-scheduler", "scheduler",
                            kd_scheduler_run);
}
