/* sup_request: client requests, checked and dispatched by a table. */
#ifndef CTXD_SUP_REQUEST_H
#define CTXD_SUP_REQUEST_H

#include "proto.h"
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* From now on every request read is answered `err shutting_down`
 * (sup_loop.c's shut_down drains the sockets so). */
void sup_request_shutting_down(void);
void sup_request_handle(int sock, const uint8_t *route, size_t route_len, const uint8_t *msg,
                        size_t len, bool multipart);

#endif
