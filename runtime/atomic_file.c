/* atomic_file.c: a file that appears whole or not at all, and never through a planted link:
 * written beside its destination under an unpredictable name (O_EXCL|O_NOFOLLOW: an existing
 * name, a link included, is never opened), flushed and fsync'ed, renamed over the destination
 * (refused, naming it, when a link, a folder, a FIFO or another user's file stands there),
 * and the rename made durable (fsync of the folder), all relative to the folder's descriptor
 * (openat, renameat): a folder swapped while the file is written does not redirect it. For checkpoints, exports, JUnit reports and the
 * image-folder caches. Neither it nor a stream file (metrics, timelines) ever replaces a file
 * the run reads (dpt_input_note). Paths are measured, never cut to a buffer. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "dpt.h"
#include "error.h"

char *dpt_strf(const char *fmt, ...)
{
    va_list ap, again;
    va_start(ap, fmt);
    va_copy(again, ap);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    char *s = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (!s) dpt_fatal("out of host memory");
    vsnprintf(s, (size_t)n + 1, fmt, again);
    va_end(again);
    return s;
}

/* Six characters no one can predict (getrandom), as mkstemp's. */
static void random_suffix(char *six)
{
    static const char alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    unsigned char r[6];
    if (getrandom(r, sizeof r, 0) != (ssize_t)sizeof r) { /* no entropy source: time and pid, still O_EXCL */
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        uint64_t x = (uint64_t)ts.tv_nsec * 6364136223846793005u ^ (uint64_t)getpid() << 32 ^ (uint64_t)ts.tv_sec;
        for (int i = 0; i < 6; i++, x >>= 8)
            r[i] = (unsigned char)x;
    }
    for (int i = 0; i < 6; i++)
        six[i] = alphabet[r[i] % (sizeof alphabet - 1)];
}

/* The last component of a path (the file's name in its folder). */
static const char *base_name(const char *path)
{
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

/* The files this process read (dpt_input_note): by device and inode, so that another path to
 * one of them (./x.ini, a hard link) is the same file. A run's are a few dozen (the config, the
 * checkpoints loaded, the data and token files); up to MAX_INPUTS are kept in a fixed hash table
 * (open addressing, twice as many slots): no allocation and a lookup of a probe or two, so a
 * process that reads without end (a fuzzer's millions of inputs) stays small and fast. */
enum { MAX_INPUTS = 4096, INPUT_SLOTS = 2 * MAX_INPUTS };
typedef struct input_file {
    dev_t dev;
    ino_t ino;
    bool used, checkpoint;
    const char *what; /* a literal: "the config file" */
} input_file;
static input_file inputs[INPUT_SLOTS];
static int ninputs;
static pthread_mutex_t inputs_lock = PTHREAD_MUTEX_INITIALIZER; /* DataParallel's replicas load too */

/* The slot of (dev, ino): its entry, or the empty slot where it would go. */
static input_file *input_slot(dev_t dev, ino_t ino)
{
    uint64_t h = ((uint64_t)dev * 0x9e3779b97f4a7c15u) ^ ((uint64_t)ino * 0xc2b2ae3d27d4eb4fu);
    for (size_t i = (size_t)(h >> 32) % INPUT_SLOTS;; i = (i + 1) % INPUT_SLOTS)
        if (!inputs[i].used || (inputs[i].dev == dev && inputs[i].ino == ino)) return &inputs[i];
}

void dpt_input_note(const char *path, const char *what, bool checkpoint)
{
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISREG(st.st_mode)) return;
    pthread_mutex_lock(&inputs_lock);
    input_file *slot = input_slot(st.st_dev, st.st_ino);
    if (!slot->used && ninputs < MAX_INPUTS) {
        *slot = (input_file){st.st_dev, st.st_ino, true, checkpoint, what};
        ninputs++;
    }
    pthread_mutex_unlock(&inputs_lock);
}

/* What the file st describes is among the inputs a writer may not replace ("the config
 * file"), or NULL; IS_INPUT says so in a refusal. */
#define IS_INPUT "it is %s this run reads (the same file, by this name or another)"
static const char *input_at(const struct stat *st, bool replaces_checkpoints)
{
    pthread_mutex_lock(&inputs_lock);
    const input_file *slot = input_slot(st->st_dev, st->st_ino);
    const char *what = slot->used && !(slot->checkpoint && replaces_checkpoints) ? slot->what : NULL;
    pthread_mutex_unlock(&inputs_lock);
    return what;
}

/* Whether dptrain may put its file at out's name in the folder `dir`: the name is free or holds
 * this user's regular file. Refused, naming out: a symbolic link (planted in a shared folder;
 * renaming over it would be harmless, but a run that finds one is told, not quietly mended), a
 * folder, a FIFO or a device, another user's file, or a file this run reads (an export or
 * predictions given the checkpoint's own path would replace the weights it came from). */
static bool destination_ok(int dir, const char *out, bool replaces_checkpoints, dpt_error *err)
{
    struct stat st;
    if (fstatat(dir, base_name(out), &st, AT_SYMLINK_NOFOLLOW) != 0)
        return true; /* nothing there (or unreadable: the rename says) */
    const char *input = S_ISREG(st.st_mode) ? input_at(&st, replaces_checkpoints) : NULL;
    if (input)
        return dpt_errorf(err, "cannot write %s: " IS_INPUT "\nHINT: choose another path", out, input);
    char owner[64];
    const char *problem = NULL;
    if (S_ISLNK(st.st_mode))
        problem = "a symbolic link stands at its name, and dptrain does not replace links (one planted in a shared "
                  "folder is not the run's file)";
    else if (S_ISDIR(st.st_mode))
        problem = "a folder stands at its name";
    else if (!S_ISREG(st.st_mode))
        problem = "something that is not a regular file (a FIFO, a device or a socket) stands at its name";
    else if (st.st_uid != geteuid()) {
        snprintf(owner, sizeof owner, "the file at its name belongs to another user (uid %u)", (unsigned)st.st_uid);
        problem = owner;
    }
    return !problem ||
           dpt_errorf(err, "cannot write %s: %s\nHINT: remove it if it is yours, or choose another path", out, problem);
}

static bool atomic_open(dpt_atomic_file *a, const char *out, bool replaces_checkpoints, dpt_error *err)
{
    memset(a, 0, sizeof *a);
    a->dir = -1;
    const char *slash = strrchr(out, '/'), *name = base_name(out);
    char *dir = slash ? dpt_strf("%.*s", (int)(slash - out), out) : dpt_strf(".");
    if (!*name) {
        free(dir);
        return dpt_errorf(err, "cannot write %s: it names a folder, not a file\nHINT: give a file name", out);
    }
    /* The folder, opened once: the temporary is created in it, renamed within it and the
     * folder fsync'ed through this descriptor, so a folder swapped for another (or for a link)
     * while the file is written does not redirect it. */
    a->dir = open(*dir ? dir : "/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    int fd = -1, e = a->dir < 0 ? errno : 0;
    if (a->dir >= 0 && !destination_ok(a->dir, out, replaces_checkpoints, err)) { /* refused before anything is written */
        close(a->dir);
        free(dir);
        memset(a, 0, sizeof *a);
        return false;
    }
    /* DIR/.NAME.XXXXXX: hidden, and never a name a reader of DIR looks for */
    a->tmp_name = dpt_strf(".%s.XXXXXX", name);
    for (int tries = 0; a->dir >= 0 && fd < 0 && tries < 100; tries++) {
        random_suffix(a->tmp_name + strlen(a->tmp_name) - 6);
        /* O_EXCL|O_NOFOLLOW: a name no one predicted, never an existing file or a planted link */
        fd = openat(a->dir, a->tmp_name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        e = fd < 0 ? errno : 0;
        if (e && e != EEXIST) break;
    }
    if (fd < 0) {
        if (a->dir >= 0) close(a->dir);
        free(dir), free(a->tmp_name);
        memset(a, 0, sizeof *a);
        return dpt_errorf(err, "cannot write %s: %s\nHINT: %s", out, strerror(e),
                          e == ENAMETOOLONG ? "a shorter path" : "the folder must exist and be writable");
    }
    a->f = fdopen(fd, "wb");
    if (!a->f) dpt_fatal("out of host memory");
    a->tmp = dpt_strf("%s/%s", dir, a->tmp_name);
    a->out = dpt_strf("%s", out);
    a->replaces_checkpoints = replaces_checkpoints;
    free(dir);
    return true;
}

bool dpt_atomic_file_open(dpt_atomic_file *a, const char *out, dpt_error *err)
{
    return atomic_open(a, out, false, err);
}

bool dpt_atomic_checkpoint_open(dpt_atomic_file *a, const char *out, dpt_error *err)
{
    return atomic_open(a, out, true, err);
}

bool dpt_atomic_file_close(dpt_atomic_file *a, bool ok, dpt_error *err)
{
    if (!a->f) return false;
    if (ok && ferror(a->f)) ok = dpt_errorf(err, "writing %s failed\nHINT: is the disk full?", a->tmp);
    if (ok && (fflush(a->f) != 0 || fsync(fileno(a->f)) != 0))
        ok = dpt_errorf(err, "cannot flush %s: %s\nHINT: is the disk full?", a->tmp, strerror(errno));
    if (ok && fchmod(fileno(a->f), 0644) != 0) ok = dpt_errorf(err, "cannot chmod %s: %s", a->tmp, strerror(errno));
    if (fclose(a->f) != 0 && ok) ok = dpt_errorf(err, "cannot close %s: %s", a->tmp, strerror(errno));
    if (ok) ok = destination_ok(a->dir, a->out, a->replaces_checkpoints, err); /* or one appeared meanwhile */
    if (ok && renameat(a->dir, a->tmp_name, a->dir, base_name(a->out)) != 0)
        ok = dpt_errorf(err, "cannot rename %s to %s: %s", a->tmp, a->out, strerror(errno));
    if (!ok) unlinkat(a->dir, a->tmp_name, 0);
    if (ok) fsync(a->dir); /* the rename itself durable: the folder's entry on disk */
    close(a->dir);
    free(a->tmp), free(a->out), free(a->tmp_name);
    memset(a, 0, sizeof *a);
    return ok;
}

/* A file written as it goes (metrics, a timeline: readers follow it live, so no temporary):
 * created or truncated through no link (O_NOFOLLOW: a symbolic link at the name is refused),
 * never blocking on a FIFO (opened non-blocking, then checked), and refused unless it is a
 * plain file with one name: a FIFO, a device or a hard link to another file (whose other name
 * a planted link would make us overwrite) is not dptrain's to write. */
FILE *dpt_stream_file_open(const char *path, const char *what, const char *key, dpt_error *err)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0644);
    if (fd < 0) {
        int e = errno;
        if (e == ELOOP)
            dpt_errorf(err, "cannot write %s %s: it is a symbolic link, and dptrain does not write through links (one "
                            "planted in a shared folder would make it overwrite another file)\nHINT: remove the link "
                            "or choose another path with %s",
                       what, path, key);
        else if (e == ENXIO) /* a FIFO without a reader (non-blocking open for writing) */
            dpt_errorf(err, "cannot write %s %s: it is not a regular file (a FIFO, a device or a socket)\nHINT: remove "
                            "it or choose another path with %s",
                       what, path, key);
        else
            dpt_errorf(err, "cannot write %s %s: %s\nHINT: check %s and that its folder exists and is writable",
                       what, path, strerror(e), key);
        return NULL;
    }
    struct stat st;
    const char *why = NULL, *input = NULL;
    char *is_input = NULL; /* the most telling reason first: a file this run reads */
    if (fstat(fd, &st) != 0) why = strerror(errno);
    else if (!S_ISREG(st.st_mode)) why = "it is not a regular file (a FIFO, a device or a socket)";
    else if ((input = input_at(&st, false)))
        why = is_input = dpt_strf(IS_INPUT, input);
    else if (st.st_nlink > 1) why = "it has another name (a hard link): writing it would change that file too";
    else if (st.st_uid != geteuid()) why = "it belongs to another user";
    if (!why && (fcntl(fd, F_SETFL, 0) != 0 || ftruncate(fd, 0) != 0)) why = strerror(errno);
    if (why) {
        close(fd);
        dpt_errorf(err, "cannot write %s %s: %s\nHINT: %s another path with %s", what, path, why,
                   is_input ? "choose" : "remove it or choose", key);
        free(is_input);
        return NULL;
    }
    FILE *f = fdopen(fd, "w");
    if (!f) dpt_fatal("out of host memory");
    return f;
}

bool dpt_read_at(int fd, void *buf, size_t n, uint64_t at, size_t *got)
{
    *got = 0;
    while (*got < n) {
        ssize_t r = pread(fd, (char *)buf + *got, n - *got, (off_t)(at + *got));
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return false;
        if (r == 0) return true;
        *got += (size_t)r;
    }
    return true;
}
