/*  kudus: the command-line tool.  Dispatches to a subcommand.
*/
#include "kd_cli.h"
#include "kd_aggregator.h"
#include "kd_chaos.h"

//  kudus bench: services/kudus/bench/kd_bench.c.
int
    kd_bench_main (int argc, char **argv);

static void
s_usage (FILE *out)
{
    fprintf (out,
        "usage: kudus COMMAND [--setting VALUE ...]\n\n"
        "commands:\n"
        "  local           run a local cluster on loopback and train\n"
        "  chaos           a seeded fault schedule against a local cluster, checked\n"
        "  run -- COMMAND  a local cluster whose workers are copies of COMMAND (torchrun's habit)\n"
        "  tail ENDPOINT   follow the monitor's stream (default tcp://127.0.0.1:7002)\n"
        "  dashboard       a live web page of the monitor's stream\n"
        "  experiment FILE run a scenario file (bench/scenarios/*.json), resumably\n"
        "  keygen DIR      write CURVE keys for --curve into DIR\n"
        "  gen-ctr OUT     write a synthetic click log (LIBSVM) with a planted model\n"
        "  export          a cluster's or a checkpoint's model to .pt (state_dict) or .npz\n"
        "  linkd           link delay in user space (started by local --netns)\n"
        "  aggregate       a barrier-tree node: workers connect here, not to the scheduler\n"
        "  bench pushpull|barrier|compute|sparse\n"
        "                  benchmarks that print ratios (docs/performance.md)\n"
        "  version         print the version\n\n"
        "'kudus COMMAND --help' lists a command's settings.\n");
}

int
main (int argc, char **argv)
{
    if (argc < 2) {
        s_usage (stderr);
        return 2;
    }
    const char *cmd = argv [1];
    if (!strcmp (cmd, "local"))
        return kd_local_main (argc - 1, argv + 1);
    if (!strcmp (cmd, "chaos"))
        return kd_chaos_main (argc - 1, argv + 1);
    if (!strcmp (cmd, "run"))
        return kd_run_main (argc - 1, argv + 1);
    if (!strcmp (cmd, "experiment"))
        return kd_experiment_main (argc - 1, argv + 1);
    if (!strcmp (cmd, "tail"))
        return kd_tail_main (argc - 1, argv + 1);
    if (!strcmp (cmd, "dashboard"))
        return kd_dashboard_main (argc - 1, argv + 1);
    if (!strcmp (cmd, "linkd"))
        return kd_linkd_main (argc - 1, argv + 1);
    if (!strcmp (cmd, "aggregate"))
        return kd_aggregator_main (argc - 1, argv + 1);
    if (!strcmp (cmd, "bench"))
        return kd_bench_main (argc - 1, argv + 1);
    if (!strcmp (cmd, "keygen"))
        return kd_keygen_main (argc - 1, argv + 1);
    if (!strcmp (cmd, "gen-ctr"))
        return kd_genctr_main (argc - 1, argv + 1);
    if (!strcmp (cmd, "export"))
        return kd_export_main (argc - 1, argv + 1);
    if (!strcmp (cmd, "version") || !strcmp (cmd, "--version")) {
        int major, minor, patch;
        zmq_version (&major, &minor, &patch);
        printf ("kudus %s (libzmq %d.%d.%d, protocol %d)\n", KUDUS_VERSION_STRING,
                major, minor, patch, KD_PROTOCOL_VERSION);
        return 0;
    }
    if (!strcmp (cmd, "help") || !strcmp (cmd, "--help") || !strcmp (cmd, "-h")) {
        s_usage (stdout);
        return 0;
    }
    fprintf (stderr, "kudus: unknown command '%s'\n\n", cmd);
    s_usage (stderr);
    return 2;
}
