/* watchdog.c: the thread of watchdog.h. Items wait in a ring in the order they were queued;
 * only the oldest is polled (a device stream finishes its work in order), and its clock runs
 * from when it became the oldest. */
#include "watchdog.h"

#include <pthread.h>
#include <stdlib.h>

#include "error.h"
#include "log.h"

struct dpt_watchdog {
    dpt_watchdog_ops ops;
    void *user;
    double timeout_s, poll_ms;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t has_work, progress;
    void **ring; /* queued items, ring[head] the oldest */
    int head, count, cap;
    double front_since; /* when the oldest item became the oldest */
    bool stopping;      /* dpt_watchdog_free: finish the queue, then end */
    bool stopped;       /* stuck returned: nothing is watched any more */
};

static void *watch_loop(void *arg)
{
    dpt_watchdog *w = arg;
    if (w->ops.start) w->ops.start(w->user);
    pthread_mutex_lock(&w->mu);
    for (;;) {
        while (!w->count && !w->stopping)
            pthread_cond_wait(&w->has_work, &w->mu);
        if (!w->count) break; /* stopping, and every item finished */
        void *item = w->ring[w->head];
        double since = w->front_since;
        pthread_mutex_unlock(&w->mu);

        char why[512] = "";
        dpt_watch_state state = w->ops.poll(w->user, item, why, sizeof why);
        double now = dpt_now_s();
        if (state == DPT_WATCH_DONE) {
            if (w->ops.finished) w->ops.finished(w->user, item);
            pthread_mutex_lock(&w->mu);
            w->head = (w->head + 1) % w->cap;
            w->count--;
            w->front_since = now; /* the next item's clock starts now: it was queued before */
            pthread_cond_broadcast(&w->progress);
            continue;
        }
        if (state == DPT_WATCH_FAILED || now - since > w->timeout_s) {
            w->ops.stuck(w->user, item, state == DPT_WATCH_FAILED ? why : NULL, now - since);
            pthread_mutex_lock(&w->mu);
            w->stopped = true;
            pthread_cond_broadcast(&w->progress);
            break;
        }
        dpt_sleep_ms(w->poll_ms);
        pthread_mutex_lock(&w->mu);
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

dpt_watchdog *dpt_watchdog_new(const dpt_watchdog_ops *ops, void *user, double timeout_s, double poll_ms)
{
    dpt_watchdog *w = calloc(1, sizeof *w);
    if (!w) dpt_fatal("out of host memory for a watchdog");
    w->ops = *ops;
    w->user = user;
    w->timeout_s = timeout_s;
    w->poll_ms = poll_ms;
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->has_work, NULL);
    pthread_cond_init(&w->progress, NULL);
    if (pthread_create(&w->thread, NULL, watch_loop, w) != 0) dpt_fatal("cannot start a watchdog thread");
    return w;
}

void dpt_watchdog_watch(dpt_watchdog *w, void *item)
{
    pthread_mutex_lock(&w->mu);
    if (w->count == w->cap) { /* grow, the oldest first again */
        int cap = w->cap ? 2 * w->cap : 8;
        void **ring = malloc((size_t)cap * sizeof *ring);
        if (!ring) dpt_fatal("out of host memory for a watchdog");
        for (int i = 0; i < w->count; i++)
            ring[i] = w->ring[(w->head + i) % w->cap];
        free(w->ring);
        w->ring = ring, w->cap = cap, w->head = 0;
    }
    if (!w->count) w->front_since = dpt_now_s();
    w->ring[(w->head + w->count) % w->cap] = item;
    w->count++;
    pthread_cond_signal(&w->has_work);
    pthread_mutex_unlock(&w->mu);
}

bool dpt_watchdog_wait(dpt_watchdog *w, int most)
{
    pthread_mutex_lock(&w->mu);
    while (w->count > most && !w->stopped)
        pthread_cond_wait(&w->progress, &w->mu);
    bool ok = w->count <= most;
    pthread_mutex_unlock(&w->mu);
    return ok;
}

int dpt_watchdog_queued(dpt_watchdog *w)
{
    pthread_mutex_lock(&w->mu);
    int n = w->count;
    pthread_mutex_unlock(&w->mu);
    return n;
}

void dpt_watchdog_free(dpt_watchdog *w)
{
    if (!w) return;
    pthread_mutex_lock(&w->mu);
    w->stopping = true;
    pthread_cond_signal(&w->has_work);
    pthread_mutex_unlock(&w->mu);
    pthread_join(w->thread, NULL);
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->has_work);
    pthread_cond_destroy(&w->progress);
    free(w->ring);
    free(w);
}
