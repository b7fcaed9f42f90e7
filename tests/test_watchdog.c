/* test_watchdog.c: the thread that watches the NCCL communicator's queued collectives
 * (runtime/watchdog.c), driven by fake items whose completion a helper thread sets at known
 * times: finished items are handed back once each in the order they were queued (not the order
 * they finished), a timeout counts from when an item became the oldest (not from when it was
 * queued), an item that never finishes or reports a failure is stuck with its reason, and
 * freeing waits for every queued item. The device calls (CUDA events, ncclCommGetAsyncError)
 * are comm_nccl.c's poll, not run here. */
#include <pthread.h>
#include <stdatomic.h>

#include "tests/testutil.h"
#include "runtime/log.h"
#include "runtime/watchdog.h"

enum { ITEMS = 16 };

typedef struct fake_item {
    int id;
    atomic_bool done;
    atomic_bool failed;
} fake_item;

typedef struct watched {
    fake_item items[ITEMS];
    int order[ITEMS]; /* ids in the order finished() saw them */
    atomic_int nfinished;
    atomic_int nstuck;
    int stuck_id;
    char stuck_why[512];
    double stuck_waited_s;
    atomic_bool started;
} watched;

static dpt_watch_state fake_poll(void *user, void *item, char *why, size_t why_size)
{
    (void)user;
    fake_item *it = item;
    if (atomic_load(&it->failed)) {
        snprintf(why, why_size, "item %d: a peer reported an error", it->id);
        return DPT_WATCH_FAILED;
    }
    return atomic_load(&it->done) ? DPT_WATCH_DONE : DPT_WATCH_PENDING;
}

static void fake_finished(void *user, void *item)
{
    watched *s = user;
    s->order[atomic_fetch_add(&s->nfinished, 1)] = ((fake_item *)item)->id;
}

static void fake_stuck(void *user, void *item, const char *why, double waited_s)
{
    watched *s = user;
    s->stuck_id = ((fake_item *)item)->id;
    snprintf(s->stuck_why, sizeof s->stuck_why, "%s", why ? why : "(timeout)");
    s->stuck_waited_s = waited_s;
    atomic_fetch_add(&s->nstuck, 1);
}

static void fake_start(void *user)
{
    atomic_store(&((watched *)user)->started, true);
}

static const dpt_watchdog_ops fake_ops = {
    .start = fake_start, .poll = fake_poll, .finished = fake_finished, .stuck = fake_stuck};

static watched *watched_new(void)
{
    watched *s = calloc(1, sizeof *s);
    for (int i = 0; i < ITEMS; i++)
        s->items[i].id = i;
    return s;
}

/* A helper thread: marks items done at given delays after its start. */
typedef struct schedule {
    watched *s;
    int n;
    int ids[ITEMS];
    double at_s[ITEMS]; /* ascending */
} schedule;

static void *run_schedule(void *arg)
{
    schedule *sc = arg;
    double t0 = dpt_now_s();
    for (int k = 0; k < sc->n; k++) {
        double left = sc->at_s[k] - (dpt_now_s() - t0);
        if (left > 0) dpt_sleep_ms(1e3 * left);
        atomic_store(&sc->s->items[sc->ids[k]].done, true);
    }
    return NULL;
}

/* Items finished in reverse order of queueing are handed back in queueing order, each once;
 * wait(0) returns once all are back. */
static void test_in_queue_order(void **state)
{
    (void)state;
    watched *s = watched_new();
    dpt_watchdog *w = dpt_watchdog_new(&fake_ops, s, 30.0, 0.2);
    for (int i = 0; i < ITEMS; i++)
        dpt_watchdog_watch(w, &s->items[i]);
    schedule sc = {.s = s, .n = ITEMS};
    for (int k = 0; k < ITEMS; k++)
        sc.ids[k] = ITEMS - 1 - k, sc.at_s[k] = 0.005 * k;
    pthread_t helper;
    pthread_create(&helper, NULL, run_schedule, &sc);
    /* the oldest item finishes last: nothing can come back before it */
    dpt_sleep_ms(20);
    assert_int_equal(atomic_load(&s->nfinished), 0);
    assert_true(dpt_watchdog_wait(w, 0));
    pthread_join(helper, NULL);
    assert_int_equal(atomic_load(&s->nfinished), ITEMS);
    for (int i = 0; i < ITEMS; i++)
        assert_int_equal(s->order[i], i);
    assert_int_equal(dpt_watchdog_queued(w), 0);
    assert_int_equal(atomic_load(&s->nstuck), 0);
    assert_true(atomic_load(&s->started));
    dpt_watchdog_free(w);
    free(s);
}

/* timeout 2 s: item 0 finishes at 1.2 s, item 1 (queued at 0) at 2.4 s: 1.2 s after it became
 * the oldest, so it is not stuck, where a clock from its queueing (2.4 s) would call it stuck.
 * Item 2 never finishes: stuck, with no reason (a timeout), after 2 s from item 1's end. */
static void test_timeout_from_the_oldest(void **state)
{
    (void)state;
    watched *s = watched_new();
    const double timeout_s = 2.0;
    dpt_watchdog *w = dpt_watchdog_new(&fake_ops, s, timeout_s, 1.0);
    for (int i = 0; i < 3; i++)
        dpt_watchdog_watch(w, &s->items[i]);
    schedule sc = {.s = s, .n = 2, .ids = {0, 1}, .at_s = {1.2, 2.4}};
    pthread_t helper;
    double t0 = dpt_now_s();
    pthread_create(&helper, NULL, run_schedule, &sc);
    assert_true(dpt_watchdog_wait(w, 1));
    assert_false(dpt_watchdog_wait(w, 0)); /* returns when item 2 is declared stuck */
    double t_stuck = dpt_now_s() - t0;
    pthread_join(helper, NULL);
    assert_int_equal(atomic_load(&s->nfinished), 2);
    assert_int_equal(atomic_load(&s->nstuck), 1);
    assert_int_equal(s->stuck_id, 2);
    assert_string_equal(s->stuck_why, "(timeout)");
    /* waited: more than the timeout, less than the timeout and a few polls */
    assert_true(s->stuck_waited_s > timeout_s);
    assert_true(s->stuck_waited_s < timeout_s + 1.5);
    /* declared no sooner than item 1's end plus the timeout */
    assert_true(t_stuck > 2.4 + timeout_s - 0.05);
    assert_int_equal(dpt_watchdog_queued(w), 1);
    dpt_watchdog_free(w); /* the thread has ended: free does not wait for item 2 */
    free(s);
}

/* A failure the poll reports ends the watch at once, with the poll's words. */
static void test_failure_reported(void **state)
{
    (void)state;
    watched *s = watched_new();
    dpt_watchdog *w = dpt_watchdog_new(&fake_ops, s, 60.0, 0.2);
    atomic_store(&s->items[0].done, true);
    atomic_store(&s->items[1].failed, true);
    double t0 = dpt_now_s();
    for (int i = 0; i < 3; i++)
        dpt_watchdog_watch(w, &s->items[i]);
    assert_false(dpt_watchdog_wait(w, 0));
    assert_true(dpt_now_s() - t0 < 30.0); /* not the 60 s timeout */
    assert_int_equal(atomic_load(&s->nfinished), 1);
    assert_int_equal(s->stuck_id, 1);
    assert_string_equal(s->stuck_why, "item 1: a peer reported an error");
    dpt_watchdog_free(w);
    free(s);
}

/* free waits for the items still queued (they finish 0.1-0.2 s later), then ends the thread. */
static void test_free_drains(void **state)
{
    (void)state;
    watched *s = watched_new();
    dpt_watchdog *w = dpt_watchdog_new(&fake_ops, s, 30.0, 0.2);
    for (int i = 0; i < 4; i++)
        dpt_watchdog_watch(w, &s->items[i]);
    schedule sc = {.s = s, .n = 4, .ids = {0, 1, 2, 3}, .at_s = {0.1, 0.12, 0.15, 0.2}};
    pthread_t helper;
    pthread_create(&helper, NULL, run_schedule, &sc);
    dpt_watchdog_free(w);
    assert_int_equal(atomic_load(&s->nfinished), 4);
    pthread_join(helper, NULL);
    /* queued again after the queue emptied: its clock starts at its own queueing, and a
     * watchdog with nothing queued sleeps until then */
    w = dpt_watchdog_new(&fake_ops, s, 30.0, 0.2);
    dpt_sleep_ms(50);
    atomic_store(&s->items[4].done, true);
    dpt_watchdog_watch(w, &s->items[4]);
    assert_true(dpt_watchdog_wait(w, 0));
    assert_int_equal(atomic_load(&s->nfinished), 5);
    dpt_watchdog_free(w);
    free(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_in_queue_order),
        cmocka_unit_test(test_timeout_from_the_oldest),
        cmocka_unit_test(test_failure_reported),
        cmocka_unit_test(test_free_drains),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
