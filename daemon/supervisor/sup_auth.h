/* sup_auth: CurveZMQ keys, the ZAP handler and the state directory. */
#ifndef CTXD_SUP_AUTH_H
#define CTXD_SUP_AUTH_H

/* Loads (or makes) the server key pair in the state directory and starts
 * the ZAP handler for curve_router; -1 (said on stderr) when it cannot. */
int sup_auth_setup(void *zctx, void *curve_router);
/* The ZAP handler's socket, which the loop serves; NULL before setup. */
void *sup_auth_zap_socket(void);
/* Answers one ZAP request against the authorized keys file. */
void sup_auth_handle(void);
/* The state directory (made 0700 on first use); NULL if it cannot be made. */
const char *sup_auth_state_dir(void);

#endif
