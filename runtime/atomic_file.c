/* atomic_file.c: a file that appears whole or not at all, and never through a planted link:
 * written beside its destination under a name mkstemp makes (O_EXCL: an existing name, a link
 * included, is never opened), flushed and fsync'ed, renamed over the destination, and the
 * rename made durable (fsync of the folder). For checkpoints, exports, JUnit reports and the
 * image-folder caches. Paths are measured, never cut to a buffer. */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
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

bool dpt_atomic_file_open(dpt_atomic_file *a, const char *out, dpt_error *err)
{
    memset(a, 0, sizeof *a);
    const char *slash = strrchr(out, '/');
    int dirlen = slash ? (int)(slash - out) : 0;
    /* DIR/.NAME.XXXXXX: hidden, and never a name a reader of DIR looks for */
    a->tmp = dpt_strf("%.*s%s.%s.XXXXXX", dirlen, out, slash ? "/" : "", slash ? slash + 1 : out);
    int fd = mkstemp(a->tmp); /* O_EXCL, a name no one predicted: not a link someone planted */
    if (fd < 0) {
        int e = errno;
        free(a->tmp), a->tmp = NULL;
        return dpt_errorf(err, "cannot write %s: %s\nHINT: %s", out, strerror(e),
                          e == ENAMETOOLONG ? "a shorter path" : "the folder must exist and be writable");
    }
    a->f = fdopen(fd, "wb");
    if (!a->f) dpt_fatal("out of host memory");
    a->out = dpt_strf("%s", out);
    return true;
}

bool dpt_atomic_file_close(dpt_atomic_file *a, bool ok, dpt_error *err)
{
    if (!a->f) return false;
    if (ok && ferror(a->f)) ok = dpt_errorf(err, "writing %s failed\nHINT: is the disk full?", a->tmp);
    if (ok && (fflush(a->f) != 0 || fsync(fileno(a->f)) != 0))
        ok = dpt_errorf(err, "cannot flush %s: %s\nHINT: is the disk full?", a->tmp, strerror(errno));
    if (fclose(a->f) != 0 && ok) ok = dpt_errorf(err, "cannot close %s: %s", a->tmp, strerror(errno));
    if (ok && chmod(a->tmp, 0644) != 0) ok = dpt_errorf(err, "cannot chmod %s: %s", a->tmp, strerror(errno));
    if (ok && rename(a->tmp, a->out) != 0)
        ok = dpt_errorf(err, "cannot rename %s to %s: %s", a->tmp, a->out, strerror(errno));
    if (!ok) unlink(a->tmp);
    if (ok) { /* the rename itself durable: the folder's entry on disk */
        char *slash = strrchr(a->out, '/');
        if (slash) *slash = '\0';
        int dfd = open(slash ? (*a->out ? a->out : "/") : ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd >= 0) fsync(dfd), close(dfd);
    }
    free(a->tmp), free(a->out);
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
    const char *why = NULL;
    if (fstat(fd, &st) != 0) why = strerror(errno);
    else if (!S_ISREG(st.st_mode)) why = "it is not a regular file (a FIFO, a device or a socket)";
    else if (st.st_nlink > 1) why = "it has another name (a hard link): writing it would change that file too";
    else if (st.st_uid != geteuid()) why = "it belongs to another user";
    if (!why && (fcntl(fd, F_SETFL, 0) != 0 || ftruncate(fd, 0) != 0)) why = strerror(errno);
    if (why) {
        close(fd);
        dpt_errorf(err, "cannot write %s %s: %s\nHINT: remove it or choose another path with %s", what, path, why,
                   key);
        return NULL;
    }
    FILE *f = fdopen(fd, "w");
    if (!f) dpt_fatal("out of host memory");
    return f;
}
