/*  kd_chaos: `kudus chaos`, a seeded fault schedule against a local
    cluster, and the check of its history (docs/chaos.md).

    It runs `kudus local` (replicated shards, restarts on failure, every
    service writing its history into the output directory), fires the
    faults of a kd_fault_plan at their times, samples every service's
    descriptors and RSS, and when the run is over feeds all of it to
    kd_history_check.  A failing seed prints the command that reproduces
    it.  `kudus chaos check DIR` checks a finished run's directory again.
*/
#ifndef KD_CHAOS_H_INCLUDED
#define KD_CHAOS_H_INCLUDED

//  kudus chaos [--setting VALUE ...] [-- kudus local flags]
int
    kd_chaos_main (int argc, char **argv);

#endif
