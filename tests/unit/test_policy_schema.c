/* sbx_schema (daemon/sandbox): the worker's policy as CTXD_SANDBOX's text.
 * What must hold: every field of the table, given a value, is written and
 * parsed back to the same value; a policy with nothing set is the tier
 * alone; the text keeps its form (one "key=value" a line, in the table's
 * order); what the writer cannot write back it refuses; and the parser
 * refuses every text the writer could not have written. */
#include <float.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sbx_schema.h"
#include "unit_check.h"

#define AT(s, f, type) ((type *)((char *)(s) + (f)->offset))

static char *items_a[] = {"numpy", "os.path", NULL};
static char *items_b[] = {"/srv/data", NULL};
static char *items_c[] = {"/opt/one", "/opt/two", "/opt/three", NULL};

/* Gives field f of s a value it can hold other than its default, one that
 * differs with k (the field's place in the table). */
static void give(sbx_spec *s, const sbx_field *f, size_t k)
{
    switch (f->type) {
    case SBX_FIELD_TIER:
        *AT(s, f, sbx_tier) = SBX_TIER_LOCAL;
        break;
    case SBX_FIELD_DENY:
        *AT(s, f, bool) = true;
        break;
    case SBX_FIELD_COUNT:
        *AT(s, f, unsigned long long) = f->min + 1000 * k + 7;
        break;
    case SBX_FIELD_SECONDS:
        *AT(s, f, double) = 0.1 + (double)k / 3;
        break;
    case SBX_FIELD_LIST: {
        char **v = k % 3 == 0 ? items_a : k % 3 == 1 ? items_b : items_c;
        size_t n = 0;
        while (v[n])
            n++;
        *AT(s, f, sbx_list) = (sbx_list){true, n, v};
        break;
    }
    case SBX_FIELD_PATH:
        *AT(s, f, char *) = "/home/ctx/work";
        break;
    case SBX_FIELD_ID: /* the identity comes whole */
        if (!s->has_uid)
            s->ident = (sbx_ident){1, 1, 1};
        *AT(s, f, unsigned) = (unsigned)(f->min + 100000 + k);
        s->has_uid = true;
        break;
    }
}

static bool same(const sbx_spec *a, const sbx_spec *b, const sbx_field *f)
{
    switch (f->type) {
    case SBX_FIELD_TIER:
        return *AT(a, f, sbx_tier) == *AT(b, f, sbx_tier);
    case SBX_FIELD_DENY:
        return *AT(a, f, bool) == *AT(b, f, bool);
    case SBX_FIELD_COUNT:
        return *AT(a, f, unsigned long long) == *AT(b, f, unsigned long long);
    case SBX_FIELD_SECONDS:
        return *AT(a, f, double) == *AT(b, f, double);
    case SBX_FIELD_LIST: {
        const sbx_list *x = AT(a, f, sbx_list), *y = AT(b, f, sbx_list);
        if (x->set != y->set || x->n != y->n)
            return false;
        for (size_t i = 0; i < x->n; i++)
            if (strcmp(x->v[i], y->v[i]))
                return false;
        return !y->set || y->v[y->n] == NULL;
    }
    case SBX_FIELD_PATH: {
        const char *x = *AT(a, f, char *), *y = *AT(b, f, char *);
        return x == y || (x && y && !strcmp(x, y));
    }
    case SBX_FIELD_ID:
        return *AT(a, f, unsigned) == *AT(b, f, unsigned) && a->has_uid == b->has_uid;
    }
    return false;
}

/* Written and parsed back, s is itself, field by field. */
static void round_trip(const sbx_spec *s)
{
    char *text = sbx_spec_text(s);
    CHECK(text != NULL);
    if (!text)
        return;
    sbx_spec back;
    char why[128] = "";
    CHECK(sbx_spec_parse(&back, text, why, sizeof why) == 0);
    if (why[0])
        fprintf(stderr, "refused: %s\n%s", why, text);
    for (size_t i = 0; i < sbx_schema_n; i++)
        if (!same(s, &back, &sbx_schema[i])) {
            fprintf(stderr, "field '%s' changed on the way:\n%s", sbx_schema[i].key, text);
            failures++;
        }
    sbx_spec_free(&back);
    free(text);
}

static void every_field(void)
{
    sbx_spec s = {0};
    round_trip(&s); /* the tier alone */
    for (size_t i = 0; i < sbx_schema_n; i++) {
        sbx_spec one = {0};
        give(&one, &sbx_schema[i], i); /* each field on its own */
        round_trip(&one);
        give(&s, &sbx_schema[i], i); /* and all of them at once */
    }
    round_trip(&s);
    /* An empty list is a list that was given. */
    sbx_spec empty = {.tier = SBX_TIER_LOCAL, .write_roots = {true, 0, NULL}};
    round_trip(&empty);
    /* Each tier by its name; seconds to the last bit. */
    for (sbx_tier t = SBX_TIER_UNSAFE; t <= SBX_TIER_SANDBOX; t++) {
        sbx_spec x = {.tier = t, .cpu_seconds = 1.0 / 3 + t};
        round_trip(&x);
    }
    sbx_spec tiny = {.tier = SBX_TIER_LOCAL, .cpu_seconds = DBL_MIN};
    round_trip(&tiny);
    /* Every type of the table is met by a field above. */
    CHECK(sbx_schema_n >= 7 && !strcmp(sbx_schema[0].key, "tier"));
}

/* The text as the supervisor always wrote it. */
static void form(void)
{
    char *roots[] = {"/home/a", "/dev/shm", NULL};
    char *reads[] = {"/var/cache/pkgs", NULL};
    sbx_spec s = {
        .tier = SBX_TIER_LOCAL,
        .no_network = true,
        .memory_bytes = 1ULL << 30,
        .max_processes = 512,
        .cpu_seconds = 2.5,
        .write_roots = {true, 2, roots},
        .tmpdir = "/home/a",
        .read_roots = {true, 1, reads},
        .has_uid = true,
        .ident = {100001, 100001, 100000},
    };
    char *text = sbx_spec_text(&s);
    CHECK(text && !strcmp(text, "tier=local\nnetwork=0\nmemory_bytes=1073741824\n"
                                "max_processes=512\ncpu_seconds=2.5\n"
                                "write_roots=/home/a\x1f/dev/shm\ntmpdir=/home/a\n"
                                "read_roots=/var/cache/pkgs\nuid=100001\ngid=100001\n"
                                "group=100000\n"));
    free(text);
    sbx_spec unsafe = {0};
    text = sbx_spec_text(&unsafe);
    CHECK(text && !strcmp(text, "tier=unsafe\n"));
    free(text);
}

/* What cannot be read back is not written. */
static void unwritable(void)
{
    char *newline[] = {"/a\nnetwork=1", NULL};
    char *sep[] = {"a\x1f"
                   "b",
                   NULL};
    char *blank[] = {"", NULL};
    sbx_spec bad[] = {
        {.tier = (sbx_tier)9},
        {.memory_bytes = 1},
        {.disk_bytes = 4096},
        {.cpu_seconds = -1},
        {.cpu_seconds = 2e9},
        {.write_roots = {true, 1, newline}},
        {.imports = {true, 1, sep}},
        {.read_roots = {true, 1, blank}},
        {.tmpdir = "relative"},
        {.tmpdir = "/a\nb"},
        {.has_uid = true, .ident = {0, 5, 5}},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char *text = sbx_spec_text(&bad[i]);
        if (text) {
            fprintf(stderr, "written though it cannot be read back (%zu):\n%s", i, text);
            failures++;
            free(text);
        }
    }
}

/* Text the writer could not have written is refused, and leaves the
 * spec empty. */
static void malformed(void)
{
    static const char *const texts[] = {
        "",                                                      /* no tier */
        "network=0\n",                                           /* no tier */
        "tier=docker\n",                                         /* not a tier's name */
        "tier=local\ntier=local\n",                              /* a key twice */
        "tier=local\nnetwrok=0\n",                               /* an unknown key */
        "tier=local\nnetwork\n",                                 /* no '=' */
        "tier=local\n\n",                                        /* an empty line */
        "tier=local\nnetwork=1\n",                               /* a denial is "0" */
        "tier=local\nmemory_bytes=1024\n",                       /* under its minimum */
        "tier=local\nmemory_bytes=\n",                           /* no number */
        "tier=local\nmax_processes=-1\n",                        /* a sign */
        "tier=local\nmax_processes=+5\n",                        /* a sign */
        "tier=local\nmax_processes= 5\n",                        /* a space */
        "tier=local\nmax_processes=05\n",                        /* a leading zero */
        "tier=local\nmax_processes=5x\n",                        /* trailing junk */
        "tier=local\nmax_processes=0\n",                         /* 0 is never written */
        "tier=local\nfile_size_bytes=99999999999999999999999\n", /* overflow */
        "tier=local\ncpu_seconds=0\n",
        "tier=local\ncpu_seconds=nan\n",
        "tier=local\ncpu_seconds=inf\n",
        "tier=local\ncpu_seconds=1e10\n",
        "tier=local\ncpu_seconds=1s\n",
        "tier=local\nallowed_imports=a\x1f\x1f"
        "b\n", /* an empty item */
        "tier=local\nallowed_imports=\x1f"
        "a\n",
        "tier=local\nallowed_imports=a\x1f\n",
        "tier=local\ntmpdir=relative\n",
        "tier=local\ntmpdir=\n",
        "tier=local\nuid=0\ngid=0\ngroup=0\n", /* never root */
        "tier=local\nuid=1000\n",              /* the identity in part */
        "tier=local\nuid=1000\ngid=1000\n",
        "tier=local\nuid=4294967295\ngid=1\ngroup=1\n",
    };
    for (size_t i = 0; i < sizeof texts / sizeof *texts; i++) {
        sbx_spec s;
        memset(&s, 0xa5, sizeof s);
        char why[128] = "";
        int rc = sbx_spec_parse(&s, texts[i], why, sizeof why);
        if (rc != -1 || !why[0]) {
            fprintf(stderr, "accepted (%zu): %s", i, texts[i]);
            failures++;
        }
        sbx_spec zero;
        memset(&zero, 0, sizeof zero);
        CHECK(memcmp(&s, &zero, sizeof s) == 0);
        if (rc == 0)
            sbx_spec_free(&s);
    }
    /* A last line without its newline is still a line. */
    sbx_spec s;
    char why[128];
    CHECK(sbx_spec_parse(&s, "tier=sandbox\nmax_processes=64", why, sizeof why) == 0);
    CHECK(s.tier == SBX_TIER_SANDBOX && s.max_processes == 64);
    sbx_spec_free(&s);
}

int main(void)
{
    every_field();
    form();
    unwritable();
    malformed();
    if (failures)
        fprintf(stderr, "%d check(s) failed\n", failures);
    return failures != 0;
}
