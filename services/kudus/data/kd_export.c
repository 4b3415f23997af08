/*  kudus export: a cluster's model (or a shard checkpoint directory's) to
    a .pt file that torch.load + load_state_dict reads, or to .npz.

    The writer is the Python package's (`python3 -m kudus export`, in
    python/kudus/__main__.py): a .pt file is torch's own format, and only
    torch writes it faithfully.  This command finds that package and this
    build's libkudus beside the binary, so `kudus export` works from a
    build tree with nothing set, and runs it with the same arguments.
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

    const char *python = getenv ("KUDUS_PYTHON");
    if (!python || !*python)
        python = "python3";
    char **args = (char **) calloc ((size_t) argc + 4, sizeof (char *));
    assert (args);
    int k = 0;
    args [k++] = (char *) python;
    args [k++] = (char *) "-m";
    args [k++] = (char *) "kudus";
    args [k++] = (char *) "export";
    for (int i = 1; i < argc; i++)
        args [k++] = argv [i];
    args [k] = NULL;
    execvp (python, args);
    fprintf (stderr, "kudus export: cannot run %s: %s (the exporter is the Python package's: "
             "install python3 and python3-torch, or set KUDUS_PYTHON)\n", python, strerror (errno));
    free (args);
    return 127;
}
