/* serve.h — `swarm serve`: an OpenAI-compatible HTTP server and chat page. serve/ */
#ifndef SWARM_SERVE_H
#define SWARM_SERVE_H

/* The subcommand: flags, listen, load, serve until SIGTERM/SIGINT. Returns the exit code
 * (0 after a clean drain, 1 on an error, 2 on bad flags). */
int serve_main(int argc, char **argv);

#endif
