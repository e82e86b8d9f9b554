// SPDX-License-Identifier: MIT
/* A bare fentry loader: ROUNDS times, open, load and attach every program
 * of OBJ, keep them ON_MS, detach and close, wait OFF_MS. No slowpath code. */
#include <bpf/libbpf.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static void sleep_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
	nanosleep(&ts, NULL);
}

int main(int argc, char **argv)
{
	if (argc != 5) {
		fprintf(stderr, "usage: %s OBJ ROUNDS ON_MS OFF_MS\n", argv[0]);
		return 2;
	}
	int rounds = atoi(argv[2]);
	for (int r = 1; r <= rounds; r++) {
		struct bpf_object *obj = bpf_object__open_file(argv[1], NULL);
		struct bpf_program *prog;
		struct bpf_link *links[16];
		int n = 0;
		if (!obj || bpf_object__load(obj)) {
			fprintf(stderr, "load failed\n");
			return 1;
		}
		bpf_object__for_each_program(prog, obj) {
			links[n] = bpf_program__attach(prog);
			if (!links[n]) {
				fprintf(stderr, "attach %s failed\n", bpf_program__name(prog));
				return 1;
			}
			n++;
		}
		printf("round %d attached %d\n", r, n);
		fflush(stdout);
		sleep_ms(atol(argv[3]));
		for (int i = 0; i < n; i++)
			bpf_link__destroy(links[i]);
		bpf_object__close(obj);
		printf("round %d detached\n", r);
		fflush(stdout);
		sleep_ms(atol(argv[4]));
	}
	return 0;
}
