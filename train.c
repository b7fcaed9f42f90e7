/* train.c: ./train CONFIG [--set section.key=value ...]. The whole program is the library's
 * dpt_train_main (runtime/train_main.c, then runtime/trainer.c for the loop): a program with
 * its own models registers them (dpt_register_model) and calls the same function. */
#include "dpt.h"

int main(int argc, char **argv)
{
    return dpt_train_main(argc, argv);
}
