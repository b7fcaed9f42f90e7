/* timeline.c: Chrome-trace JSON ("traceEvents" with complete "X" events, microseconds). Spans
 * come from the main thread and the communication thread, so appends take a lock. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "dpt.h"
#include "error.h"
#include "log.h"

struct dpt_timeline {
    FILE *file;
    int rank;
    double origin_s;
    bool first;
    pthread_mutex_t mu;
};

dpt_timeline *dpt_timeline_open(const char *path, int rank, dpt_error *err)
{
    FILE *f = dpt_stream_file_open(path, "the timeline", "[log] timeline", err);
    if (!f) return NULL;
    dpt_timeline *tl = calloc(1, sizeof *tl);
    if (!tl) dpt_fatal("out of host memory for a timeline");
    tl->file = f;
    tl->rank = rank;
    tl->origin_s = dpt_now_s();
    tl->first = true;
    pthread_mutex_init(&tl->mu, NULL);
    fprintf(f, "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n");
    fprintf(f, "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"args\":{\"name\":\"rank %d\"}},\n", rank,
            rank);
    fprintf(f,
            "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"args\":{\"name\":\"compute\"}},\n",
            rank);
    fprintf(
        f,
        "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":1,\"args\":{\"name\":\"communication\"}}",
        rank);
    tl->first = false;
    return tl;
}

void dpt_timeline_span(dpt_timeline *tl, const char *name, int tid, double t0_s, double t1_s)
{
    if (!tl) return;
    pthread_mutex_lock(&tl->mu);
    fprintf(tl->file, ",\n{\"name\":\"%s\",\"ph\":\"X\",\"pid\":%d,\"tid\":%d,\"ts\":%.1f,\"dur\":%.1f}",
            name, tl->rank, tid, 1e6 * (t0_s - tl->origin_s), 1e6 * (t1_s - t0_s));
    pthread_mutex_unlock(&tl->mu);
}

void dpt_timeline_close(dpt_timeline *tl)
{
    if (!tl) return;
    fprintf(tl->file, "\n]}\n");
    fclose(tl->file);
    pthread_mutex_destroy(&tl->mu);
    free(tl);
}
