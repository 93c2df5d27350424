/* The pod sandbox's process (what Kubernetes' pause image runs): holds the pod's namespaces,
 * reaps orphaned children, exits on SIGINT/SIGTERM. Built statically with gcc by
 * scripts/k8s/cluster-images.sh so no image is pulled. */
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static void on_term(int sig) { _exit(sig == SIGTERM || sig == SIGINT ? 0 : 1); }

static void on_child(int sig) {
    (void)sig;
    while (waitpid(-1, NULL, WNOHANG) > 0) {
    }
}

int main(void) {
    struct sigaction term = {.sa_handler = on_term};
    struct sigaction child = {.sa_handler = on_child, .sa_flags = SA_NOCLDSTOP};
    sigaction(SIGINT, &term, NULL);
    sigaction(SIGTERM, &term, NULL);
    sigaction(SIGCHLD, &child, NULL);
    for (;;) pause();
    return 0;
}
