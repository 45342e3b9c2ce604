/* sup_auth: CurveZMQ keys, the ZAP handler and the state directory. */
#ifndef CTXD_SUP_AUTH_H
#define CTXD_SUP_AUTH_H

int sup_auth_setup(void *zctx, void *curve_router);
void *sup_auth_zap_socket(void);
void sup_auth_handle(void);
const char *sup_auth_server_public(void);
/* The state directory (made 0700 on first use); NULL if it cannot be made. */
const char *sup_auth_state_dir(void);

#endif
