/* sec.c — CURVE key files and the ZAP authentication handler thread. base/ */
#include "base/sec.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#include "base/log.h"

#define S_MAX_KEYS 256
#define S_MAX_REFUSED 64

struct sec {
    void *ctx;
    pthread_t thread;
    int started;
    pthread_mutex_t mu;
    char role[32];
    char keys[S_MAX_KEYS][SEC_KEY_LEN];
    int fixed[S_MAX_KEYS];     /* allowed from files: survive sec_reset_dynamic */
    int n;
    char refused[S_MAX_REFUSED][SEC_KEY_LEN];
    int n_refused;
    unsigned long refused_total;
    void *ready_sock;          /* bound before the thread starts, so no client races it */
};

static int s_is_z85_key(const char *k)
{
    static const char *alpha = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                               ".-:+=^!/*?&<>()[]{}@%$#";
    if (strlen(k) != 40)
        return 0;
    for (int i = 0; i < 40; i++)
        if (!strchr(alpha, k[i]))
            return 0;
    return 1;
}

int sec_keygen(const char *base, char *err, size_t errlen)
{
    char pub[SEC_KEY_LEN], sec[SEC_KEY_LEN], path[1024];
    FILE *f;
    int fd;
    if (zmq_curve_keypair(pub, sec)) {
        snprintf(err, errlen, "zmq_curve_keypair: %s (libzmq without CURVE?)",
                 zmq_strerror(errno));
        return -1;
    }
    snprintf(path, sizeof path, "%s.key", base);
    fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0 || !(f = fdopen(fd, "w"))) {
        snprintf(err, errlen, "%s: cannot create: %s", path, strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    fprintf(f, "# swarm CURVE key pair: keep secret\npublic = %s\nsecret = %s\n", pub, sec);
    if (fclose(f)) {
        snprintf(err, errlen, "%s: write failed", path);
        return -1;
    }
    snprintf(path, sizeof path, "%s.pub", base);
    f = fopen(path, "w");
    if (!f || fprintf(f, "%s\n", pub) < 0 || fclose(f)) {
        snprintf(err, errlen, "%s: cannot write: %s", path, strerror(errno));
        return -1;
    }
    return 0;
}

int sec_load_key(const char *path, char pub[SEC_KEY_LEN], char sec[SEC_KEY_LEN], char *err,
                 size_t errlen)
{
    char line[256];
    int ln = 0;
    FILE *f = fopen(path, "r");
    pub[0] = sec[0] = 0;
    if (!f) {
        snprintf(err, errlen, "%s: cannot open key file: %s", path, strerror(errno));
        return -1;
    }
    while (fgets(line, sizeof line, f)) {
        char k[32], v[128];
        ln++;
        if (line[0] == '#' || line[0] == '\n')
            continue;
        if (sscanf(line, " %31[a-z] = %127s", k, v) != 2 || !s_is_z85_key(v) ||
            (strcmp(k, "public") && strcmp(k, "secret"))) {
            snprintf(err, errlen, "%s:%d: expected 'public = KEY' or 'secret = KEY' (40 Z85 "
                     "chars)", path, ln);
            fclose(f);
            return -1;
        }
        snprintf(!strcmp(k, "public") ? pub : sec, SEC_KEY_LEN, "%s", v);
    }
    fclose(f);
    if (!pub[0] || !sec[0]) {
        snprintf(err, errlen, "%s: needs both a public and a secret key", path);
        return -1;
    }
    return 0;
}

/* Read the first 40-char Z85 key in a .pub file (comment lines start with '#'). */
static int s_read_pub(const char *path, char pub[SEC_KEY_LEN], char *err, size_t errlen)
{
    char line[256];
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(err, errlen, "%s: cannot read key file: %s", path, strerror(errno));
        return -1;
    }
    pub[0] = 0;
    while (fgets(line, sizeof line, f)) {
        char v[128];
        if (line[0] == '#')
            continue;
        if (sscanf(line, " %127s", v) == 1 && s_is_z85_key(v)) {
            snprintf(pub, SEC_KEY_LEN, "%s", v);
            break;
        }
    }
    fclose(f);
    if (!pub[0]) {
        snprintf(err, errlen, "%s: no 40-char Z85 public key in it", path);
        return -1;
    }
    return 0;
}

int sec_parse_pub(const char *spec, char pub[SEC_KEY_LEN], char *err, size_t errlen)
{
    const size_t np = strlen(SEC_INLINE_PREFIX);
    struct stat st;
    /* Inline keys carry a prefix because 40 Z85 characters are also a perfectly good path
     * (`mktemp -d` under /tmp plus "/coord.pub" easily is exactly 40 of them, and the worker
     * then took the path for a key and refused its coordinator), so a bare value is always a
     * path and never guessed at. A path that really starts with "z85:" is written ./z85:... */
    if (!strncmp(spec, SEC_INLINE_PREFIX, np)) {
        if (!s_is_z85_key(spec + np)) {
            size_t n = strlen(spec + np);
            if (n == 40)
                snprintf(err, errlen, "'%s': an inline key is %s followed by 40 Z85 characters; "
                         "this one has a character outside the Z85 alphabet", spec,
                         SEC_INLINE_PREFIX);
            else
                snprintf(err, errlen, "'%s': an inline key is %s followed by 40 Z85 characters; "
                         "this one has %zu", spec, SEC_INLINE_PREFIX, n);
            return -1;
        }
        snprintf(pub, SEC_KEY_LEN, "%s", spec + np);
        return 0;
    }
    if (stat(spec, &st)) {
        if (s_is_z85_key(spec))
            snprintf(err, errlen, "'%s' is not a key file (%s); if it is a key, write it inline "
                     "as %s%s", spec, strerror(errno), SEC_INLINE_PREFIX, spec);
        else
            snprintf(err, errlen, "'%s' is not a key file (%s); give a .pub file from `swarm "
                     "keygen`, or a key inline as %sKEY", spec, strerror(errno),
                     SEC_INLINE_PREFIX);
        return -1;
    }
    if (S_ISDIR(st.st_mode)) {
        snprintf(err, errlen, "'%s' is a folder, not a .pub key file", spec);
        return -1;
    }
    return s_read_pub(spec, pub, err, errlen);
}

static int s_allowed(sec_t *s, const char *k)
{
    int ok = 0;
    pthread_mutex_lock(&s->mu);
    for (int i = 0; i < s->n && !ok; i++)
        ok = !strcmp(s->keys[i], k);
    pthread_mutex_unlock(&s->mu);
    return ok;
}

static void s_note_refused(sec_t *s, const char *k, const char *addr)
{
    pthread_mutex_lock(&s->mu);
    s->refused_total++;
    for (int i = 0; i < s->n_refused; i++) {
        if (!strcmp(s->refused[i], k)) {
            pthread_mutex_unlock(&s->mu);
            return; /* logged once per peer key */
        }
    }
    if (s->n_refused < S_MAX_REFUSED)
        snprintf(s->refused[s->n_refused++], SEC_KEY_LEN, "%s", k);
    pthread_mutex_unlock(&s->mu);
    log_warn("%s: refused a CURVE client from %s: key %.12s... is not allowed", s->role, addr, k);
}

static void *s_zap_main(void *arg)
{
    sec_t *s = arg;
    void *sock = s->ready_sock;
    for (;;) {
        zmq_msg_t fr[8];
        int n = 0, more = 1;
        while (more && n < 8) {
            zmq_msg_init(&fr[n]);
            if (zmq_msg_recv(&fr[n], sock, 0) < 0) {
                zmq_msg_close(&fr[n]);
                for (int i = 0; i < n; i++)
                    zmq_msg_close(&fr[i]);
                goto out; /* ETERM: the context is going away */
            }
            more = zmq_msg_more(&fr[n]);
            n++;
        }
        /* version, request id, domain, address, identity, mechanism, credentials... */
        const char *status = "400", *text = "not allowed";
        char key[SEC_KEY_LEN] = "", addr[64] = "?";
        if (n >= 7 && zmq_msg_size(&fr[5]) == 5 && !memcmp(zmq_msg_data(&fr[5]), "CURVE", 5) &&
            zmq_msg_size(&fr[6]) == 32) {
            zmq_z85_encode(key, zmq_msg_data(&fr[6]), 32);
            size_t al = zmq_msg_size(&fr[3]) < sizeof addr - 1 ? zmq_msg_size(&fr[3])
                                                                : sizeof addr - 1;
            memcpy(addr, zmq_msg_data(&fr[3]), al);
            addr[al] = 0;
            if (s_allowed(s, key)) {
                status = "200";
                text = "OK";
            } else {
                s_note_refused(s, key, addr);
            }
        } else {
            text = "CURVE required";
        }
        /* Reply: version, request id, status code, status text, user id, metadata. */
        zmq_send(sock, "1.0", 3, ZMQ_SNDMORE);
        if (n >= 2)
            zmq_send(sock, zmq_msg_data(&fr[1]), zmq_msg_size(&fr[1]), ZMQ_SNDMORE);
        else
            zmq_send(sock, "", 0, ZMQ_SNDMORE);
        zmq_send(sock, status, 3, ZMQ_SNDMORE);
        zmq_send(sock, text, strlen(text), ZMQ_SNDMORE);
        zmq_send(sock, key, strlen(key), ZMQ_SNDMORE);
        zmq_send(sock, "", 0, 0);
        for (int i = 0; i < n; i++)
            zmq_msg_close(&fr[i]);
    }
out:
    zmq_close(sock);
    return NULL;
}

sec_t *sec_zap_start(void *ctx, const char *role, char *err, size_t errlen)
{
    sec_t *s = calloc(1, sizeof *s);
    int linger = 0;
    if (!s) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    s->ctx = ctx;
    pthread_mutex_init(&s->mu, NULL);
    snprintf(s->role, sizeof s->role, "%s", role);
    s->ready_sock = zmq_socket(ctx, ZMQ_REP);
    if (!s->ready_sock || zmq_bind(s->ready_sock, "inproc://zeromq.zap.01")) {
        snprintf(err, errlen, "ZAP handler: %s", zmq_strerror(errno));
        if (s->ready_sock)
            zmq_close(s->ready_sock);
        free(s);
        return NULL;
    }
    zmq_setsockopt(s->ready_sock, ZMQ_LINGER, &linger, sizeof linger);
    if (pthread_create(&s->thread, NULL, s_zap_main, s)) {
        snprintf(err, errlen, "ZAP handler: cannot start thread");
        zmq_close(s->ready_sock);
        free(s);
        return NULL;
    }
    s->started = 1;
    return s;
}

static int s_allow(sec_t *s, const char *pub, int fixed)
{
    int rc = 0;
    pthread_mutex_lock(&s->mu);
    for (int i = 0; i < s->n; i++)
        if (!strcmp(s->keys[i], pub))
            goto out;
    if (s->n >= S_MAX_KEYS)
        rc = -1;
    else {
        snprintf(s->keys[s->n], SEC_KEY_LEN, "%s", pub);
        s->fixed[s->n++] = fixed;
    }
out:
    pthread_mutex_unlock(&s->mu);
    return rc;
}

int sec_allow(sec_t *s, const char *pub)
{
    return s_is_z85_key(pub) ? s_allow(s, pub, 0) : -1;
}

int sec_allow_path(sec_t *s, const char *spec, char *err, size_t errlen)
{
    struct stat st;
    char pub[SEC_KEY_LEN];
    /* A key inline, or a path that is not a folder: one key, with sec_parse_pub's errors. */
    if (strncmp(spec, SEC_INLINE_PREFIX, strlen(SEC_INLINE_PREFIX)) == 0 || stat(spec, &st) ||
        !S_ISDIR(st.st_mode)) {
        if (sec_parse_pub(spec, pub, err, errlen))
            return -1;
        return s_allow(s, pub, 1);
    }
    DIR *d = opendir(spec);
    struct dirent *de;
    int n = 0;
    if (!d) {
        snprintf(err, errlen, "%s: %s", spec, strerror(errno));
        return -1;
    }
    while ((de = readdir(d))) {
        size_t l = strlen(de->d_name);
        char p[2048], why[512];
        if (l < 5 || strcmp(de->d_name + l - 4, ".pub"))
            continue;
        snprintf(p, sizeof p, "%s/%s", spec, de->d_name);
        /* One bad file in a folder of keys leaves the others allowed, but is said out loud. */
        if (s_read_pub(p, pub, why, sizeof why) == 0 && s_allow(s, pub, 1) == 0)
            n++;
        else
            log_warn("%s: %s", s->role, why);
    }
    closedir(d);
    if (!n) {
        snprintf(err, errlen, "%s: no usable .pub files in this folder", spec);
        return -1;
    }
    return 0;
}

void sec_reset_dynamic(sec_t *s)
{
    int k = 0;
    pthread_mutex_lock(&s->mu);
    for (int i = 0; i < s->n; i++) {
        if (s->fixed[i]) {
            memmove(s->keys[k], s->keys[i], SEC_KEY_LEN);
            s->fixed[k++] = 1;
        }
    }
    s->n = k;
    pthread_mutex_unlock(&s->mu);
}

unsigned long sec_refused(const sec_t *s)
{
    return s ? s->refused_total : 0;
}

void sec_zap_stop(sec_t **ps)
{
    sec_t *s = *ps;
    if (!s)
        return;
    if (s->started)
        pthread_join(s->thread, NULL);
    pthread_mutex_destroy(&s->mu);
    free(s);
    *ps = NULL;
}

int sec_server(void *sock, const char *secret)
{
    int one = 1;
    if (zmq_setsockopt(sock, ZMQ_CURVE_SERVER, &one, sizeof one) ||
        zmq_setsockopt(sock, ZMQ_CURVE_SECRETKEY, secret, 40) ||
        zmq_setsockopt(sock, ZMQ_ZAP_DOMAIN, "swarm", 5))
        return -1;
    return 0;
}

int sec_client(void *sock, const char *pub, const char *secret, const char *server_pub)
{
    if (zmq_setsockopt(sock, ZMQ_CURVE_SERVERKEY, server_pub, 40) ||
        zmq_setsockopt(sock, ZMQ_CURVE_PUBLICKEY, pub, 40) ||
        zmq_setsockopt(sock, ZMQ_CURVE_SECRETKEY, secret, 40))
        return -1;
    return 0;
}

int sec_endpoint_is_local(const char *ep)
{
    if (!strncmp(ep, "ipc://", 6) || !strncmp(ep, "inproc://", 9))
        return 1;
    if (strncmp(ep, "tcp://", 6))
        return 0;
    ep += 6;
    return !strncmp(ep, "127.", 4) || !strncmp(ep, "localhost:", 10) || !strncmp(ep, "[::1]", 5);
}
