/* schema.h: the config schema, built by the registry from every registration's keys, and the
 * value parser that both the registry (checking a declared default) and config.c (reading a
 * file) use. Internal to the library. */
#ifndef DPT_SCHEMA_H
#define DPT_SCHEMA_H

#include "dpt.h"

enum { DPT_VALUE_MAX_LIST = 32 };

/* One key of the schema: its declaration (strings owned by the registry) and who declared it. */
typedef struct dpt_schema_key {
    dpt_config_key decl; /* section always set */
    char owners[128];    /* "cnn, resnet": the registrations that declared it; "" for the runtime's settings */
    int choice_kind;     /* an "@kind" enum: that dpt_kind; -1 otherwise */
} dpt_schema_key;

/* A parsed value. */
typedef struct dpt_value {
    char *raw;
    char where[320]; /* "file:line", "--set ..." or "default" */
    int64_t i;
    double f;
    bool b;
    int choice; /* DPT_KEY_ENUM with listed choices: the value's position among them */
    int64_t list[DPT_VALUE_MAX_LIST];
    double flist[DPT_VALUE_MAX_LIST];
    int nlist;
} dpt_value;

/* config_value.c: parse raw for the key into *out (replacing what it held); false with err
 * naming where, the section, key and value, and the key's help as a HINT. An "@kind" enum is
 * parsed as a name only: whether that name is registered is the caller's check. */
bool dpt_value_parse(const dpt_config_key *k, const char *raw, const char *where, dpt_value *out, dpt_error *err);
void dpt_value_free(dpt_value *v);
/* The type's name as the reference prints it ("int", "float list", ...). */
const char *dpt_key_type_name(dpt_key_type type);

/* registry.c: the schema. dpt_registry_freeze is called when the first config is made:
 * registrations end there, so a config's values line up with the schema for good. */
void dpt_registry_freeze(void);
int dpt_schema_count(void);
const dpt_schema_key *dpt_schema_at(int k);
int dpt_schema_find(const char *section, const char *key); /* -1 when not declared */

/* config.c: a key set that is read only when another key has some value it has not
 * (loss_scale_init without loss_scale = dynamic, zero_grads without zero = 2, ...): refused. */
bool dpt_config_check_dependents(const dpt_config *cfg, dpt_error *err);
/* config.c: dpt_config_check_owners for a kind no key selects (a loss: the model's task names
 * it): a key set in the file or with --set that only registrations of that kind read, none of
 * them `chosen`, is refused naming the key, where it was set, its owners and `chosen`. */
bool dpt_config_check_kind_owners(const dpt_config *cfg, dpt_kind kind, const char *chosen, const char *noun,
                                  const char *why, dpt_error *err);

#endif
