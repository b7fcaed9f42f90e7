/* fuzz_ini.c: the INI parser, --set and the checks of keys nothing reads. Input: the file's
 * text, then optionally a 0x01 byte and --set assignments, one per line. Every input must give a
 * config or an error message, and its printed config must read back to the same hash (and be
 * accepted where it was); sanitizers catch the rest. */
#include "tests/fuzz/fuzz_common.h"
#include "dpt.h"
#include "runtime/schema.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *split = memchr(data, 0x01, size);
    size_t file_len = split ? (size_t)(split - data) : size;
    dpt_error err;
    dpt_config *cfg = dpt_config_parse((const char *)data, file_len, "fuzz.ini", &err);
    if (!cfg) {
        if (!err.msg[0]) abort(); /* an error must say something */
        return 0;
    }
    if (split) {
        char *sets = strndup((const char *)split + 1, size - file_len - 1);
        for (char *save = NULL, *line = strtok_r(sets, "\n", &save); line; line = strtok_r(NULL, "\n", &save))
            if (!dpt_config_set(cfg, line, &err) && !err.msg[0]) abort();
        free(sets);
    }
    /* the checks a run makes before it starts: a refusal says something */
    bool owners = dpt_config_check_owners(cfg, &err);
    if (!owners && !err.msg[0]) abort();
    bool dependents = dpt_config_check_dependents(cfg, &err);
    if (!dependents && !err.msg[0]) abort();
    char *text = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&text, &len);
    dpt_config_print(cfg, mem);
    fclose(mem);
    /* what print writes, parse reads back to the same values */
    dpt_config *again = dpt_config_parse(text, len, "printed", &err);
    if (!again || dpt_config_hash(again) != dpt_config_hash(cfg)) {
        fprintf(stderr, "printed config does not parse back: %s\n%s", again ? "hash differs" : err.msg, text);
        abort();
    }
    /* and a config the checks accept prints one they accept (--dry-run's, a checkpoint's: a
     * file's keys of an optimizer --set switched away from are not in it) */
    if (owners && dependents &&
        (!dpt_config_check_owners(again, &err) || !dpt_config_check_dependents(again, &err))) {
        fprintf(stderr, "an accepted config prints one that is refused: %s\n%s", err.msg, text);
        abort();
    }
    dpt_config_free(again);
    free(text);
    dpt_config_free(cfg);
    return 0;
}
