/* registry.h: how a built-in registration is declared. A source file of the library writes
 *
 *     DPT_BUILTIN(optim_sgd) = {DPT_KIND_OPTIMIZER, "sgd", "help", sgd_keys, 2, &sgd_impl};
 *
 * at the start of a line, and the build finds it (scripts/builtins.sh writes the list the
 * registry loads), so a new file registers itself with no central list to edit. Programs using
 * the library call dpt_register instead. */
#ifndef DPT_REGISTRY_H
#define DPT_REGISTRY_H

#include "dpt.h"

#ifdef __cplusplus
#define DPT_BUILTIN(id)                                                                                      \
    extern "C" const dpt_registration dpt_builtin_##id;                                                     \
    extern "C" const dpt_registration dpt_builtin_##id
#else
#define DPT_BUILTIN(id) const dpt_registration dpt_builtin_##id
#endif

/* The count of entries in a static table. */
#define DPT_COUNT(table) ((int)(sizeof(table) / sizeof((table)[0])))

#endif
