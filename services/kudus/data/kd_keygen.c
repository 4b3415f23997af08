/*  kd_keygen: `kudus keygen DIR` writes the CURVE keys of a cluster.

    DIR gets a server certificate and a client certificate per role (public
    file plus a 0600 "_secret" file each), and allowed/, the public
    certificates of the clients the servers admit.  The layout is described
    in common/net/kd_curve.h.
*/
#include "kd_cli.h"

int
kd_keygen_main (int argc, char **argv)
{
    if (argc == 2 && (!strcmp (argv [1], "--help") || !strcmp (argv [1], "-h"))) {
        printf ("usage: kudus keygen DIR\n\n"
                "Writes DIR/%s[_secret] (servers), a key pair per client role:\n"
                "DIR/%s[_secret] (workers), DIR/{scheduler,shard,monitor,observer,evaluator}.cert[_secret],\n"
                "and DIR/%s/ (the clients the servers admit, each with its role).  Point\n"
                "the setting keys-dir (KUDUS_KEYS_DIR) at DIR and set curve (KUDUS_CURVE=1).\n",
                KD_CURVE_SERVER_CERT, KD_CURVE_CLIENT_CERT, KD_CURVE_ALLOWED_DIR);
        return 0;
    }
    if (argc != 2 || !strncmp (argv [1], "--", 2)) {
        fprintf (stderr, "kudus keygen: usage: kudus keygen DIR\n");
        return 2;
    }
    char err [512];
    if (kd_curve_keygen (argv [1], err, sizeof err)) {
        fprintf (stderr, "kudus keygen: %s\n", err);
        return 1;
    }
    printf ("kudus keygen: wrote %s/%s, a key pair per role (%s for workers; scheduler, shard, monitor, "
            "observer and evaluator .cert; secret files mode 0600) and %s/%s/\n",
            argv [1], KD_CURVE_SERVER_CERT, KD_CURVE_CLIENT_CERT, argv [1], KD_CURVE_ALLOWED_DIR);
    return 0;
}
