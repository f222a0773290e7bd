#include "coordinator/arm.h"
#include "coordinator/cmd.h"
#include <stdio.h>
int cmd_lab(int argc, char **argv) { (void)argc; (void)argv; return 1; }
