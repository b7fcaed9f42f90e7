/* input.c: ./train CONFIG --predict CKPT --input PATH: samples without labels, read by the
 * source the config's test set came from (data.h). */
#include <string.h>

#include "data.h"
#include "folder.h"
#include "../runtime/error.h"

bool dpt_data_open_input(const dpt_config *cfg, const char *path, const dpt_dataset *like, dpt_dataset **out,
                         dpt_error *err)
{
    *out = NULL;
    if (like->files) return dpt_folder_open_input(path, like, out, err);
    if (!strcmp(like->name, "idx")) return dpt_idx_open_input(path, like, out, err);
    if (!strcmp(dpt_config_str(cfg, "data", "source"), "tokens")) return dpt_tokens_open_input(path, like, out, err);
    if (!strcmp(dpt_config_str(cfg, "data", "source"), "csv")) return dpt_csv_open_input(path, like, out, err);
    return dpt_errorf(err, "--input %s: [data] source = %s has no unlabelled input; --input reads image files for "
                           "[data] source = folder, an IDX image file for idx, tokens (a shard, or a file's bytes) "
                           "for tokens and rows of the training file's columns for csv\nHINT: --set data.* names another labelled set of this source",
                      path, dpt_config_str(cfg, "data", "source"));
}
