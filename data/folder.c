/* folder.c: the ImageFolder layout. The file list is what torchvision's ImageFolder builds
 * (class folders in sorted order, each walked recursively, files with an image extension,
 * sorted by folder then name), made once and cached so a million-file start does not walk
 * the tree again: beside the set's folder (dir/.dptrain-files-train), or, when that is
 * read-only, in the checkpoint folder. The cache records the modification time of every folder it walked;
 * adding, removing or renaming a file or folder changes one of them and the tree is walked
 * again. Images are decoded per sample by the loader (image.c). */
#define _GNU_SOURCE /* d_type, strcasecmp */
#include "folder.h"

#include <dirent.h>
#include <pthread.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data.h"
#include "../runtime/error.h"
#include "../runtime/registry.h"
#include "../runtime/rng.h"

#define LIST_MAGIC "dptrain file list 1"

/* A walk's result: this folder's classes and files, labels local to it. */
typedef struct listing {
    int nclasses;
    char **classes;
    int64_t n, cap;
    char **files; /* "class/sub/x.jpg" */
    int *cls;
    int64_t ignored;
    int ndirs, dirs_cap;
    char **dirs; /* relative folders walked ("." = the root), for the cache's check */
    struct timespec *mtime;
    /* the folders of the class being walked, by device and inode: each visited once however
     * many links lead to it (22 levels of two links each would otherwise be 2^22 walks) */
    uint64_t (*seen)[2];
    int64_t nseen, seen_cap;
    /* named like an image but not a regular file (a FIFO, a device, a link to nothing or to
     * itself): ignored, and said so with the first one's path (a walk's, not the cache's) */
    int64_t odd;
    char *odd_first;
} listing;

static uint64_t seen_hash(uint64_t dev, uint64_t ino)
{
    uint64_t h = (dev * 0x9e3779b97f4a7c15ULL) ^ (ino + 0x632be59bd9b4e019ULL);
    return h ^ (h >> 29);
}

/* Whether the folder is new to this class's walk (and now marked seen). */
static bool first_visit(listing *l, const struct stat *st);

static void listing_free(listing *l)
{
    for (int i = 0; i < l->nclasses; i++)
        free(l->classes[i]);
    for (int64_t i = 0; i < l->n; i++)
        free(l->files[i]);
    for (int i = 0; i < l->ndirs; i++)
        free(l->dirs[i]);
    free(l->classes), free(l->files), free(l->cls), free(l->dirs), free(l->mtime), free(l->seen), free(l->odd_first);
    memset(l, 0, sizeof *l);
}

static char *xstrdup(const char *s)
{
    char *d = strdup(s);
    if (!d) dpt_fatal("out of host memory listing image files");
    return d;
}

static void *xrealloc(void *p, size_t n)
{
    void *q = realloc(p, n ? n : 1);
    if (!q) dpt_fatal("out of host memory listing image files");
    return q;
}

static bool first_visit(listing *l, const struct stat *st)
{
    if (2 * (l->nseen + 1) > l->seen_cap) { /* open addressing, at most half full; rehash */
        int64_t cap = l->seen_cap ? 2 * l->seen_cap : 64;
        uint64_t(*grown)[2] = calloc((size_t)cap, sizeof *grown);
        if (!grown) dpt_fatal("out of host memory listing image files");
        for (int64_t i = 0; i < l->seen_cap; i++)
            if (l->seen[i][1]) {
                int64_t at = (int64_t)(seen_hash(l->seen[i][0], l->seen[i][1]) & (uint64_t)(cap - 1));
                while (grown[at][1])
                    at = (at + 1) & (cap - 1);
                grown[at][0] = l->seen[i][0], grown[at][1] = l->seen[i][1];
            }
        free(l->seen);
        l->seen = grown, l->seen_cap = cap;
    }
    uint64_t dev = (uint64_t)st->st_dev, ino = (uint64_t)st->st_ino + 1; /* +1: 0 marks a free slot */
    int64_t at = (int64_t)(seen_hash(dev, ino) & (uint64_t)(l->seen_cap - 1));
    for (; l->seen[at][1]; at = (at + 1) & (l->seen_cap - 1))
        if (l->seen[at][0] == dev && l->seen[at][1] == ino) return false;
    l->seen[at][0] = dev, l->seen[at][1] = ino;
    l->nseen++;
    return true;
}

static bool image_name(const char *name)
{
    const char *dot = strrchr(name, '.');
    return dot && (!strcasecmp(dot, ".jpg") || !strcasecmp(dot, ".jpeg") || !strcasecmp(dot, ".png"));
}

static void add_dir(listing *l, const char *rel, const struct stat *st)
{
    if (l->ndirs == l->dirs_cap) {
        l->dirs_cap = l->dirs_cap ? 2 * l->dirs_cap : 64;
        l->dirs = xrealloc(l->dirs, (size_t)l->dirs_cap * sizeof *l->dirs);
        l->mtime = xrealloc(l->mtime, (size_t)l->dirs_cap * sizeof *l->mtime);
    }
    l->dirs[l->ndirs] = xstrdup(rel);
    l->mtime[l->ndirs++] = st->st_mtim;
}

static void add_file(listing *l, const char *rel, int cls)
{
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 1024;
        l->files = xrealloc(l->files, (size_t)l->cap * sizeof *l->files);
        l->cls = xrealloc(l->cls, (size_t)l->cap * sizeof *l->cls);
    }
    l->files[l->n] = xstrdup(rel);
    l->cls[l->n++] = cls;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The entries of one folder, sorted by name (no "." or ".."). */
static int read_names(const char *path, char ***names, dpt_error *err)
{
    DIR *d = opendir(path);
    if (!d) return dpt_errorf(err, "%s: cannot read the folder: %s", path, strerror(errno)), -1;
    int n = 0, cap = 0;
    char **v = NULL;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        if (n == cap) cap = cap ? 2 * cap : 64, v = xrealloc(v, (size_t)cap * sizeof *v);
        v[n++] = xstrdup(e->d_name);
    }
    closedir(d);
    if (n > 1) qsort(v, (size_t)n, sizeof *v, cmp_str);
    *names = v;
    return n;
}

static void free_names(char **v, int n)
{
    for (int i = 0; i < n; i++)
        free(v[i]);
    free(v);
}

/* Walk root/rel: its files (sorted) first, then its folders (sorted), as torchvision's
 * sorted(os.walk(...)) orders them; symbolic links to folders are followed (followlinks=True),
 * to a depth of 32, each real folder once per class (the first path that reaches it). */
static bool walk(const char *root, const char *rel, int cls, int depth, listing *l, dpt_error *err)
{
    char path[8192];
    snprintf(path, sizeof path, "%s/%s", root, rel);
    struct stat st;
    if (stat(path, &st) != 0) return dpt_errorf(err, "%s: %s", path, strerror(errno));
    if (!first_visit(l, &st)) return true; /* reached before through another link */
    add_dir(l, rel, &st);
    char **names;
    int n = read_names(path, &names, err);
    if (n < 0) return false;
    /* one stat an entry (a walk of a million files is the start-up the cache saves) */
    enum { NOT_A_FILE, REGULAR, FOLDER } *kind = xrealloc(NULL, (size_t)n * sizeof *kind);
    bool ok = true;
    char sub[8192 + 512];
    for (int i = 0; i < n && ok; i++) {
        if ((size_t)snprintf(sub, sizeof sub, "%s/%s", path, names[i]) >= 4096)
            ok = dpt_errorf(err, "%s/%s: path longer than 4096 bytes", path, names[i]);
        else /* a FIFO, socket, device or dangling link is no image */
            kind[i] = stat(sub, &st) != 0 ? NOT_A_FILE
                    : S_ISDIR(st.st_mode) ? FOLDER
                    : S_ISREG(st.st_mode) ? REGULAR
                                          : NOT_A_FILE;
    }
    for (int pass = 0; pass < 2 && ok; pass++)
        for (int i = 0; i < n && ok; i++) {
            snprintf(sub, sizeof sub, "%s/%s", rel, names[i]);
            if (pass == 0 && kind[i] != FOLDER) {
                if (kind[i] == REGULAR && image_name(names[i]))
                    add_file(l, sub, cls);
                else
                    l->ignored++;
                if (kind[i] == NOT_A_FILE && image_name(names[i]) && !l->odd++) l->odd_first = dpt_strf("%s/%s", root, sub);
            } else if (pass == 1 && kind[i] == FOLDER) {
                if (depth >= 32)
                    ok = dpt_errorf(err, "%s/%s: folders nested more than 32 deep (a link loop?)\nHINT: class "
                                         "folders hold images, or folders of images, not links back up the tree",
                                    root, sub);
                else
                    ok = walk(root, sub, cls, depth + 1, l, err);
            }
        }
    free(kind);
    free_names(names, n);
    return ok;
}

static bool scan(const char *root, listing *l, dpt_error *err)
{
    memset(l, 0, sizeof *l);
    struct stat st;
    if (stat(root, &st) != 0 || !S_ISDIR(st.st_mode))
        return dpt_errorf(err, "%s: no such folder\nHINT: [data] source = folder reads dir/train/<class>/*.jpg and "
                               "dir/val/<class>/*.jpg (torchvision's ImageFolder layout); "
                               "scripts/make_image_folder.sh writes a small one",
                          root);
    add_dir(l, ".", &st);
    char **names;
    int n = read_names(root, &names, err);
    if (n < 0) return false;
    char sub[8192];
    for (int i = 0; i < n; i++) {
        snprintf(sub, sizeof sub, "%s/%s", root, names[i]);
        if (stat(sub, &st) == 0 && S_ISDIR(st.st_mode)) {
            l->classes = xrealloc(l->classes, (size_t)(l->nclasses + 1) * sizeof *l->classes);
            l->classes[l->nclasses++] = xstrdup(names[i]);
        } else {
            l->ignored++;
        }
    }
    free_names(names, n);
    if (!l->nclasses)
        return dpt_errorf(err, "%s: no class folders in it\nHINT: put each class's images in a folder of its own "
                               "under it (%s/<class>/<image>.jpg)",
                          root, root);
    for (int c = 0; c < l->nclasses; c++) {
        int64_t before = l->n;
        l->nseen = 0; /* a folder linked from two classes belongs to both */
        if (l->seen) memset(l->seen, 0, (size_t)l->seen_cap * sizeof *l->seen);
        if (!walk(root, l->classes[c], c, 0, l, err)) return false;
        if (l->n == before)
            return dpt_errorf(err, "%s/%s: class folder without a .jpg, .jpeg or .png file\nHINT: add its images, "
                                   "or remove the folder (it would be a class that never occurs)",
                              root, l->classes[c]);
    }
    return true;
}

/* ---------------------------------------------------------------- the cache */

/* Beside the set's folder, not in it: writing a file into root would change the mtime the
 * cache records for it. dir/train's list is dir/.dptrain-files-train. */
static void cache_paths(const char *root, const char *cache_dir, char own[4200], char other[4200])
{
    const char *slash = strrchr(root, '/');
    int parent = slash ? (int)(slash - root) : 0;
    snprintf(own, 4200, "%.*s%s.dptrain-files-%s", parent, root, slash ? "/" : "", slash ? slash + 1 : root);
    other[0] = '\0';
    if (cache_dir && *cache_dir) {
        char abs[4096];
        const char *key = realpath(root, abs) ? abs : root;
        snprintf(other, 4200, "%s/dptrain-files-%016llx", cache_dir,
                 (unsigned long long)dpt_hash_bytes(DPT_HASH_SEED, key, strlen(key)));
    }
}

/* false with err's first line saying why (a read-only folder, a FIFO or link at the name) */
static bool write_cache(const char *path, const char *root, const listing *l, dpt_error *err)
{
    dpt_atomic_file af;
    /* ranks and DataParallel replicas may write at once: each its own unpredictable file
     * (mkstemp, never through a link planted in a shared data folder), renamed over */
    if (!dpt_atomic_file_open(&af, path, err)) return false;
    FILE *f = af.f;
    fprintf(f, "%s\nroot %s\ndirs %d\n", LIST_MAGIC, root, l->ndirs);
    for (int i = 0; i < l->ndirs; i++)
        fprintf(f, "%lld %ld %s\n", (long long)l->mtime[i].tv_sec, l->mtime[i].tv_nsec, l->dirs[i]);
    fprintf(f, "classes %d\n", l->nclasses);
    for (int i = 0; i < l->nclasses; i++)
        fprintf(f, "%s\n", l->classes[i]);
    fprintf(f, "files %lld ignored %lld\n", (long long)l->n, (long long)l->ignored);
    for (int64_t i = 0; i < l->n; i++)
        fprintf(f, "%d %s\n", l->cls[i], l->files[i]);
    return dpt_atomic_file_close(&af, true, err);
}

static bool read_line(FILE *f, char *buf, size_t size)
{
    if (!fgets(buf, (int)size, f)) return false;
    size_t n = strlen(buf);
    if (!n || buf[n - 1] != '\n') return false;
    buf[n - 1] = '\0';
    return true;
}

/* A path a cache may name: relative to the root and inside it (no leading '/', no empty or
 * ".." component). A cache in a shared data folder is anyone's to write: one naming
 * "../../etc/shadow" must not make the trainer read it as an image. */
static bool inside_root(const char *rel)
{
    if (!*rel || *rel == '/') return false;
    for (const char *c = rel; c;) {
        const char *slash = strchr(c, '/');
        size_t n = slash ? (size_t)(slash - c) : strlen(c);
        if (n == 0 || (n == 2 && c[0] == '.' && c[1] == '.')) return false;
        c = slash ? slash + 1 : NULL;
    }
    return true;
}

/* The cached listing, if the file is one and every folder it walked is unchanged: and every
 * name in it inside the root, each file under its own class's folder (anything else is not
 * a cache this build wrote: walked again). */
static bool read_cache(const char *path, const char *root, listing *l)
{
    memset(l, 0, sizeof *l);
    /* a FIFO or device planted where the cache goes is no cache: not opened blocking, not read */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    struct stat fst;
    FILE *f = fd >= 0 && fstat(fd, &fst) == 0 && S_ISREG(fst.st_mode) ? fdopen(fd, "r") : NULL;
    if (!f) {
        if (fd >= 0) close(fd);
        return false;
    }
    char line[8400], sub[8400];
    long long a, b;
    int nd = 0, nc = 0;
    bool ok = read_line(f, line, sizeof line) && !strcmp(line, LIST_MAGIC) && read_line(f, line, sizeof line) &&
              !strncmp(line, "root ", 5) && !strcmp(line + 5, root) && read_line(f, line, sizeof line) &&
              sscanf(line, "dirs %d", &nd) == 1 && nd > 0;
    for (int i = 0; ok && i < nd; i++) {
        int at = 0;
        ok = read_line(f, line, sizeof line) && sscanf(line, "%lld %lld %n", &a, &b, &at) == 2 && at > 0 &&
             (!strcmp(line + at, ".") || inside_root(line + at));
        struct stat st;
        if (ok) {
            snprintf(sub, sizeof sub, "%s/%s", root, line + at);
            ok = stat(sub, &st) == 0 && st.st_mtim.tv_sec == a && st.st_mtim.tv_nsec == b;
        }
        if (ok) add_dir(l, line + at, &st);
    }
    ok = ok && read_line(f, line, sizeof line) && sscanf(line, "classes %d", &nc) == 1 && nc > 0;
    for (int i = 0; ok && i < nc; i++) {
        ok = read_line(f, line, sizeof line) && inside_root(line) && !strchr(line, '/') && strcmp(line, ".");
        if (ok) {
            l->classes = xrealloc(l->classes, (size_t)(l->nclasses + 1) * sizeof *l->classes);
            l->classes[l->nclasses++] = xstrdup(line);
        }
    }
    ok = ok && read_line(f, line, sizeof line) && sscanf(line, "files %lld ignored %lld", &a, &b) == 2 && a > 0;
    int64_t nfiles = ok ? a : 0;
    l->ignored = ok ? b : 0;
    for (int64_t i = 0; ok && i < nfiles; i++) {
        int cls = -1, at = 0;
        ok = read_line(f, line, sizeof line) && sscanf(line, "%d %n", &cls, &at) == 1 && at > 0 && cls >= 0 &&
             cls < l->nclasses && inside_root(line + at);
        if (ok) { /* under its class's folder: "class/..." */
            size_t k = strlen(l->classes[cls]);
            ok = !strncmp(line + at, l->classes[cls], k) && line[at + k] == '/';
        }
        if (ok) add_file(l, line + at, cls);
    }
    ok = ok && fgetc(f) == EOF;
    fclose(f);
    if (!ok) listing_free(l);
    return ok;
}

/* The listing of root, from a valid cache or a walk (then cached where it can be). */
static bool list_files(const char *root, const char *cache_dir, listing *l, char *note, size_t note_size,
                       dpt_error *err)
{
    char own[4200], other[4200];
    cache_paths(root, cache_dir, own, other);
    if (read_cache(own, root, l)) return snprintf(note, note_size, "file list from %s", own), true;
    if (*other && read_cache(other, root, l)) return snprintf(note, note_size, "file list from %s", other), true;
    if (!scan(root, l, err)) {
        listing_free(l);
        return false;
    }
    bool newline = false; /* a name the cache's one-name-a-line format cannot hold */
    for (int64_t i = 0; i < l->n && !newline; i++)
        newline = strchr(l->files[i], '\n') != NULL;
    for (int i = 0; i < l->nclasses && !newline; i++)
        newline = strchr(l->classes[i], '\n') != NULL;
    size_t at;
    dpt_error why_own = {{0}}, why_other = {{0}};
    if (newline)
        at = (size_t)snprintf(note, note_size, "walked (file list not cached: a file or folder name holds a newline)");
    else if (write_cache(own, root, l, &why_own))
        at = (size_t)snprintf(note, note_size, "walked, file list cached in %s", own);
    else if (*other && write_cache(other, root, l, &why_other))
        at = (size_t)snprintf(note, note_size, "walked, file list cached in %s", other);
    else { /* the real reasons (a read-only folder, a FIFO or a link at the name), their first lines */
        why_own.msg[strcspn(why_own.msg, "\n")] = '\0';
        why_other.msg[strcspn(why_other.msg, "\n")] = '\0';
        at = (size_t)snprintf(note, note_size, "walked (file list not cached: %s%s%s)", why_own.msg,
                              *other ? "; " : "", why_other.msg);
    }
    if (l->odd && at < note_size)
        snprintf(note + at, note_size - at,
                 "; %lld named like an image but not a regular file (a FIFO, a device, a link to nothing or to "
                 "itself), ignored: %s%s",
                 (long long)l->odd, l->odd_first, l->odd > 1 ? ", ..." : "");
    return true;
}

/* ---------------------------------------------------------------- the data sets */

static dpt_dataset *make_set(const char *root, listing *l, char **classes, int nclasses, const int *map,
                             const dpt_image_view *view, const char *note)
{
    dpt_dataset *ds = calloc(1, sizeof *ds);
    struct dpt_image_files *f = calloc(1, sizeof *f);
    size_t bytes = 0;
    for (int64_t i = 0; i < l->n; i++)
        bytes += strlen(l->files[i]) + 1;
    if (!ds || !f) dpt_fatal("out of host memory for a data set");
    f->names = malloc(bytes ? bytes : 1);
    f->offset = malloc((size_t)l->n * sizeof *f->offset);
    f->class_count = calloc((size_t)nclasses, sizeof *f->class_count);
    ds->labels = malloc((size_t)l->n * sizeof *ds->labels);
    if (!f->names || !f->offset || !f->class_count || !ds->labels) dpt_fatal("out of host memory for a data set");
    size_t at = 0;
    for (int64_t i = 0; i < l->n; i++) {
        size_t len = strlen(l->files[i]) + 1;
        memcpy(f->names + at, l->files[i], len);
        f->offset[i] = (int64_t)at;
        at += len;
        ds->labels[i] = map ? map[l->cls[i]] : l->cls[i];
        f->class_count[ds->labels[i]]++;
    }
    snprintf(f->root, sizeof f->root, "%s", root);
    f->list_hash = dpt_hash_bytes(dpt_hash_bytes(DPT_HASH_SEED, f->names, at), ds->labels,
                                  (size_t)l->n * sizeof *ds->labels);
    f->n = l->n, f->nclasses = nclasses, f->classes = classes, f->ignored = l->ignored, f->view = *view;
    snprintf(f->list_note, sizeof f->list_note, "%s", note);
    ds->n = l->n, ds->c = 3, ds->h = ds->w = view->size, ds->num_classes = nclasses;
    ds->class_counts = f->class_count;
    ds->files = f, ds->free_files = dpt_image_files_free;
    ds->content_hash = f->list_hash, ds->origin = f->root;
    snprintf(ds->name, sizeof ds->name, "folder");
    return ds;
}

bool dpt_folder_open(const dpt_folder_options *opt, dpt_dataset **train, dpt_dataset **test, dpt_error *err)
{
    *train = *test = NULL;
    char troot[4096], vroot[4096], note[2][4400];
    /* the longest name written beside them: DIR/.dptrain-files-train.XXXXXX */
    if (strlen(opt->dir) + strlen("/.dptrain-files-train.XXXXXX") >= sizeof troot)
        return dpt_errorf(err, "[data] dir = %.200s... is %zu bytes long: past this system's limit of %zu for the files "
                               "under it\nHINT: a shorter path (a link to the folder)",
                          opt->dir, strlen(opt->dir), sizeof troot - 1);
    if (opt->cache_dir && strlen(opt->cache_dir) + 64 >= sizeof troot)
        return dpt_errorf(err, "[data] cache_dir = %.200s... is %zu bytes long: past this system's limit of %zu"
                               "\nHINT: a shorter path",
                          opt->cache_dir, strlen(opt->cache_dir), sizeof troot - 1);
    snprintf(troot, sizeof troot, "%s/train", opt->dir);
    snprintf(vroot, sizeof vroot, "%s/val", opt->dir);
    listing tl, vl;
    if (!list_files(troot, opt->cache_dir, &tl, note[0], sizeof note[0], err)) return false;
    if (!list_files(vroot, opt->cache_dir, &vl, note[1], sizeof note[1], err)) {
        listing_free(&tl);
        return false;
    }
    /* validation labels are the training set's numbers for the same names */
    int *map = xrealloc(NULL, (size_t)vl.nclasses * sizeof *map);
    for (int c = 0; c < vl.nclasses; c++) {
        char **hit = bsearch(&vl.classes[c], tl.classes, (size_t)tl.nclasses, sizeof *tl.classes, cmp_str);
        if (!hit) {
            dpt_errorf(err,
                       "%s/%s: a validation class with no training folder of that name (the training classes "
                       "are %s/*)\nHINT: the class folders of train/ and val/ must have the same names",
                       vroot, vl.classes[c], troot);
            free(map);
            listing_free(&tl), listing_free(&vl);
            return false;
        }
        map[c] = (int)(hit - tl.classes);
    }
    char **classes = tl.classes; /* the training set owns the names */
    int nclasses = tl.nclasses;
    tl.classes = NULL, tl.nclasses = 0;
    *train = make_set(troot, &tl, classes, nclasses, NULL, &opt->train, note[0]);
    *test = make_set(vroot, &vl, classes, nclasses, map, &opt->eval, note[1]);
    (*train)->files->owns_classes = true; /* the validation set shares them */
    free(map);
    listing_free(&tl), listing_free(&vl);
    return true;
}

bool dpt_folder_open_input(const char *path, const dpt_dataset *like, dpt_dataset **out, dpt_error *err)
{
    *out = NULL;
    const char *hint = "HINT: --input takes a folder of .jpg, .jpeg or .png files (its subfolders too) or one such file";
    DPT_ASSERT(like->files, "--input %s: a folder set's input asked of %s", path, like->name);
    struct stat st;
    if (stat(path, &st) != 0) return dpt_errorf(err, "--input %s: %s\n%s", path, strerror(errno), hint);
    if (strlen(path) >= sizeof like->files->root - 16)
        return dpt_errorf(err, "--input %.200s...: a path of %zu bytes is too long\nHINT: a shorter path (a link)", path,
                          strlen(path));
    listing l;
    memset(&l, 0, sizeof l);
    char root[4096];
    snprintf(root, sizeof root, "%s", path);
    if (S_ISDIR(st.st_mode)) {
        if (!walk(root, ".", 0, 0, &l, err)) {
            listing_free(&l);
            return false;
        }
        for (int64_t i = 0; i < l.n; i++) /* "./a/x.jpg" -> "a/x.jpg" */
            memmove(l.files[i], l.files[i] + 2, strlen(l.files[i] + 2) + 1);
    } else if (S_ISREG(st.st_mode) && image_name(path)) {
        char *slash = strrchr(root, '/');
        if (slash) *slash = '\0';
        add_file(&l, slash ? slash + 1 : path, 0);
        if (!slash) snprintf(root, sizeof root, ".");
    } else {
        return dpt_errorf(err, "--input %s: neither a folder nor a .jpg, .jpeg or .png file\n%s", path, hint);
    }
    if (!l.n) {
        listing_free(&l);
        return dpt_errorf(err, "--input %s: no .jpg, .jpeg or .png file in it or its subfolders\n%s", path, hint);
    }
    const struct dpt_image_files *lf = like->files;
    /* the classes are like's (not freed with this set); every label 0 */
    *out = make_set(root, &l, lf->classes, lf->nclasses, NULL, &lf->view, "walked for --input");
    (*out)->unlabelled = true;
    (*out)->num_classes = like->num_classes, (*out)->c = like->c, (*out)->h = like->h, (*out)->w = like->w;
    (*out)->task = like->task;
    listing_free(&l);
    return true;
}

void dpt_image_files_free(struct dpt_image_files *f)
{
    if (!f) return;
    if (f->owns_classes) {
        for (int i = 0; i < f->nclasses; i++)
            free(f->classes[i]);
        free(f->classes);
    }
    free(f->names), free(f->offset), free(f->class_count), free(f);
}

const char *dpt_folder_path(const struct dpt_image_files *f, int64_t i, char *buf, size_t size)
{
    snprintf(buf, size, "%s/%s", f->root, f->names + f->offset[i]);
    return buf;
}

void dpt_folder_describe(const dpt_dataset *ds, char *buf, size_t size)
{
    const struct dpt_image_files *f = ds->files;
    dpt_dataset_describe_classes(ds, buf, size);
    size_t at = strlen(buf);
    if (at < size && f->ignored)
        snprintf(buf + at, size - at, " | %lld entr%s ignored (not a regular file with a .jpg/.jpeg/.png name)",
                 (long long)f->ignored, f->ignored == 1 ? "y" : "ies");
}

/* ---------------------------------------------------------------- [data] source = folder */

/* A two-number range key (scale, ratio): min <= max. */
static bool read_range(const dpt_config *cfg, const char *key, double out[2], dpt_error *err)
{
    if (dpt_config_float_list(cfg, "data", key, out, 2) != 2 || out[0] > out[1])
        return dpt_errorf(err, "%s: [data] %s needs two numbers, min,max (e.g. %s)", dpt_config_where(cfg, "data", key),
                          key, !strcmp(key, "scale") ? "0.08,1" : "0.75,1.3333333333");
    return true;
}

static bool folder_open(const dpt_config *cfg, dpt_dataset **train, dpt_dataset **test, dpt_error *err)
{
    if (!dpt_image_have_jpeg() || !dpt_image_have_png())
        return dpt_errorf(err, "%s: [data] source = folder: this build has no %s decoder\nHINT: install %s "
                               "(make deps) and rebuild",
                          dpt_config_where(cfg, "data", "source"), dpt_image_have_jpeg() ? "PNG" : "JPEG",
                          dpt_image_have_jpeg() ? "libpng-dev" : "libjpeg62-turbo-dev");
    if (dpt_config_int(cfg, "data", "random_crop_pad"))
        return dpt_errorf(err, "%s: [data] random_crop_pad is for images in memory; a folder's training images "
                               "are cropped by RandomResizedCrop\nHINT: remove random_crop_pad, and set [data] "
                               "scale and ratio",
                          dpt_config_where(cfg, "data", "random_crop_pad"));
    int size = (int)dpt_config_int(cfg, "data", "image_size"), resize = (int)dpt_config_int(cfg, "data", "resize_size");
    int eval_size = (int)dpt_config_int(cfg, "data", "eval_image_size");
    if (!eval_size) eval_size = size;
    if (resize < eval_size)
        return dpt_errorf(err, "%s: [data] resize_size = %d is smaller than the evaluation's crop, %s = %d: the center "
                               "crop would not fit\nHINT: the usual pair is resize_size = 256, image_size = 224 (ratio "
                               "0.875)",
                          dpt_config_where(cfg, "data", "resize_size"), resize,
                          eval_size == size ? "image_size" : "eval_image_size", eval_size);
    dpt_image_view v = {.size = size,
                        .resize = resize,
                        .hflip = dpt_config_bool(cfg, "data", "hflip"),
                        .dct_scaling = dpt_config_bool(cfg, "data", "jpeg_dct_scaling"),
                        .max_pixels = dpt_config_int(cfg, "data", "max_image_pixels"),
                        .auto_augment = (int)dpt_config_enum(cfg, "data", "auto_augment"),
                        .aa_ops = (int)dpt_config_int(cfg, "data", "rand_augment_ops"),
                        .aa_magnitude = (int)dpt_config_int(cfg, "data", "rand_augment_magnitude")};
    if (!read_range(cfg, "scale", v.scale, err) || !read_range(cfg, "ratio", v.ratio, err)) return false;
    dpt_folder_options opt = {.dir = dpt_config_str(cfg, "data", "dir"),
                              .cache_dir = dpt_config_str(cfg, "checkpoint", "dir"),
                              .train = v,
                              .eval = v};
    opt.train.train = true;
    opt.eval.hflip = false, opt.eval.auto_augment = DPT_AUTO_AUGMENT_NONE;
    opt.eval.size = eval_size; /* FixRes: the evaluation may crop larger than training */
    if (!dpt_folder_open(&opt, train, test, err)) return false;
    /* the classes are the folders: a count stated otherwise is a mistake, not a setting */
    int64_t stated = dpt_config_int(cfg, "data", "classes");
    if (stated > 0 && stated != (*train)->num_classes)
        return dpt_errorf(err, "%s: [data] classes = %lld, but %s/train has %d class folders\nHINT: remove [data] "
                               "classes (a folder's classes are its folders), or the folders that are not classes",
                          dpt_config_where(cfg, "data", "classes"), (long long)stated, opt.dir, (*train)->num_classes);
    return true;
}

static const dpt_data_impl folder_impl = {.open = folder_open};
static const dpt_config_key folder_keys[] = {
    {NULL, "image_size", DPT_KEY_INT, "224", 8, 4096, NULL,
     "side of the square samples (training: RandomResizedCrop to it; evaluation: CenterCrop)", 0},
    {NULL, "eval_image_size", DPT_KEY_INT, "0", 0, 4096, NULL,
     "evaluation's CenterCrop side when it differs from training's (0 = image_size): FixRes, training at a smaller "
     "crop than the test (torchvision's ResNet-50 recipe: image_size 176, eval_image_size 224, resize_size 232). The "
     "model must take either size with the same parameters (a global pooling: resnet), else the run stops at start",
     0},
    {NULL, "resize_size", DPT_KEY_INT, "256", 8, 8192, NULL,
     "evaluation: the shorter side is resized to this before the center crop (of eval_image_size, else image_size)",
     0},
    {NULL, "scale", DPT_KEY_FLOAT_LIST, "0.08,1", 1e-6, 1, NULL,
     "training: RandomResizedCrop's range of crop area, as fractions of the image's (min,max)", 0},
    {NULL, "ratio", DPT_KEY_FLOAT_LIST, "0.75,1.3333333333", 1e-3, 1e3, NULL,
     "training: RandomResizedCrop's range of crop aspect ratio, width/height (min,max)", 0},
    {NULL, "workers", DPT_KEY_INT, "-1", -1, 256, NULL,
     "threads decoding and augmenting images, per rank (-1: cores per rank minus one, at least 1; "
     "0: on the loader's own thread). Batches are the same for any number", 0},
    {NULL, "bad_files", DPT_KEY_ENUM, "stop", 1, 0, "stop|skip",
     "an unreadable or corrupt image stops the job naming the file and the decoder's message, or "
     "is skipped (replaced by the next file of the list) and counted in the log and the metrics", 0},
    {NULL, "max_image_pixels", DPT_KEY_INT, "89478485", 1, 1e12, NULL,
     "largest image decoded, in pixels after JPEG DCT scaling (PIL's decompression-bomb limit); "
     "a larger one is a bad file", 0},
    {NULL, "jpeg_dct_scaling", DPT_KEY_BOOL, "true", 1, 0, NULL,
     "decode a JPEG at 1/2, 1/4 or 1/8 size when the crop still has image_size pixels a side "
     "(far less decoding for large images; pixels differ slightly from a full decode and resize)", 0},
};
DPT_BUILTIN(data_folder) = {DPT_KIND_DATA, "folder", "JPEG/PNG files in torchvision's ImageFolder layout",
                            folder_keys, DPT_COUNT(folder_keys), &folder_impl};
