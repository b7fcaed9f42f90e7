/* registry.c: every extension point's registrations {kind, name, keys, impl} and the config
 * schema their keys make. The built-in registrations (DPT_BUILTIN lines, listed at build time
 * in dpt_builtin_registrations) load first, the runtime's settings before the rest; a
 * program's own follow through dpt_register until the first config is made. */
#include <ctype.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "registry.h"
#include "schema.h"

enum { MAX_REGS = 256, MAX_KEYS = 768 };

extern const dpt_registration *const dpt_builtin_registrations[]; /* the build's list (builtins.c) */

typedef struct entry {
    dpt_registration reg; /* strings copied; keys point into the schema's copies */
    bool builtin;
    bool show_owner; /* its keys name it in the reference (not the runtime's own settings) */
} entry;

static entry regs[MAX_REGS];
static int nregs;
static dpt_schema_key schema[MAX_KEYS];
static int nkeys;
static bool frozen;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t once = PTHREAD_ONCE_INIT;

/* How "@kind" choices name a kind, and what messages call it. */
static const char *const kind_tags[] = {"model", "optimizer", "schedule", "data", "loss", "backend", "settings"};
static const char *const kind_names[] = {"model", "optimizer", "schedule", "data source", "loss", "backend", "settings"};
_Static_assert(sizeof kind_tags / sizeof kind_tags[0] == DPT_KIND_COUNT, "kind_tags");
_Static_assert(sizeof kind_names / sizeof kind_names[0] == DPT_KIND_COUNT, "kind_names");
/* The section a key with section NULL belongs to, by kind. */
static const char *const kind_sections[] = {"model", "optim", "optim", "data", "train", "train", NULL};
_Static_assert(sizeof kind_sections / sizeof kind_sections[0] == DPT_KIND_COUNT, "kind_sections");

const char *dpt_kind_name(dpt_kind kind)
{
    return (unsigned)kind < DPT_KIND_COUNT ? kind_names[kind] : "?";
}

static bool valid_name(const char *s)
{
    if (!s || !*s || strlen(s) > 48) return false;
    for (const char *c = s; *c; c++)
        if (!islower((unsigned char)*c) && !isdigit((unsigned char)*c) && *c != '_') return false;
    return true;
}

static char *copy(const char *s)
{
    if (!s) return NULL;
    char *c = strdup(s);
    if (!c) dpt_fatal("out of host memory in the registry");
    return c;
}

static int find_key(const char *section, const char *key)
{
    for (int k = 0; k < nkeys; k++)
        if (!strcmp(schema[k].decl.section, section) && !strcmp(schema[k].decl.key, key)) return k;
    return -1;
}

static int find_entry(dpt_kind kind, const char *name)
{
    for (int i = 0; i < nregs; i++)
        if (regs[i].reg.kind == kind && !strcmp(regs[i].reg.name, name)) return i;
    return -1;
}

/* A key's declaration checked on its own: names, type, help, default, choices. */
static bool check_decl(const dpt_config_key *k, const char *section, dpt_error *err)
{
    if (!valid_name(section) || !valid_name(k->key))
        return dpt_errorf(err, "[%s] %s: section and key names are lower-case letters, digits and _",
                          section ? section : "(null)", k->key ? k->key : "(null)");
    if ((unsigned)k->type >= DPT_KEY_TYPE_COUNT || !k->help || !k->def)
        return dpt_errorf(err, "[%s] %s: needs a type of dpt_key_type, a default and a help text", section, k->key);
    if (k->type == DPT_KEY_ENUM && (!k->choices || !*k->choices))
        return dpt_errorf(err, "[%s] %s: an enum needs its choices (\"a|b|c\", or \"@kind\")", section, k->key);
    if (k->type == DPT_KEY_ENUM && k->choices[0] == '@') {
        bool known = false;
        for (int i = 0; i < DPT_KIND_COUNT; i++)
            known |= !strcmp(k->choices + 1, kind_tags[i]);
        if (!known) return dpt_errorf(err, "[%s] %s: choices %s name no kind", section, k->key, k->choices);
    }
    dpt_config_key resolved = *k;
    resolved.section = section;
    dpt_value v;
    memset(&v, 0, sizeof v);
    if (!dpt_value_parse(&resolved, k->def, "default", &v, err)) return false; /* the message names it */
    dpt_value_free(&v);
    return true;
}

/* Numbers' ranges: none when min > max or both are 0. */
static bool same_range(const dpt_config_key *a, const dpt_config_key *b)
{
    bool a_none = a->min > a->max || (a->min == 0 && a->max == 0);
    bool b_none = b->min > b->max || (b->min == 0 && b->max == 0);
    return (a_none && b_none) || (a->min == b->min && a->max == b->max);
}

/* Whether k may join schema key s: both declared by registrations that show their owner, with
 * the same type, default, range and choices (cnn and resnet both read [model] bn_momentum). */
static bool check_shared(const dpt_schema_key *s, const dpt_config_key *k, dpt_error *err)
{
    const dpt_config_key *o = &s->decl;
    bool same = o->type == k->type && !strcmp(o->def, k->def) && same_range(o, k) &&
                !strcmp(o->choices ? o->choices : "", k->choices ? k->choices : "") && o->flags == k->flags;
    if (!same || !*s->owners)
        return dpt_errorf(err, "[%s] %s is already a key%s%s, with another type, default or range", o->section,
                          o->key, *s->owners ? " of " : " of the runtime", s->owners);
    return true;
}

/* Called with the lock held. All or nothing: every key is checked before any is added. */
static bool add(const dpt_registration *r, bool builtin, bool show_owner, const char *default_section, dpt_error *err)
{
    if (frozen)
        return dpt_errorf(err, "called after a config was made\nHINT: register models, optimizers, data sources "
                               "and their keys first, then call dpt_train_main");
    if ((unsigned)r->kind >= DPT_KIND_COUNT) return dpt_errorf(err, "kind %d is not a dpt_kind", (int)r->kind);
    if (!valid_name(r->name))
        return dpt_errorf(err, "a name of lower-case letters, digits and _ (at most 48), not '%s'",
                          r->name ? r->name : "(null)");
    if (r->kind != DPT_KIND_SETTINGS && !r->impl)
        return dpt_errorf(err, "a %s needs its implementation (impl)", kind_names[r->kind]);
    if (r->nkeys < 0 || (r->nkeys > 0 && !r->keys)) return dpt_errorf(err, "%d keys and no table", r->nkeys);
    int at = find_entry(r->kind, r->name);
    if (at >= 0)
        return dpt_errorf(err, "%s", regs[at].builtin ? "a built-in one has this name" : "registered twice");
    if (nregs == MAX_REGS) return dpt_errorf(err, "more than %d registrations", MAX_REGS);
    if (nkeys + r->nkeys > MAX_KEYS) return dpt_errorf(err, "more than %d config keys", MAX_KEYS);
    for (int i = 0; i < r->nkeys; i++) {
        const dpt_config_key *k = &r->keys[i];
        const char *section = k->section ? k->section : default_section;
        if (!section) return dpt_errorf(err, "key %s: settings name their section", k->key ? k->key : "(null)");
        int s = valid_name(section) && k->key ? find_key(section, k->key) : -1;
        if (s < 0 && !check_decl(k, section, err)) return false;
        if (s >= 0 && (!show_owner || !check_shared(&schema[s], k, err))) {
            if (!show_owner)
                dpt_errorf(err, "[%s] %s is already a key%s%s", section, k->key, *schema[s].owners ? " of " : "",
                           *schema[s].owners ? schema[s].owners : " of the runtime");
            return false;
        }
        for (int j = 0; j < i; j++)
            if (!strcmp(r->keys[j].key, k->key) &&
                !strcmp(r->keys[j].section ? r->keys[j].section : default_section, section))
                return dpt_errorf(err, "[%s] %s is declared twice in its table", section, k->key);
    }
    entry *e = &regs[nregs++];
    e->builtin = builtin, e->show_owner = show_owner;
    e->reg = (dpt_registration){r->kind, copy(r->name), copy(r->help ? r->help : ""), NULL, 0, r->impl};
    for (int i = 0; i < r->nkeys; i++) {
        const dpt_config_key *k = &r->keys[i];
        const char *section = k->section ? k->section : default_section;
        int s = find_key(section, k->key);
        if (s >= 0) { /* shared: one more owner */
            size_t used = strlen(schema[s].owners);
            snprintf(schema[s].owners + used, sizeof schema[s].owners - used, ", %s", r->name);
            continue;
        }
        dpt_schema_key *sk = &schema[nkeys++];
        memset(sk, 0, sizeof *sk);
        sk->decl = (dpt_config_key){copy(section), copy(k->key), k->type,  copy(k->def), k->min,
                                    k->max,        copy(k->choices), copy(k->help), k->flags};
        if ((k->type != DPT_KEY_INT && k->type != DPT_KEY_FLOAT && k->type != DPT_KEY_INT_LIST &&
             k->type != DPT_KEY_FLOAT_LIST) ||
            (k->min == 0 && k->max == 0)) /* no range */
            sk->decl.min = 1, sk->decl.max = 0;
        sk->choice_kind = -1;
        if (k->type == DPT_KEY_ENUM && k->choices[0] == '@')
            for (int kind = 0; kind < DPT_KIND_COUNT; kind++)
                if (!strcmp(k->choices + 1, kind_tags[kind])) sk->choice_kind = kind;
        if (show_owner) snprintf(sk->owners, sizeof sk->owners, "%s", r->name);
    }
    return true;
}

/* Built-ins in a fixed order: the runtime's settings first (their sections lead the
 * reference), then by kind and name. */
static int builtin_order(const void *pa, const void *pb)
{
    const dpt_registration *a = *(const dpt_registration *const *)pa, *b = *(const dpt_registration *const *)pb;
    int ka = a->kind == DPT_KIND_SETTINGS ? -1 : (int)a->kind, kb = b->kind == DPT_KIND_SETTINGS ? -1 : (int)b->kind;
    if (ka != kb) return ka < kb ? -1 : 1;
    return strcmp(a->name, b->name);
}

static void load_builtins(void)
{
    int n = 0;
    while (dpt_builtin_registrations[n])
        n++;
    const dpt_registration **list = malloc((size_t)(n + 1) * sizeof *list);
    if (!list) dpt_fatal("out of host memory in the registry");
    memcpy(list, dpt_builtin_registrations, (size_t)n * sizeof *list);
    qsort(list, (size_t)n, sizeof *list, builtin_order);
    for (int i = 0; i < n; i++) {
        dpt_error err;
        if (!add(list[i], true, list[i]->kind != DPT_KIND_SETTINGS, kind_sections[list[i]->kind], &err))
            dpt_fatal("built-in %s %s: %s", kind_names[list[i]->kind], list[i]->name, err.msg);
    }
    free(list);
}

static void ready(void)
{
    pthread_once(&once, load_builtins);
}

static bool register_locked(const dpt_registration *r, bool show_owner, const char *default_section)
{
    ready();
    pthread_mutex_lock(&lock);
    dpt_error err = {{0}};
    bool ok = add(r, false, show_owner, default_section, &err);
    pthread_mutex_unlock(&lock);
    if (!ok)
        fprintf(stderr, "error: dpt_register(%s %s): %s\n", (unsigned)r->kind < DPT_KIND_COUNT ? kind_names[r->kind] : "?",
                r->name ? r->name : "(null)", err.msg);
    return ok;
}

bool dpt_register(const dpt_registration *r)
{
    return register_locked(r, r->kind != DPT_KIND_SETTINGS,
                           (unsigned)r->kind < DPT_KIND_COUNT ? kind_sections[r->kind] : NULL);
}

/* A program's keys under its own name (the form before dpt_register took keys): settings that
 * name their owner in the reference, in [model] unless they say otherwise. */
bool dpt_register_config_keys(const char *owner, const dpt_config_key *keys, int n)
{
    dpt_registration r = {DPT_KIND_SETTINGS, owner, "", keys, n, NULL};
    return register_locked(&r, true, "model");
}

const dpt_registration *dpt_registry_find(dpt_kind kind, const char *name)
{
    ready();
    pthread_mutex_lock(&lock);
    int i = name ? find_entry(kind, name) : -1;
    pthread_mutex_unlock(&lock);
    return i >= 0 ? &regs[i].reg : NULL;
}

int dpt_registry_count(dpt_kind kind)
{
    ready();
    pthread_mutex_lock(&lock);
    int n = 0;
    for (int i = 0; i < nregs; i++)
        n += regs[i].reg.kind == kind;
    pthread_mutex_unlock(&lock);
    return n;
}

const dpt_registration *dpt_registry_at(dpt_kind kind, int index)
{
    ready();
    pthread_mutex_lock(&lock);
    const dpt_registration *found = NULL;
    for (int i = 0, n = 0; i < nregs && !found; i++)
        if (regs[i].reg.kind == kind && n++ == index) found = &regs[i].reg;
    pthread_mutex_unlock(&lock);
    return found;
}

void dpt_registry_freeze(void)
{
    ready();
    pthread_mutex_lock(&lock);
    if (!frozen) { /* an "@kind" default must name a registration by now */
        for (int k = 0; k < nkeys; k++)
            if (schema[k].choice_kind >= 0 && find_entry((dpt_kind)schema[k].choice_kind, schema[k].decl.def) < 0)
                dpt_fatal("[%s] %s: its default %s is no registered %s", schema[k].decl.section, schema[k].decl.key,
                          schema[k].decl.def, kind_names[schema[k].choice_kind]);
    }
    frozen = true;
    pthread_mutex_unlock(&lock);
}

int dpt_schema_count(void)
{
    ready();
    return nkeys;
}

const dpt_schema_key *dpt_schema_at(int k)
{
    DPT_ASSERT(k >= 0 && k < nkeys, "schema key %d of %d", k, nkeys);
    return &schema[k];
}

int dpt_schema_find(const char *section, const char *key)
{
    ready();
    return find_key(section, key);
}
