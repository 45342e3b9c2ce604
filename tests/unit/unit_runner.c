/* unit_runner (sup_unit): runs the supervisor unit tests of test_list.h,
 * each in a child process of its own, so that one test's crash, hang or
 * leaked state cannot hide or change another's result. `sup_unit` runs
 * them all, `sup_unit NAME...` the ones named; one line per test, exit 1
 * when any failed. */
#include "test_list.h"

#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define DECLARE(name) int unit_##name(void);
SUP_UNIT_TESTS(DECLARE)

typedef struct unit_test {
    const char *name;
    int (*fn)(void);
} unit_test;

#define ENTRY(name) {#name, unit_##name},
static const unit_test tests[] = {SUP_UNIT_TESTS(ENTRY)};
#define NTESTS (sizeof tests / sizeof tests[0])

/* Runs t in a child process; true when it returned 0 and exited so. The
 * line printed says how it ended: ok, its failed checks, or its signal. */
static bool run_one(const unit_test *t)
{
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        perror("fork");
        exit(2);
    }
    if (pid == 0) {
        alarm(50); /* a hung test ends as SIGALRM, not as a hung runner */
        int failed = t->fn();
        fflush(stdout);
        _exit(failed ? 1 : 0);
    }
    int status;
    while (waitpid(pid, &status, 0) < 0)
        ;
    bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    if (ok)
        printf("ok      %s\n", t->name);
    else if (WIFSIGNALED(status))
        printf("FAILED  %s (signal %d: %s)\n", t->name, WTERMSIG(status),
               strsignal(WTERMSIG(status)));
    else
        printf("FAILED  %s (exit %d)\n", t->name, WEXITSTATUS(status));
    fflush(stdout);
    return ok;
}

int main(int argc, char **argv)
{
    signal(SIGPIPE, SIG_IGN);
    int failed = 0, ran = 0;
    if (argc < 2) {
        for (size_t i = 0; i < NTESTS; i++, ran++)
            failed += !run_one(&tests[i]);
    } else {
        for (int a = 1; a < argc; a++) {
            size_t i = 0;
            while (i < NTESTS && strcmp(tests[i].name, argv[a]) != 0)
                i++;
            if (i == NTESTS) {
                fprintf(stderr, "sup_unit: no test named %s\n", argv[a]);
                return 2;
            }
            failed += !run_one(&tests[i]);
            ran++;
        }
    }
    printf("%d of %d passed\n", ran - failed, ran);
    return failed ? 1 : 0;
}
