/*
 * sp-container-exec: start a program the way runc starts a container's
 * process, so that a test runs the agent with exactly the privileges and
 * limits a Kubernetes node gives the chart's pod, never friendlier ones.
 *
 *   sp-container-exec [--cgroup DIR] [--memlock KIB|unlimited]
 *                     [--nofile SOFT:HARD] [--uid N] [--caps a,b,...]
 *                     [--no-new-privs] -- PROGRAM [ARGS...]
 *
 * The steps and their order are runc's (libcontainer, standard init):
 *  0. the container's cgroups (--cgroup DIR, repeatable: a cgroup directory
 *     of each hierarchy the process joins, with the limits the test wrote
 *     there; one cgroup2 directory, or one per v1 controller);
 *  1. the process's rlimits: a container has the runtime's own unless the
 *     OCI spec sets one, and Kubernetes sets none; --memlock and --nofile
 *     stand for the runtime unit's LimitMEMLOCK and LimitNOFILE;
 *  2. the bounding set cut to --caps;
 *  3. PR_SET_KEEPCAPS, the uid and gid change (supplementary groups
 *     cleared), PR_SET_KEEPCAPS off;
 *  4. capset: --caps in the permitted and effective sets, nothing
 *     inheritable (containerd 1.6.18+, CRI-O) and nothing ambient (no
 *     Kubernetes runtime sets ambient capabilities);
 *  5. no_new_privs (allowPrivilegeEscalation: false), then execve. A non-root
 *     exec then keeps only what the binary's file capabilities grant of the
 *     permitted set.
 * Capability names are the kernel's without CAP_ (bpf, perfmon, ...).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <grp.h>
#include <linux/capability.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

static const struct {
	const char *name;
	int cap;
} names[] = {
	{"dac_read_search", 2}, {"sys_ptrace", 19}, {"sys_admin", 21},
	{"sys_resource", 24},	{"syslog", 34},	    {"perfmon", 38},
	{"bpf", 39},		{"checkpoint_restore", 40},
};

static void die(const char *what)
{
	fprintf(stderr, "sp-container-exec: %s: %s\n", what, strerror(errno));
	exit(127);
}

/* --caps a,b,c as a 64-bit mask */
static unsigned long long parse_caps(char *list)
{
	unsigned long long mask = 0;
	for (char *name = strtok(list, ","); name; name = strtok(NULL, ",")) {
		size_t i;
		for (i = 0; i < sizeof(names) / sizeof(names[0]); i++)
			if (!strcmp(name, names[i].name))
				break;
		if (i == sizeof(names) / sizeof(names[0])) {
			fprintf(stderr, "sp-container-exec: unknown capability %s\n", name);
			exit(2);
		}
		mask |= 1ULL << names[i].cap;
	}
	return mask;
}

static int last_cap(void)
{
	FILE *f = fopen("/proc/sys/kernel/cap_last_cap", "r");
	int last = 40;
	if (f) {
		if (fscanf(f, "%d", &last) != 1)
			last = 40;
		fclose(f);
	}
	return last;
}

static void set_memlock(const char *value)
{
	struct rlimit lim;
	if (!strcmp(value, "unlimited"))
		lim.rlim_cur = lim.rlim_max = RLIM_INFINITY;
	else
		lim.rlim_cur = lim.rlim_max = strtoull(value, NULL, 10) * 1024;
	if (setrlimit(RLIMIT_MEMLOCK, &lim))
		die("setrlimit(RLIMIT_MEMLOCK)");
}

/* SOFT:HARD open files */
static void set_nofile(const char *value)
{
	struct rlimit lim;
	char *colon;
	lim.rlim_cur = strtoull(value, &colon, 10);
	lim.rlim_max = *colon == ':' ? strtoull(colon + 1, NULL, 10) : lim.rlim_cur;
	if (setrlimit(RLIMIT_NOFILE, &lim))
		die("setrlimit(RLIMIT_NOFILE)");
}

static void join_cgroup(const char *dir)
{
	char path[4096];
	FILE *f;
	snprintf(path, sizeof(path), "%s/cgroup.procs", dir);
	f = fopen(path, "w");
	if (!f || fprintf(f, "0\n") < 0 || fclose(f))
		die(path);
}

static void cut_bounding_set(unsigned long long keep)
{
	for (int cap = 0; cap <= last_cap(); cap++)
		if (!(keep & (1ULL << cap)) && prctl(PR_CAPBSET_DROP, cap, 0, 0, 0))
			die("PR_CAPBSET_DROP");
}

static void become(uid_t uid)
{
	if (prctl(PR_SET_KEEPCAPS, 1, 0, 0, 0))
		die("PR_SET_KEEPCAPS");
	if (setgroups(0, NULL) || setresgid(uid, uid, uid) || setresuid(uid, uid, uid))
		die("changing the uid");
	if (prctl(PR_SET_KEEPCAPS, 0, 0, 0, 0))
		die("PR_SET_KEEPCAPS off");
}

static void set_caps(unsigned long long caps)
{
	struct __user_cap_header_struct hdr = {_LINUX_CAPABILITY_VERSION_3, 0};
	struct __user_cap_data_struct data[2] = {
		{(__u32)caps, (__u32)caps, 0},
		{(__u32)(caps >> 32), (__u32)(caps >> 32), 0},
	};
	if (syscall(SYS_capset, &hdr, data))
		die("capset");
	if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0))
		die("clearing the ambient set");
}

int main(int argc, char **argv)
{
	unsigned long long caps = 0;
	const char *memlock = NULL, *nofile = NULL, *cgroups[8];
	int ncgroups = 0;
	uid_t uid = 0;
	int nnp = 0, i;

	for (i = 1; i < argc && strcmp(argv[i], "--"); i++) {
		if (!strcmp(argv[i], "--memlock") && i + 1 < argc)
			memlock = argv[++i];
		else if (!strcmp(argv[i], "--nofile") && i + 1 < argc)
			nofile = argv[++i];
		else if (!strcmp(argv[i], "--cgroup") && i + 1 < argc && ncgroups < 8)
			cgroups[ncgroups++] = argv[++i];
		else if (!strcmp(argv[i], "--uid") && i + 1 < argc)
			uid = (uid_t)strtoul(argv[++i], NULL, 10);
		else if (!strcmp(argv[i], "--caps") && i + 1 < argc)
			caps = parse_caps(argv[++i]);
		else if (!strcmp(argv[i], "--no-new-privs"))
			nnp = 1;
		else {
			fprintf(stderr, "sp-container-exec: unknown option %s\n", argv[i]);
			return 2;
		}
	}
	if (i + 1 >= argc) {
		fprintf(stderr, "usage: sp-container-exec [--cgroup DIR] [--memlock KIB|unlimited] "
				"[--nofile SOFT:HARD] [--uid N] [--caps a,b] [--no-new-privs] "
				"-- PROGRAM [ARGS...]\n");
		return 2;
	}
	for (int c = 0; c < ncgroups; c++)
		join_cgroup(cgroups[c]);
	if (memlock)
		set_memlock(memlock);
	if (nofile)
		set_nofile(nofile);
	cut_bounding_set(caps);
	become(uid);
	set_caps(caps);
	if (nnp && prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0))
		die("PR_SET_NO_NEW_PRIVS");
	execv(argv[i + 1], argv + i + 1);
	die(argv[i + 1]);
}
