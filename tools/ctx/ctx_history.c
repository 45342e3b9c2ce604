/* ctx repl's history file: $CTX_HISTORY, else ~/.ctx_history ("" for
 * none), one block a line (ctx_edit_history_encode), appended as each block
 * is entered and trimmed to its last HISTORY_KEEP entries when it grows
 * past twice that. */
#include "ctx.h"
#include "mem.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define HISTORY_KEEP 1000

/* Rewrites the history file with its last HISTORY_KEEP lines once it has
 * more than twice that many, so it stays bounded. */
static void history_trim(const char *path)
{
    struct stat st;
    if (stat(path, &st) < 0 || st.st_size < 64 * 1024)
        return;
    FILE *in = fopen(path, "r");
    if (!in)
        return;
    size_t lines = 0;
    int ch;
    while ((ch = fgetc(in)) != EOF)
        lines += ch == '\n';
    if (lines <= 2 * HISTORY_KEEP) {
        fclose(in);
        return;
    }
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    FILE *out = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (!out) {
        if (fd >= 0)
            close(fd);
        fclose(in);
        return;
    }
    rewind(in);
    char *line = NULL;
    size_t cap = 0, skip = lines - HISTORY_KEEP, i = 0;
    ssize_t n;
    while ((n = getline(&line, &cap, in)) >= 0)
        if (i++ >= skip)
            fwrite(line, 1, (size_t)n, out);
    free(line);
    fclose(in);
    if (fclose(out) == 0)
        rename(tmp, path);
    else
        unlink(tmp);
}

int ctx_history_open(ctx_edit *ed)
{
    const char *path = getenv("CTX_HISTORY");
    char buf[4096];
    if (!path) {
        const char *home = getenv("HOME");
        if (!home || !*home)
            return -1;
        snprintf(buf, sizeof buf, "%s/.ctx_history", home);
        path = buf;
    }
    if (!*path)
        return -1;
    history_trim(path);
    ctx_edit_history_load(ed, path);
    return open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
}

void ctx_history_add(ctx_edit *ed, int fd, const char *block)
{
    if (!ed)
        return;
    size_t n = strlen(block); /* without the empty line that ended it */
    while (n > 0 && (block[n - 1] == '\n' || block[n - 1] == ' ' || block[n - 1] == '\t'))
        n--;
    if (n == 0)
        return;
    char *line = mem_alloc(n + 1);
    memcpy(line, block, n);
    line[n] = '\0';
    ctx_edit_history_add(ed, line);
    if (fd >= 0) {
        char *buf = ctx_edit_history_encode(line);
        ssize_t w = write(fd, buf, strlen(buf));
        (void)w;
        free(buf);
    }
    free(line);
}
