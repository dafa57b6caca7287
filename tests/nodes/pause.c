/* The sandbox ("pause") process of the guests' pods: holds the pod's namespaces and does nothing.
 * As PID 1 of a pod that shares its PID namespace it also reaps orphans. Written for slipway's test
 * nodes; built static by tests/nodes/build.sh. */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static void quit(int sig) {
  (void)sig;
  _exit(0);
}

static void reap(int sig) {
  (void)sig;
  while (waitpid(-1, NULL, WNOHANG) > 0) {
  }
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "-v") == 0) {
    puts("slipway-pause 1");
    return 0;
  }
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = quit;
  if (sigaction(SIGINT, &sa, NULL) != 0 || sigaction(SIGTERM, &sa, NULL) != 0) {
    return 1;
  }
  sa.sa_handler = reap;
  sa.sa_flags = SA_NOCLDSTOP;
  if (sigaction(SIGCHLD, &sa, NULL) != 0) {
    return 2;
  }
  for (;;) {
    pause();
  }
}
