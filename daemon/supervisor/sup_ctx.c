/* sup_ctx: the context table: the list of contexts, the name hash, the
 * journal of changes, the lists the context modules walk, the contexts
 * waiting to be freed, and the hidden spares. */
#include "sup_ctx.h"

#include "sup_config.h"
#include "sup_log.h"

#include "mem.h"

#include <stdlib.h>
#include <string.h>

static sup_ctx *contexts;  /* in no order; sup_ctx_sorted sorts */
static sup_ctx *graveyard; /* deleted, freed at the next tick */
static size_t ncontexts;
static uint64_t table_gen;
/* Names to contexts: chains in a power-of-two table, grown with the count,
 * so a request's lookup costs the same at 10 or 5,000 contexts. */
static sup_ctx **htab;
static size_t hcap;
static void (*free_fn)(sup_ctx *c);

typedef struct ctx_list {
    sup_ctx *head, *tail;
    size_t off; /* of the sup_ctx_link in sup_ctx */
} ctx_list;
static ctx_list lists[SUP_CTX_NLISTS] = {
    [SUP_CTX_RD] = {.off = offsetof(sup_ctx, rd)},
    [SUP_CTX_TIMED] = {.off = offsetof(sup_ctx, timed)},
    [SUP_CTX_IDLE] = {.off = offsetof(sup_ctx, idle)},
    [SUP_CTX_LEASED] = {.off = offsetof(sup_ctx, leased)},
    [SUP_CTX_MEM] = {.off = offsetof(sup_ctx, memq)},
};
static sup_ctx_change changes[SUP_CTX_CHANGES_MAX];
static size_t nchanges;
static bool changes_overflow;

static sup_ctx *spares[SUP_SPARE_MAX];
static size_t nspares;

/* The link of c that list l threads through. */
static sup_ctx_link *link_of(const ctx_list *l, sup_ctx *c)
{
    return (sup_ctx_link *)((char *)c + l->off);
}

void sup_ctx_list_push(sup_ctx_list which, sup_ctx *c)
{
    ctx_list *l = &lists[which];
    sup_ctx_link *k = link_of(l, c);
    if (k->on)
        return;
    k->on = true;
    k->next = NULL;
    k->prev = l->tail;
    if (l->tail)
        link_of(l, l->tail)->next = c;
    else
        l->head = c;
    l->tail = c;
}

void sup_ctx_list_unshift(sup_ctx_list which, sup_ctx *c)
{
    ctx_list *l = &lists[which];
    sup_ctx_link *k = link_of(l, c);
    if (k->on)
        return;
    k->on = true;
    k->prev = NULL;
    k->next = l->head;
    if (l->head)
        link_of(l, l->head)->prev = c;
    else
        l->tail = c;
    l->head = c;
}

void sup_ctx_list_remove(sup_ctx_list which, sup_ctx *c)
{
    ctx_list *l = &lists[which];
    sup_ctx_link *k = link_of(l, c);
    if (!k->on)
        return;
    if (k->prev)
        link_of(l, k->prev)->next = k->next;
    else
        l->head = k->next;
    if (k->next)
        link_of(l, k->next)->prev = k->prev;
    else
        l->tail = k->prev;
    k->on = false;
    k->prev = k->next = NULL;
}

sup_ctx *sup_ctx_list_head(sup_ctx_list which)
{
    return lists[which].head;
}

void sup_ctx_touch(sup_ctx *c)
{
    c->last_active = sup_now();
    if (c->deleted || c->spare.on || strcmp(c->name, "default") == 0)
        return;
    sup_ctx_list_remove(SUP_CTX_IDLE, c);
    sup_ctx_list_push(SUP_CTX_IDLE, c);
}

void sup_ctx_arm(sup_ctx *c)
{
    if (!c->deleted)
        sup_ctx_list_push(SUP_CTX_TIMED, c);
    sup_timer_moved();
}

static uint64_t name_hash(const char *name, size_t len)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < len; i++)
        h = (h ^ (uint8_t)name[i]) * 1099511628211ull;
    return h;
}

/* Rehashes into twice as many chains once they average more than one. */
static void hash_grow(void)
{
    size_t ncap = hcap ? hcap * 2 : 64;
    sup_ctx **n = mem_calloc(ncap, sizeof *n);
    for (size_t i = 0; i < hcap; i++) {
        for (sup_ctx *c = htab[i], *nx; c; c = nx) {
            nx = c->hnext;
            size_t b = name_hash(c->name, strlen(c->name)) & (ncap - 1);
            c->hnext = n[b];
            n[b] = c;
        }
    }
    free(htab);
    htab = n;
    hcap = ncap;
}

sup_ctx *sup_ctx_first(void)
{
    return contexts;
}

size_t sup_ctx_count(void)
{
    return ncontexts;
}

uint64_t sup_ctx_table_gen(void)
{
    return table_gen;
}

/* Records a change for sup_persist (put: c; del: c's name). */
static void note_change(sup_ctx *c, bool del)
{
    table_gen++;
    if (del)
        for (size_t i = 0; i < nchanges; i++)
            if (changes[i].put == c)
                changes[i].put = NULL; /* its entry goes with the del */
    if (nchanges == SUP_CTX_CHANGES_MAX) {
        changes_overflow = true;
        return;
    }
    changes[nchanges++] =
        del ? (sup_ctx_change){.del = mem_strdup(c->name)} : (sup_ctx_change){.put = c};
}

void sup_ctx_note_put(sup_ctx *c)
{
    note_change(c, false);
}

const sup_ctx_change *sup_ctx_changes(size_t *n, bool *overflow)
{
    *n = nchanges;
    *overflow = changes_overflow;
    return changes;
}

void sup_ctx_changes_clear(void)
{
    for (size_t i = 0; i < nchanges; i++)
        free(changes[i].del);
    nchanges = 0;
    changes_overflow = false;
}

sup_ctx *sup_ctx_find(const char *name, size_t len)
{
    if (!hcap)
        return NULL;
    for (sup_ctx *c = htab[name_hash(name, len) & (hcap - 1)]; c; c = c->hnext)
        if (strlen(c->name) == len && memcmp(c->name, name, len) == 0)
            return c;
    return NULL;
}

static int by_name(const void *a, const void *b)
{
    return strcmp((*(sup_ctx *const *)a)->name, (*(sup_ctx *const *)b)->name);
}

sup_ctx **sup_ctx_sorted(void)
{
    sup_ctx **v = mem_alloc((ncontexts + 1) * sizeof *v);
    size_t n = 0;
    for (sup_ctx *c = contexts; c && n < ncontexts; c = c->next)
        v[n++] = c;
    qsort(v, n, sizeof *v, by_name);
    return v;
}

bool sup_ctx_linked(const sup_ctx *c)
{
    return c->next || c->prev || contexts == c;
}

void sup_ctx_link_in(sup_ctx *c)
{
    c->prev = NULL;
    c->next = contexts;
    if (contexts)
        contexts->prev = c;
    contexts = c;
    ncontexts++;
    note_change(c, false);
    if (ncontexts > hcap)
        hash_grow();
    size_t b = name_hash(c->name, strlen(c->name)) & (hcap - 1);
    c->hnext = htab[b];
    htab[b] = c;
    sup_ctx_touch(c);
    sup_ctx_list_unshift(SUP_CTX_MEM, c); /* never measured: the tick's first */
}

void sup_ctx_bury(sup_ctx *c)
{
    for (int l = 0; l < SUP_CTX_NLISTS; l++)
        sup_ctx_list_remove((sup_ctx_list)l, c);
    c->deleted = true;
    c->next = graveyard;
    graveyard = c;
}

void sup_ctx_unlink(sup_ctx *c)
{
    if (c->prev)
        c->prev->next = c->next;
    else
        contexts = c->next;
    if (c->next)
        c->next->prev = c->prev;
    sup_ctx **h = &htab[name_hash(c->name, strlen(c->name)) & (hcap - 1)];
    while (*h != c)
        h = &(*h)->hnext;
    *h = c->hnext;
    ncontexts--;
    note_change(c, true);
    sup_ctx_bury(c);
}

void sup_ctx_clear(void)
{
    contexts = NULL;
    ncontexts = 0;
    for (int l = 0; l < SUP_CTX_NLISTS; l++)
        lists[l].head = lists[l].tail = NULL;
    if (hcap)
        memset(htab, 0, hcap * sizeof *htab);
}

void sup_ctx_set_free(void (*fn)(sup_ctx *c))
{
    free_fn = fn;
}

double sup_ctx_tick(double now)
{
    (void)now;
    while (graveyard) {
        sup_ctx *c = graveyard;
        graveyard = c->next;
        free_fn(c);
    }
    return 0;
}

void sup_ctx_spare_add(sup_ctx *c)
{
    if (nspares == SUP_SPARE_MAX)
        fatal("sup_ctx_spare_add: more than SUP_SPARE_MAX spares");
    spares[nspares++] = c;
}

void sup_ctx_spare_remove(sup_ctx *c)
{
    for (size_t i = 0; i < nspares; i++)
        if (spares[i] == c) {
            spares[i] = spares[--nspares];
            return;
        }
    fatal("spare_remove: not a spare");
}

size_t sup_ctx_spare_count(void)
{
    return nspares;
}

sup_ctx *sup_ctx_spare_at(size_t i)
{
    return spares[i];
}

sup_ctx *sup_ctx_spare_of(pid_t pid)
{
    for (size_t i = 0; i < nspares; i++)
        if (pid > 0 && spares[i]->pid == pid)
            return spares[i];
    return NULL;
}
