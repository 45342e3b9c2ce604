/* ctx kernel install: installs the Jupyter kernelspec 'ctxd' with the
 * kernel's own installer, pointing at the Python package and the daemon
 * that belong to this ctx. */
#include "ctx.h"
#include "mem.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ctx's own directory (from /proc/self/exe), to find the daemon and the
 * Python package installed or built beside it; "" when unknown. */
static void exe_dir(char *buf, size_t n)
{
    ssize_t len = readlink("/proc/self/exe", buf, n - 1);
    buf[len > 0 ? len : 0] = '\0';
    char *slash = strrchr(buf, '/');
    if (slash)
        *slash = '\0';
    else
        buf[0] = '\0';
}

/* The first of the candidate paths (dir + suffix) that exists, into out. */
static bool first_existing(char *out, size_t n, const char *dir, const char *const *suffixes,
                           size_t nsuffixes)
{
    for (size_t i = 0; i < nsuffixes; i++) {
        if (suffixes[i][0] == '/')
            snprintf(out, n, "%s", suffixes[i]);
        else
            snprintf(out, n, "%s/%s", dir, suffixes[i]);
        if (access(out, F_OK) == 0)
            return true;
    }
    return false;
}

/* ctx kernel install: runs the kernel's installer with the package and the
 * daemon that belong to this ctx (installed tree, else the build tree). */
int ctx_cmd_kernel(ctx_cli *cli, const ctx_cmd *cmd, int argc, char **argv)
{
    (void)cli;
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        ctx_print_cmd_help(cmd, argc < 2 ? stderr : stdout);
        return argc < 2 ? EX_USAGE : EX_OK;
    }
    if (strcmp(argv[1], "install") != 0)
        return ctx_usage(cmd, "unknown kernel action '%s' (only: install)", argv[1]);
    char dir[4096], pkg[4200], daemon[4200];
    exe_dir(dir, sizeof dir);
    static const char *const pkgs[] = {"../" CTX_PYTHON_DIR, CTX_SOURCE_PYTHON_DIR};
    static const char *const daemons[] = {"ctxd", "../daemon/ctxd"};
    if (!first_existing(pkg, sizeof pkg, dir, pkgs, 2)) {
        fprintf(stderr, "ctx: the ctxd Python package is not installed beside %s\n", dir);
        return EX_USAGE;
    }
    bool have_daemon = first_existing(daemon, sizeof daemon, dir, daemons, 2);
    const char *old = getenv("PYTHONPATH");
    char *path = mem_alloc(strlen(pkg) + (old ? strlen(old) : 0) + 2);
    sprintf(path, "%s%s%s", pkg, old && *old ? ":" : "", old && *old ? old : "");
    setenv("PYTHONPATH", path, 1);
    free(path);
    char **args = mem_calloc((size_t)argc + 8, sizeof *args);
    size_t n = 0;
    args[n++] = (char *)CTX_KERNEL_PYTHON;
    args[n++] = "-m";
    args[n++] = "ctxd.kernel";
    args[n++] = "install";
    if (have_daemon) {
        args[n++] = "--ctxd";
        args[n++] = daemon;
    }
    for (int i = 2; i < argc; i++)
        args[n++] = argv[i];
    args[n] = NULL;
    fflush(stdout);
    execv(CTX_KERNEL_PYTHON, args);
    fprintf(stderr, "ctx: cannot run %s: %s\n", CTX_KERNEL_PYTHON, strerror(errno));
    free(args);
    return EX_UNREACHABLE;
}
