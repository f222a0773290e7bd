/* cmd_keygen.c — `swarm keygen NAME`: a CURVE key pair. cli/ */
#include <stdio.h>
#include <string.h>

#include "base/exitcode.h"
#include "base/sec.h"
#include "cli/cmd.h"

int cmd_keygen(int argc, char **argv)
{
    char err[512];
    if (argc != 2 || argv[1][0] == '-') {
        printf("usage: swarm keygen NAME\n"
               "  Writes NAME.key (CURVE public + secret key, mode 0600) and NAME.pub (the\n"
               "  public key). Give workers `--key NAME.key --allow COORD.pub`; give the\n"
               "  coordinator `[security] key = NAME.key` and each `[worker.X] public_key`.\n"
               "  A public key is a path to a .pub file, or inline as z85:KEY (40 Z85\n"
               "  characters after the prefix); a bare value is always read as a path.\n");
        return argc == 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) ? EXIT_OK
                                                                                   : EXIT_USAGE;
    }
    if (sec_keygen(argv[1], err, sizeof err)) {
        fprintf(stderr, "swarm keygen: %s\n", err);
        return EXIT_FAIL;
    }
    printf("wrote %s.key and %s.pub\n", argv[1], argv[1]);
    return EXIT_OK;
}
