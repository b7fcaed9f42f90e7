/* atomic_file.c: a file that appears whole or not at all, and never through a planted link:
 * written beside its destination under a name mkstemp makes (O_EXCL: an existing name, a link
 * included, is never opened), flushed and fsync'ed, then renamed over the destination. For
 * exports, JUnit reports and the image-folder caches; checkpoints do the same in checkpoint.c
 * (with their own crash-injection hook). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dpt.h"
#include "error.h"

bool dpt_atomic_file_open(const char *out, char *tmp, size_t cap, FILE **f, dpt_error *err)
{
    const char *slash = strrchr(out, '/');
    int dirlen = slash ? (int)(slash - out) : 0;
    if ((size_t)snprintf(tmp, cap, "%.*s%s.%s.XXXXXX", dirlen, out, slash ? "/" : "", slash ? slash + 1 : out) >= cap)
        return dpt_errorf(err, "the path %s is too long", out);
    int fd = mkstemp(tmp); /* O_EXCL, a name no one predicted: not a link someone planted */
    if (fd < 0)
        return dpt_errorf(err, "cannot write %s: %s\nHINT: the folder must exist and be writable", out,
                          strerror(errno));
    *f = fdopen(fd, "wb");
    if (!*f) dpt_fatal("out of host memory");
    return true;
}

bool dpt_atomic_file_close(FILE *f, const char *tmp, const char *out, bool ok, dpt_error *err)
{
    if (ok && (fflush(f) != 0 || fsync(fileno(f)) != 0)) ok = dpt_errorf(err, "cannot flush %s: %s", tmp, strerror(errno));
    if (fclose(f) != 0 && ok) ok = dpt_errorf(err, "cannot close %s: %s", tmp, strerror(errno));
    if (ok && chmod(tmp, 0644) != 0) ok = dpt_errorf(err, "cannot chmod %s: %s", tmp, strerror(errno));
    if (ok && rename(tmp, out) != 0) ok = dpt_errorf(err, "cannot rename %s to %s: %s", tmp, out, strerror(errno));
    if (!ok) unlink(tmp);
    return ok;
}

