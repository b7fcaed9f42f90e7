train: train.c include/dpt.h data/data.h runtime/log.h
include/dpt.h:
data/data.h:
runtime/log.h:
