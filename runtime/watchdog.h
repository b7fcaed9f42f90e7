/* watchdog.h: a thread that watches work another thread queued on a device, so that thread
 * need not wait for it. The NCCL communicator (comm_nccl.c) queues each step's AllReduces
 * behind an event and goes on: the watchdog polls the items in the order they were queued,
 * hands each finished one back (its timing read there), and ends the job when one reports an
 * asynchronous error or makes no progress for timeout_s (counted from when the item before it
 * finished, or from when it was queued if later: work queued ahead is not charged for the
 * work in front of it). PyTorch's ProcessGroupNCCL and XLA watch NCCL the same way. The
 * device calls stay with the caller (ops), so the logic is tested on the CPU. Internal. */
#ifndef DPT_WATCHDOG_H
#define DPT_WATCHDOG_H

#include <stdbool.h>
#include <stddef.h>

typedef enum dpt_watch_state { DPT_WATCH_DONE, DPT_WATCH_PENDING, DPT_WATCH_FAILED } dpt_watch_state;

typedef struct dpt_watchdog_ops {
    /* On the watchdog's thread before anything else (e.g. cudaSetDevice). NULL: none. */
    void (*start)(void *user);
    /* Where item stands; FAILED writes why (one line). */
    dpt_watch_state (*poll)(void *user, void *item, char *why, size_t why_size);
    /* item finished: its results may be read now. NULL: none. */
    void (*finished)(void *user, void *item);
    /* item failed (why from poll) or waited timeout_s (why NULL): end the job. In a program it
     * does not return; if it returns (tests), the watchdog watches nothing more. */
    void (*stuck)(void *user, void *item, const char *why, double waited_s);
} dpt_watchdog_ops;

typedef struct dpt_watchdog dpt_watchdog;

/* Polls every poll_ms while an item is queued, sleeps while none is. */
dpt_watchdog *dpt_watchdog_new(const dpt_watchdog_ops *ops, void *user, double timeout_s, double poll_ms);
/* Queue item behind the ones queued before it (the caller gives it up until `finished`). */
void dpt_watchdog_watch(dpt_watchdog *w, void *item);
/* Wait until at most `most` items are queued (0: every one finished); false when the
 * watchdog stopped instead (stuck returned). */
bool dpt_watchdog_wait(dpt_watchdog *w, int most);
/* Items queued and not yet finished. */
int dpt_watchdog_queued(dpt_watchdog *w);
/* Waits for every queued item (each under the timeout), then stops the thread. */
void dpt_watchdog_free(dpt_watchdog *w);

#endif
