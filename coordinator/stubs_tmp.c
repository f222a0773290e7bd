#include "coordinator/arm.h"
#include "coordinator/cmd.h"
#include <stdio.h>
