/*  kudus export: a cluster's model (or a shard checkpoint directory's) to
    a .pt file that torch.load + load_state_dict reads, or to .npz.

    The writer is the Python package's (`python3 -m kudus export`, in
    python/kudus/__main__.py): a .pt file is torch's own format, and only
    torch writes it faithfully.  This command finds that package and this
    build's libkudus beside the binary, so `kudus export` works from a
    build tree with nothing set, checks the settings against the config
    table (flags, KUDUS_* variables, --help), and runs it with them.
*/
#include "kd_cli.h"
#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <unistd.h>

//  True when dir holds the kudus package.
static bool
s_has_package (const char *dir)
{
    char path [PATH_MAX];
    if (snprintf (path, sizeof path, "%s/kudus/__main__.py", dir) >= (int) sizeof path)
        return false;
    return access (path, R_OK) == 0;
}

//  Put dir in front of a path-list variable.
static void
s_prepend (const char *name, const char *dir)
{
    const char *old = getenv (name);
    if (!old || !*old) {
        setenv (name, dir, 1);
        return;
    }
    size_t size = strlen (dir) + strlen (old) + 2;
    char *both = (char *) malloc (size);
    assert (both);
    snprintf (both, size, "%s:%s", dir, old);
    setenv (name, both, 1);
    free (both);
}

//  True when argv names the flag (--name VALUE or --name=VALUE).
static bool
s_flag_given (int argc, char **argv, const char *flag)
{
    size_t len = strlen (flag);
    for (int i = 1; i < argc; i++)
        if (!strncmp (argv [i], flag, len) && (argv [i][len] == 0 || argv [i][len] == '='))
            return true;
    return false;
}

int
kd_export_main (int argc, char **argv)
{
    //  The binary's folder: build/ in a build tree, bin/ when installed.
    //  Without it, nothing is guessed: the package and the library are
    //  whatever python3 finds.
    char exe [PATH_MAX], bindir [PATH_MAX] = "";
    ssize_t n = readlink ("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe [n] = 0;
        snprintf (bindir, sizeof bindir, "%.*s", (int) sizeof bindir - 1, dirname (exe));
    }
    //  The package: python/ next to the build folder, else the source
    //  tree this binary was built from, else whatever python3 imports.
    char dir [PATH_MAX];
    if (*bindir && snprintf (dir, sizeof dir, "%s/../python", bindir) < (int) sizeof dir && s_has_package (dir))
        s_prepend ("PYTHONPATH", dir);
    else
    if (s_has_package (KUDUS_PYTHON_DIR))
        s_prepend ("PYTHONPATH", KUDUS_PYTHON_DIR);
    //  The library: this build's, unless the user named one.
    char lib [PATH_MAX];
    if (*bindir && snprintf (lib, sizeof lib, "%s/libkudus.so", bindir) < (int) sizeof lib
    &&  !getenv ("KUDUS_LIB") && access (lib, R_OK) == 0)
        setenv ("KUDUS_LIB", lib, 1);

    //  The settings are the config table's (flags, KUDUS_* variables,
    //  --help); the writer gets them as its own flags.
    int rc = 0;
    kd_config_t *c = kd_config_from_args (KD_SVC_EXPORT, "kudus export", "kudus export", argc, argv, &rc);
    if (!c)
        return rc;
    const char *scheduler = kd_config_str (c, "scheduler");
    const char *ckpt = kd_config_str (c, "checkpoint-dir");
    const char *out = kd_config_str (c, "out");
    //  Compose's containers and `kudus run`'s copies have KUDUS_SCHEDULER
    //  (a shard's also KUDUS_CHECKPOINT_DIR): a source named by a flag
    //  wins over one from the environment.
    bool flag_sched = s_flag_given (argc, argv, "--scheduler");
    bool flag_ckpt = s_flag_given (argc, argv, "--checkpoint-dir");
    if (*scheduler && *ckpt && flag_sched != flag_ckpt) {
        if (flag_sched)
            ckpt = "";
        else
            scheduler = "";
    }
    if (!*scheduler == !*ckpt || !*out || kd_config_positional_count (c) > 0) {
        fprintf (stderr, "kudus export: give --out FILE and one of --scheduler ENDPOINT and "
                 "--checkpoint-dir DIR (see --help; KUDUS_SCHEDULER and KUDUS_CHECKPOINT_DIR "
                 "count as given)\n");
        kd_config_destroy (&c);
        return 2;
    }
    const char *python = getenv ("KUDUS_PYTHON");
    if (!python || !*python)
        python = "python3";
    char timeout [32];
    snprintf (timeout, sizeof timeout, "%g", kd_config_double (c, "timeout"));
    const char *args [16];
    int k = 0;
    args [k++] = python;
    args [k++] = "-m";
    args [k++] = "kudus";
    args [k++] = "export";
    args [k++] = *scheduler ? "--scheduler" : "--checkpoint-dir";
    args [k++] = *scheduler ? scheduler : ckpt;
    args [k++] = "--out";
    args [k++] = out;
    if (*kd_config_str (c, "like")) {
        args [k++] = "--like";
        args [k++] = kd_config_str (c, "like");
    }
    args [k++] = "--timeout";
    args [k++] = timeout;
    if (*kd_config_str (c, "curve-keys")) {
        args [k++] = "--curve-keys";
        args [k++] = kd_config_str (c, "curve-keys");
    }
    else
    if (kd_config_bool (c, "curve")) {
        args [k++] = "--curve-keys";
        args [k++] = kd_config_str (c, "keys-dir");
    }
    args [k] = NULL;
    execvp (python, (char *const *) args);
    fprintf (stderr, "kudus export: cannot run %s: %s (the exporter is the Python package's: "
             "install python3 and python3-torch, or set KUDUS_PYTHON)\n", python, strerror (errno));
    kd_config_destroy (&c);
    return 127;
}
