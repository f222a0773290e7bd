/* sec.h — CURVE keys and a ZAP handler: which peers may talk to a socket. base/
 *
 * Key files: NAME.key holds "public = Z85" and "secret = Z85" (mode 0600); NAME.pub holds the
 * public key alone. Servers (a worker's control and data sockets, the coordinator's result
 * socket) run CURVE with a ZAP handler that accepts only listed client keys; a refused key is
 * logged once with the peer's address. Plaintext is for loopback and ipc only, unless the
 * configuration says otherwise out loud (and the results then say "plaintext").
 */
#ifndef SWARM_SEC_H
#define SWARM_SEC_H

#include <stddef.h>

#define SEC_KEY_LEN 41             /* Z85 key + NUL */
/* An inline public key is written "z85:" + 40 Z85 characters. Any other value is a path,
 * whatever it looks like: a 40-character path is all Z85 characters too. */
#define SEC_INLINE_PREFIX "z85:"

typedef struct sec sec_t;

/* Write base.key and base.pub with a fresh key pair. 0 / -1. */
int sec_keygen(const char *base, char *err, size_t errlen);
/* Read a .key file (public and secret). 0 / -1 with err naming the file and line. */
int sec_load_key(const char *path, char pub[SEC_KEY_LEN], char sec[SEC_KEY_LEN], char *err,
                 size_t errlen);
/* A public key given inline ("z85:" + 40 Z85 chars) or as the path of a .pub file (the first
 * 40-char Z85 token in it). 0 / -1 with err naming the value: a missing file, a folder, a file
 * without a key, or a malformed inline key; a bare 40-char key gets the inline form as a hint. */
int sec_parse_pub(const char *spec, char pub[SEC_KEY_LEN], char *err, size_t errlen);

/* Start the ZAP handler for ctx (one per context, before any CURVE server binds). */
sec_t *sec_zap_start(void *ctx, const char *role, char *err, size_t errlen);
/* Allow a client key (Z85). Thread-safe. */
int sec_allow(sec_t *s, const char *pub);
/* Allow "z85:KEY", a .pub file, or every *.pub file in a folder (a bad one is logged and
 * skipped; none usable is an error). 0 / -1. */
int sec_allow_path(sec_t *s, const char *spec, char *err, size_t errlen);
/* Forget every allowed key except those allowed with sec_allow_path (per-run keys). */
void sec_reset_dynamic(sec_t *s);
unsigned long sec_refused(const sec_t *s);
/* Stop after zmq_ctx_term (the handler's socket closes on ETERM). */
void sec_zap_stop(sec_t **s);

/* Make sock a CURVE server with our secret key. */
int sec_server(void *sock, const char *secret);
/* Make sock a CURVE client of server_pub with our key pair. */
int sec_client(void *sock, const char *pub, const char *secret, const char *server_pub);
/* Is the endpoint loopback or ipc/inproc (where plaintext is allowed)? */
int sec_endpoint_is_local(const char *ep);

#endif
