/* ctx keygen: makes a CurveZMQ client key pair for tcp:// endpoints (no
 * daemon needed). */
#include "ctx.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

/* ctx keygen: a client key pair for CurveZMQ; needs no daemon. */
int ctx_cmd_keygen(ctx_cli *cli, const ctx_cmd *cmd, int argc, char **argv)
{
    static const struct option longopts[] = {CTX_COMMON_LONGOPTS, {0}};
    int opt;
    while ((opt = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
        int r = ctx_common_opt(cli, cmd, opt, argv);
        if (r != CONTINUE)
            return r;
    }
    int r = ctx_positionals(cmd, argc, argv, 0, 1);
    if (r != CONTINUE)
        return r;
    char path[4096];
    if (optind < argc) {
        snprintf(path, sizeof path, "%s", argv[optind]);
    } else {
        const char *home = getenv("HOME");
        snprintf(path, sizeof path, "%s/.config", home ? home : "");
        mkdir(path, 0700);
        strncat(path, "/ctxd", sizeof path - strlen(path) - 1);
        mkdir(path, 0700);
        strncat(path, "/client.key", sizeof path - strlen(path) - 1);
    }
    char public[41], secret[41];
    if (zmq_curve_keypair(public, secret) != 0) {
        fprintf(stderr, "ctx: this libzmq has no CurveZMQ support\n");
        return EX_UNREACHABLE;
    }
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) {
        fprintf(stderr, "ctx: cannot create %s: %s\n", path, strerror(errno));
        return EX_USAGE;
    }
    char text[160];
    int n =
        snprintf(text, sizeof text, "# ctxd client secret key (public: %s)\n%s\n", public, secret);
    bool ok = write(fd, text, (size_t)n) == n;
    close(fd);
    if (!ok) {
        fprintf(stderr, "ctx: cannot write %s\n", path);
        return EX_USAGE;
    }
    if (cli->json)
        printf("{\"t\":\"ok\",\"public\":\"%s\",\"secret_file\":\"%s\"}\n", public, path);
    else
        printf("%s\n", public);
    if (!cli->json)
        fprintf(stderr,
                "ctx: secret key written to %s; add the public key above to the "
                "daemon's authorized_keys\n",
                path);
    return EX_OK;
}
