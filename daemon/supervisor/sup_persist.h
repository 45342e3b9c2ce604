/* sup_persist: the context table across daemon restarts. */
#ifndef CTXD_SUP_PERSIST_H
#define CTXD_SUP_PERSIST_H

/* Rewrites STATE_DIR/contexts.msgpack when the table changed (called once
 * per loop round; cheap when nothing changed). */
void sup_persist_flush(void);
/* At start (after the zygote): makes the previous daemon's contexts again,
 * each a new incarnation with previous_death "daemon restarted". */
void sup_persist_restore(void);

#endif
