/* wrk_mpmain: multiprocessing's spawn and forkserver start methods and a
 * __main__ without a file (see wrk_mpmain.c). */
#ifndef CTXD_WRK_MPMAIN_H
#define CTXD_WRK_MPMAIN_H

/* GIL held, after wrk_display_init (whose import hook it uses): arranges
 * the patches. Returns -1 with a Python error set. */
int wrk_mpmain_init(void);

#endif
