/* zmon.c — a ZeroMQ socket's monitor (zmon.h). base/ */
#include <stdio.h>
#include <string.h>
#include <zmq.h>

#include "base/zmon.h"

void *zmon_open(void *zctx, void *sock, const char *name, uint32_t idx, uint32_t gen,
                int mask)
{
    char addr[96];
    int linger = 0;
    snprintf(addr, sizeof addr, "inproc://%s-%u-%u", name, idx, gen);
    if (zmq_socket_monitor(sock, addr, mask))
        return NULL;
    void *mon = zmq_socket(zctx, ZMQ_PAIR);
    if (!mon)
        goto err;
    zmq_setsockopt(mon, ZMQ_LINGER, &linger, sizeof linger);
    if (zmq_connect(mon, addr)) {
        zmq_close(mon);
        goto err;
    }
    return mon;
err:
    zmq_socket_monitor(sock, NULL, 0);
    return NULL;
}

int zmon_drain(void *mon)
{
    int seen = 0;
    zmq_msg_t m;
    if (!mon)
        return 0;
    zmq_msg_init(&m);
    /* each event is two frames: 2 bytes of event and 4 of value, then the endpoint */
    while (zmq_msg_recv(&m, mon, ZMQ_DONTWAIT) >= 0) {
        if (zmq_msg_size(&m) >= 2) {
            uint16_t ev;
            memcpy(&ev, zmq_msg_data(&m), sizeof ev);
            seen |= ev;
        }
        if (zmq_msg_more(&m))
            zmq_msg_recv(&m, mon, ZMQ_DONTWAIT);
    }
    zmq_msg_close(&m);
    return seen;
}

void zmon_close(void **mon, void *sock)
{
    if (*mon)
        zmq_close(*mon);
    *mon = NULL;
    if (sock)
        zmq_socket_monitor(sock, NULL, 0);
}
