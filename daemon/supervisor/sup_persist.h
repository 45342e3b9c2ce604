/* sup_persist: the context table across daemon restarts. */
#ifndef CTXD_SUP_PERSIST_H
#define CTXD_SUP_PERSIST_H

/* Saves what changed in the table (sup_ctx_changes): appended to the
 * journal, or the table rewritten whole when it must be (sup_persist.c).
 * Called by the loop when sup_ctx_table_gen changed. */
void sup_persist_flush(void);
/* At start (after the zygote): makes the previous daemon's contexts again,
 * each a new incarnation with previous_death "daemon restarted". */
void sup_persist_restore(void);

#endif
