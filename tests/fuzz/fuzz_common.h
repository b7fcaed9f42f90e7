/* fuzz_common.h: what the libFuzzer harnesses share: bytes to a file path without touching
 * the disk (a memfd under /proc/self/fd), for readers that take paths. */
#ifndef DPT_FUZZ_COMMON_H
#define DPT_FUZZ_COMMON_H

#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* A file holding data, named by path (size >= 64); close the returned fd when done. */
static inline int fuzz_file(const uint8_t *data, size_t size, char *path, size_t path_size)
{
    int fd = memfd_create("dpt_fuzz", 0);
    if (fd < 0) abort();
    size_t done = 0;
    while (done < size) {
        ssize_t n = write(fd, data + done, size - done);
        if (n <= 0) abort();
        done += (size_t)n;
    }
    snprintf(path, path_size, "/proc/self/fd/%d", fd);
    return fd;
}

#endif
