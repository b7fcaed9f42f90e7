train: train.c include/dpt.h data/data.h runtime/comm.h runtime/error.h \
 runtime/log.h
include/dpt.h:
data/data.h:
runtime/comm.h:
runtime/error.h:
runtime/log.h:
