/* sup_pkgs: packages (pip.install, ctx.create `packages`). */
#ifndef CTXD_SUP_PKGS_H
#define CTXD_SUP_PKGS_H

#include "proto.h"
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#define SUP_PKGS_MAX 64       /* requirements per request */
#define SUP_PKGS_REQ_MAX 200  /* bytes per requirement */
#define SUP_PKGS_JOBS_MAX 256 /* pip runs queued or running, daemon-wide */
/* A context's package directory: symbolic links into the install cache,
 * first on the worker's sys.path (CTXD_SITE). Shared by ctx.fork copies. */
typedef struct sup_site {
    char *path;
    unsigned refs;
} sup_site;
/* The outcome of installing a list of requirements. */
typedef struct sup_pkgs_result {
    const char *error; /* NULL when every requirement is installed */
    const char *code;  /* the err code with error: "install" or "busy" */
    char **reqs;       /* normalised requirements */
    size_t n;
    const bool *cached; /* per requirement: found in the cache, pip not run */
} sup_pkgs_result;
typedef void (*sup_pkgs_cb)(void *arg, const sup_pkgs_result *res);
/* Checks the configuration and makes the cache directories; -1 after
 * printing the problem. */
int sup_pkgs_init(void);
bool sup_pkgs_enabled(void);
/* The install cache of the configured source (readable by confined
 * workers: their package links point there); NULL when disabled. */
const char *sup_pkgs_source_dir(void);
/* Reads a `packages` array: normalised, de-duplicated requirement strings
 * (*reqs NULL-terminated, freed with sup_pkgs_free_reqs); -1 with err set
 * ("bad_field" naming field) on a bad list. */
int sup_pkgs_parse(const proto_val *list, const char *field, char ***reqs, size_t *n,
                   proto_error *err);
void sup_pkgs_free_reqs(char **reqs, size_t n);
/* Installs what is not cached yet (pip as a child of the supervisor, at
 * most two at a time) and calls cb once everything is done (maybe at once). */
void sup_pkgs_fetch(char **reqs, size_t n, sup_pkgs_cb cb, void *arg);
/* Makes reqs visible in a site: links their cached trees into it. */
int sup_pkgs_link(sup_site *site, char **reqs, size_t n, proto_error *err);
/* `packages: [{name, cached}]` (key and value) for an `ok` reply. */
void sup_pkgs_put_result(proto_buf *b, const sup_pkgs_result *res);
sup_site *sup_pkgs_site_new(void); /* NULL when disabled or on failure (logged) */
sup_site *sup_pkgs_site_ref(sup_site *s);
void sup_pkgs_site_unref(sup_site *s);
/* A child about to be reaped (a zombie): a pip run's group is killed. */
void sup_pkgs_before_reap(pid_t pid);
/* A reaped child: true when it was a pip run. */
bool sup_pkgs_on_exit(pid_t pid, int status);
/* Kills pip runs past their time; returns the next deadline (0 none). */
double sup_pkgs_tick(double now);
/* Stops every pip run; their requests get `err install`. */
void sup_pkgs_shutdown(void);

#endif
