/*  kudus-monitor: wires the config to the monitor loop in kd_monitor.c.
*/
#include "kd_monitor.h"
#include "kd_service.h"

int
main (int argc, char **argv)
{
    return kd_service_main (argc, argv, KD_SVC_MONITOR, "kudus-monitor", "monitor",
                            kd_monitor_run);
}
