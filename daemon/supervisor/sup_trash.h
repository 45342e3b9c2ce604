/* sup_trash: removing private directories without blocking the loop. */
#ifndef CTXD_SUP_TRASH_H
#define CTXD_SUP_TRASH_H

/* Removes a directory tree by descriptor, never following a link: moved
 * into the trash at once, emptied by sup_trash_tick. */
void sup_trash_rmtree(const char *path);
/* Removes up to a few hundred trash entries; the next time to call it. */
double sup_trash_tick(double now);
/* Once the state directory is known: resumes a previous daemon's trash. */
void sup_trash_start(void);

#endif
