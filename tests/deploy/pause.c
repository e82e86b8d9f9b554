// SPDX-License-Identifier: MIT
/*
 * The pod sandbox's process (the "pause" container) of the real node's tests
 * (tests/deploy/k8s_node.py): it holds the pod's namespaces open and does
 * nothing else. Exits 0 on SIGINT or SIGTERM (containerd stops a sandbox with
 * SIGTERM); reaps children, as the init of a pod that shares its PID
 * namespace would have to. Built static, so its image holds this file alone:
 *
 *   gcc -O2 -static -o pause tests/deploy/pause.c
 */
#include <signal.h>
#include <stddef.h>
#include <sys/wait.h>
#include <unistd.h>

static void on_stop(int sig)
{
	(void)sig;
	_exit(0);
}

static void on_child(int sig)
{
	(void)sig;
	while (waitpid(-1, NULL, WNOHANG) > 0)
		;
}

int main(void)
{
	struct sigaction stop = { .sa_handler = on_stop };
	struct sigaction child = { .sa_handler = on_child, .sa_flags = SA_NOCLDSTOP };

	if (sigaction(SIGINT, &stop, NULL) || sigaction(SIGTERM, &stop, NULL) ||
	    sigaction(SIGCHLD, &child, NULL))
		return 1;
	for (;;)
		pause();
}
