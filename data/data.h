/* data.h: data sets chosen by the config. */
#ifndef DPT_DATA_H
#define DPT_DATA_H

#include "dpt.h"

/* Load [data]'s train and test sets; false with err naming the file and a HINT. */
bool dpt_data_open(const dpt_config *cfg, dpt_dataset **train, dpt_dataset **test, dpt_error *err);

#endif
