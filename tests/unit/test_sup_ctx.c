/* test_sup_ctx: the supervisor's context table (sup_ctx.c) on its own:
 * the name hash as it grows, delete, the sorted order, the change journal
 * sup_persist saves and the generation that says when to save. Contexts
 * are bare (a name), as the table needs no worker. */
#include "sup_ctx.h"

#include "mem.h"
#include "unit_check.h"

#include <stdlib.h>
#include <string.h>

static size_t nfreed;

/* sup_ctx_set_free's hook: frees a bare context. */
static void free_ctx(sup_ctx *c)
{
    free(c->name);
    free(c);
    nfreed++;
}

/* A bare context named name, entered into the table. */
static sup_ctx *add(const char *name)
{
    sup_ctx *c = mem_calloc(1, sizeof *c);
    c->name = mem_strdup(name);
    sup_ctx_link_in(c);
    return c;
}

static sup_ctx *find(const char *name)
{
    return sup_ctx_find(name, strlen(name));
}

#define MANY 5000

/* Every name is found after many inserts (the hash grew many times), and
 * a name never inserted is not; a prefix is not the name. */
int unit_sup_ctx_find_many(void)
{
    sup_ctx_set_free(free_ctx);
    static sup_ctx *made[MANY];
    char name[32];
    CHECK(find("c0") == NULL); /* an empty table */
    for (int i = 0; i < MANY; i++) {
        snprintf(name, sizeof name, "c%d", i);
        made[i] = add(name);
    }
    CHECK(sup_ctx_count() == MANY);
    for (int i = 0; i < MANY; i++) {
        snprintf(name, sizeof name, "c%d", i);
        CHECK(find(name) == made[i]);
    }
    CHECK(find("c") == NULL && find("c5000") == NULL && find("") == NULL);
    CHECK(sup_ctx_find("c12", 2) == made[1]); /* by length, not to the NUL */
    return failures;
}

/* A deleted name is not found, the others still are, and the name can be
 * entered again; the deleted context is freed at the next tick. */
int unit_sup_ctx_delete_find(void)
{
    sup_ctx_set_free(free_ctx);
    char name[32];
    static sup_ctx *made[100];
    for (int i = 0; i < 100; i++) {
        snprintf(name, sizeof name, "d%d", i);
        made[i] = add(name);
    }
    for (int i = 0; i < 100; i += 2)
        sup_ctx_unlink(made[i]);
    CHECK(sup_ctx_count() == 50);
    for (int i = 0; i < 100; i++) {
        snprintf(name, sizeof name, "d%d", i);
        CHECK(find(name) == (i % 2 ? made[i] : NULL));
        CHECK(made[i]->deleted == (i % 2 == 0));
    }
    size_t walked = 0;
    for (sup_ctx *c = sup_ctx_first(); c; c = c->next)
        walked++;
    CHECK(walked == 50);
    sup_ctx_tick(0);
    CHECK(nfreed == 50);
    sup_ctx *again = add("d0");
    CHECK(find("d0") == again && sup_ctx_count() == 51);
    return failures;
}

/* sup_ctx_sorted lists every context once, by name (strcmp order),
 * whatever order they were entered in. */
int unit_sup_ctx_sorted(void)
{
    sup_ctx_set_free(free_ctx);
    static const char *const names[] = {"m", "b", "default", "z9", "a", "z10", "B", "mm"};
    size_t n = sizeof names / sizeof names[0];
    for (size_t i = 0; i < n; i++)
        add(names[i]);
    sup_ctx_unlink(find("mm"));
    sup_ctx **v = sup_ctx_sorted();
    static const char *const want[] = {"B", "a", "b", "default", "m", "z10", "z9"};
    CHECK(sup_ctx_count() == 7);
    for (size_t i = 0; i < 7; i++)
        CHECK(strcmp(v[i]->name, want[i]) == 0);
    free(v);
    return failures;
}

/* The journal: puts and dels in order; a put of a context later deleted is
 * dropped (its entry's put is NULL) while the del stays; clear empties it
 * and frees nothing that is still in the table. */
int unit_sup_ctx_journal(void)
{
    sup_ctx_set_free(free_ctx);
    size_t n;
    bool overflow;
    sup_ctx *a = add("a");
    sup_ctx *b = add("b");
    sup_ctx_note_put(a); /* a new incarnation */
    sup_ctx_unlink(b);
    const sup_ctx_change *ch = sup_ctx_changes(&n, &overflow);
    CHECK(n == 4 && !overflow);
    CHECK(ch[0].put == a && !ch[0].del);
    CHECK(ch[1].put == NULL && !ch[1].del); /* b's put, dropped by its del */
    CHECK(ch[2].put == a && !ch[2].del);
    CHECK(!ch[3].put && ch[3].del && strcmp(ch[3].del, "b") == 0);
    sup_ctx_changes_clear();
    ch = sup_ctx_changes(&n, &overflow);
    CHECK(n == 0 && !overflow);
    sup_ctx_unlink(a);
    ch = sup_ctx_changes(&n, &overflow);
    CHECK(n == 1 && ch[0].del && strcmp(ch[0].del, "a") == 0);
    sup_ctx_changes_clear();
    return failures;
}

/* Past SUP_CTX_CHANGES_MAX changes the journal stops growing and says it
 * overflowed (the whole table must be saved); clear resets both. */
int unit_sup_ctx_journal_overflow(void)
{
    sup_ctx_set_free(free_ctx);
    size_t n;
    bool overflow;
    sup_ctx *a = add("a");
    for (size_t i = 1; i < SUP_CTX_CHANGES_MAX; i++)
        sup_ctx_note_put(a);
    sup_ctx_changes(&n, &overflow);
    CHECK(n == SUP_CTX_CHANGES_MAX && !overflow);
    uint64_t gen = sup_ctx_table_gen();
    sup_ctx_note_put(a);
    const sup_ctx_change *ch = sup_ctx_changes(&n, &overflow);
    CHECK(n == SUP_CTX_CHANGES_MAX && overflow);
    CHECK(sup_ctx_table_gen() == gen + 1); /* still a change to save */
    sup_ctx_unlink(a);
    ch = sup_ctx_changes(&n, &overflow);
    CHECK(n == SUP_CTX_CHANGES_MAX && overflow && ch[0].put == NULL);
    sup_ctx_changes_clear();
    sup_ctx_changes(&n, &overflow);
    CHECK(n == 0 && !overflow);
    return failures;
}

/* The generation moves on an insert, a new incarnation and a delete, and
 * on nothing else: not on a find, a touch, the sorted list, a list move,
 * clearing the journal or freeing the dead. */
int unit_sup_ctx_table_gen(void)
{
    sup_ctx_set_free(free_ctx);
    uint64_t g = sup_ctx_table_gen();
    sup_ctx *a = add("a");
    CHECK(sup_ctx_table_gen() == g + 1);
    g = sup_ctx_table_gen();
    CHECK(find("a") == a);
    sup_ctx_touch(a);
    sup_ctx_list_push(SUP_CTX_TIMED, a);
    sup_ctx_list_remove(SUP_CTX_TIMED, a);
    free(sup_ctx_sorted());
    sup_ctx_changes_clear();
    sup_ctx_tick(0);
    CHECK(sup_ctx_table_gen() == g);
    sup_ctx_note_put(a);
    CHECK(sup_ctx_table_gen() == g + 1);
    sup_ctx_unlink(a);
    CHECK(sup_ctx_table_gen() == g + 2);
    sup_ctx_tick(0);
    CHECK(sup_ctx_table_gen() == g + 2);
    return failures;
}
