/* sbx_schema: the worker's policy, one struct and the one table of its
 * fields, by which the supervisor writes the text of CTXD_SANDBOX and the
 * worker parses it (one "key=value" a line, list items apart by '\x1f').
 * A field added to the table exists on both sides. No Python: part of
 * ctxd_confine, which the supervisor links. */
#ifndef CTXD_SBX_SCHEMA_H
#define CTXD_SBX_SCHEMA_H

#include <stdbool.h>
#include <stddef.h>

typedef enum { SBX_TIER_UNSAFE, SBX_TIER_STATIC, SBX_TIER_LOCAL, SBX_TIER_SANDBOX } sbx_tier;

/* A list that was given (set), possibly empty: n items, then NULL. */
typedef struct sbx_list {
    bool set;
    size_t n;
    char **v;
} sbx_list;

/* The worker's own identity under a root daemon (sup_ident.c). */
typedef struct sbx_ident {
    unsigned uid, gid, group; /* group: the workers' shared group */
} sbx_ident;

/* The worker's policy: what the supervisor asks the sandbox to enforce.
 * A number 0, a list not set or a NULL string is not written: the tier's
 * own default holds. */
typedef struct sbx_spec {
    sbx_tier tier;
    bool no_network, no_subprocess;
    unsigned long long memory_bytes, max_processes, file_size_bytes;
    unsigned long long disk_bytes; /* a sandbox's /tmp is at most this too */
    double cpu_seconds;            /* per run */
    sbx_list imports, write_roots;
    char *tmpdir; /* TMPDIR of a local context writing only its directory */
    sbx_list read_roots;
    bool has_uid; /* false: the worker keeps the daemon's uid */
    sbx_ident ident;
} sbx_spec;

/* The smallest values of the limits (ctx.create refuses less). */
#define SBX_MEMORY_MIN (16ULL << 20)
#define SBX_DISK_MIN (1ULL << 20)
/* What parts a list's items in the text. */
#define SBX_LIST_SEP '\x1f'
/* Items of a list: a policy's 1024 and one the supervisor adds. */
#define SBX_LIST_MAX 1025

typedef enum {
    SBX_FIELD_TIER,    /* sbx_tier, by its name; always written */
    SBX_FIELD_DENY,    /* bool: true written "0" (the tier's allowance taken away) */
    SBX_FIELD_COUNT,   /* unsigned long long in [min, max]; 0 not written */
    SBX_FIELD_SECONDS, /* double above 0 and at most max; 0 not written */
    SBX_FIELD_LIST,    /* sbx_list of at most max non-empty items */
    SBX_FIELD_PATH,    /* char *, absolute */
    SBX_FIELD_ID,      /* unsigned in [min, max] of ident, written with has_uid */
} sbx_field_type;

typedef struct sbx_field {
    const char *key;
    sbx_field_type type;
    size_t offset; /* into sbx_spec */
    unsigned long long min, max;
} sbx_field;

/* Every field, in the order of the text. */
extern const sbx_field sbx_schema[];
extern const size_t sbx_schema_n;

/* The text of s (without "CTXD_SANDBOX="), new; NULL when a value cannot
 * be written so that sbx_spec_parse gives it back (out of its limits, an
 * empty item, a newline or '\x1f' in a value, a relative path). */
char *sbx_spec_text(const sbx_spec *s);
/* Fills s from text: 0, or -1 with why filled and s empty when the text
 * is not one sbx_spec_text could have written (an unknown or repeated
 * key, a value out of its limits, no tier). sbx_spec_free releases it. */
int sbx_spec_parse(sbx_spec *s, const char *text, char *why, size_t n);
void sbx_spec_free(sbx_spec *s);

#endif
