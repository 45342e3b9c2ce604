/* zap_key (daemon/zap): the key file rule both daemons read their keys by.
 * What must hold: the first line that, past leading white space, is no '#'
 * comment and begins with 40 characters of valid Z85 is the key (lines
 * before it that do not decode are passed over); a file with none, a file
 * past the cap, and a file that cannot be opened are refused with a reason;
 * the descriptor is read from where it stands and left open. An option
 * pair takes a key or a file, never guessing which. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

#include "zap_key.h"

#include "unit_check.h"

static char dir[] = "/tmp/test_zap_key.XXXXXX";

/* A file of the given text in dir; its path. */
static const char *file_of(const char *name, const char *text, size_t n)
{
    static char path[256];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    if (!f || fwrite(text, 1, n, f) != n || fclose(f) != 0) {
        perror(path);
        exit(2);
    }
    return path;
}

static int read_text(const char *text, char key[41], char *why, size_t whylen)
{
    return zap_key_read(file_of("k", text, strlen(text)), key, why, whylen);
}

int main(void)
{
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 2;
    }
    char pub[41], sec[41], key[41], why[128], text[256];
    if (zmq_curve_keypair(pub, sec) != 0) {
        fprintf(stderr, "this libzmq has no CURVE: skipped\n");
        return 0;
    }

    /* The daemons' own files: a comment, then the key. */
    snprintf(text, sizeof text, "# ctxd server secret key (keep private)\n%s\n", sec);
    CHECK(read_text(text, key, why, sizeof why) == 0 && strcmp(key, sec) == 0);
    /* server.pub: the key alone, no newline at the end. */
    CHECK(read_text(pub, key, why, sizeof why) == 0 && strcmp(key, pub) == 0);
    /* White space before it, blank lines, a line that does not decode. */
    snprintf(text, sizeof text, "\n   \n  %s\n%s\n",
             "not a key: this line holds spaces and is long enough", pub);
    CHECK(read_text(text, key, why, sizeof why) == 0 && strcmp(key, pub) == 0);
    snprintf(text, sizeof text, "\t %s trailing words\n", sec);
    CHECK(read_text(text, key, why, sizeof why) == 0 && strcmp(key, sec) == 0);
    /* A commented-out key is no key; 39 characters are none either. */
    snprintf(text, sizeof text, "#%s\n  # %s\n%.39s\n", pub, pub, pub);
    why[0] = '\0';
    CHECK(read_text(text, key, why, sizeof why) < 0 && strstr(why, "no Z85 key"));
    CHECK(read_text("", key, why, sizeof why) < 0);

    /* Past the cap: refused, whatever it holds. */
    size_t big = ZAP_KEY_FILE_MAX + 1;
    char *huge = malloc(big);
    memset(huge, '\n', big);
    memcpy(huge, pub, 40);
    why[0] = '\0';
    CHECK(zap_key_read(file_of("big", huge, big), key, why, sizeof why) < 0 &&
          strstr(why, "more than"));
    /* At the cap: read. */
    CHECK(zap_key_read(file_of("cap", huge, big - 1), key, why, sizeof why) == 0 &&
          strcmp(key, pub) == 0);
    free(huge);

    /* By descriptor: read from where it stands, left open. */
    snprintf(text, sizeof text, "%s\n%s\n", pub, sec);
    int fd = open(file_of("fd", text, strlen(text)), O_RDONLY);
    CHECK(lseek(fd, 41, SEEK_SET) == 41);
    CHECK(zap_key_read_fd(fd, key, why, sizeof why) == 0 && strcmp(key, sec) == 0);
    CHECK(fcntl(fd, F_GETFD) >= 0);
    close(fd);

    /* No such file. */
    char missing[300];
    snprintf(missing, sizeof missing, "%s/none", dir);
    why[0] = '\0';
    CHECK(zap_key_read(missing, key, why, sizeof why) < 0 && strstr(why, "cannot be opened"));

    /* An option pair (--X KEY / --X-file FILE): a key file at a path of 40
     * characters is a file, the same path given as the key is refused with
     * both spellings named, and so are a non-key and both given at once. */
    char opt_why[512];
    char path40[80];
    snprintf(text, sizeof text, "%s\n", pub);
    snprintf(path40, sizeof path40, "%s/%.*s", dir, (int)(40 - strlen(dir) - 1),
             "kkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkk");
    const char *f40 = file_of(path40 + strlen(dir) + 1, text, strlen(text));
    CHECK(strlen(f40) == 40);
    CHECK(zap_key_option("--host-key", NULL, f40, key, opt_why, sizeof opt_why) == 1 &&
          strcmp(key, pub) == 0);
    CHECK(zap_key_option("--host-key", f40, NULL, key, opt_why, sizeof opt_why) < 0 &&
          strstr(opt_why, "--host-key:") && strstr(opt_why, "--host-key-file"));
    CHECK(zap_key_option("--host-key", "short", NULL, key, opt_why, sizeof opt_why) < 0 &&
          strstr(opt_why, "not a Z85 key"));
    CHECK(zap_key_option("--host-key", pub, f40, key, opt_why, sizeof opt_why) < 0 &&
          strstr(opt_why, "one of them"));
    CHECK(zap_key_option("--host-key", pub, NULL, key, opt_why, sizeof opt_why) == 1 &&
          strcmp(key, pub) == 0);
    CHECK(zap_key_option("--host-key", NULL, NULL, key, opt_why, sizeof opt_why) == 0);
    CHECK(zap_key_option("--host-key", NULL, missing, key, opt_why, sizeof opt_why) < 0 &&
          strstr(opt_why, "--host-key-file"));
    unlink(f40);

    const char *names[] = {"k", "big", "cap", "fd"};
    for (size_t i = 0; i < 4; i++) {
        char p[300];
        snprintf(p, sizeof p, "%s/%s", dir, names[i]);
        unlink(p);
    }
    rmdir(dir);
    return failures ? 1 : 0;
}
