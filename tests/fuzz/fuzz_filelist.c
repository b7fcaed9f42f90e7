/* fuzz_filelist.c: the folder source's file-list cache (data/folder.c's read_cache: the file a
 * walk of a million images leaves beside the set, which anyone who can write the data folder
 * can rewrite). Input: one byte of options, then the file; with option bit 0 the harness puts a
 * valid header first (the magic, the root, the root folder's real mtime), so the fuzzer works
 * on the classes and files sections the mtime check would otherwise hide. A cache is either
 * refused or gives a listing whose every name lies inside the root, each file under its own
 * class's folder; never a crash or a read out of bounds. */
#include "tests/fuzz/fuzz_common.h"
#include <sys/stat.h>

#include "data/folder.c" /* the static reader itself */

static char root[64];
static struct stat root_st;

static bool inside(const char *rel)
{
    return *rel && *rel != '/' && strcmp(rel, "..") && strncmp(rel, "../", 3) && !strstr(rel, "/../") &&
           !strstr(rel, "//") && (strlen(rel) < 3 || strcmp(rel + strlen(rel) - 3, "/.."));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    if (!root[0]) {
        snprintf(root, sizeof root, "/tmp/dpt_fuzz_list_XXXXXX");
        if (!mkdtemp(root) || stat(root, &root_st) != 0) abort();
    }
    char *text = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&text, &len);
    if (data[0] & 1)
        fprintf(mem, "%s\nroot %s\ndirs 1\n%lld %ld .\n", LIST_MAGIC, root, (long long)root_st.st_mtim.tv_sec,
                root_st.st_mtim.tv_nsec);
    fwrite(data + 1, 1, size - 1, mem);
    fclose(mem);
    char path[64];
    int fd = fuzz_file((const uint8_t *)text, len, path, sizeof path);
    listing l;
    if (read_cache(path, root, &l)) {
        if (l.nclasses <= 0 || l.n <= 0) abort();
        for (int i = 0; i < l.nclasses; i++)
            if (!inside(l.classes[i]) || strchr(l.classes[i], '/')) abort();
        for (int64_t i = 0; i < l.n; i++) {
            if (l.cls[i] < 0 || l.cls[i] >= l.nclasses || !inside(l.files[i])) abort();
            size_t k = strlen(l.classes[l.cls[i]]);
            if (strncmp(l.files[i], l.classes[l.cls[i]], k) || l.files[i][k] != '/') abort();
        }
        listing_free(&l);
    }
    close(fd);
    free(text);
    return 0;
}
