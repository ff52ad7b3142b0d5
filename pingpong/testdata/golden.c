/*
 * golden.c prints, with glibc's own printf, sscanf and inet_ntop, what
 * ibv_rc_pingpong prints and writes for a set of inputs, for the tests of
 * package pingpong (golden_test.go reads golden.txt). It uses the format
 * strings and the arithmetic of rdma-core's libibverbs/examples/
 * rc_pingpong.c and pingpong.c; run ./golden.sh to remake golden.txt.
 *
 * Lines, tab-separated:
 *   msg   LID QPN PSN GIDHEX   MESSAGE        the 52-byte address message, up to its NUL
 *   gid   GIDHEX               TEXT           inet_ntop(AF_INET6)
 *   addr  LID QPN PSN GIDHEX   LINE           the "  local address:  ..." line, without "\n"
 *   rep   SIZE ITERS USEC      LINE1|LINE2    the two result lines, joined by "|"
 */
#include <arpa/inet.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

static void hex_to_gid(const char *hex, unsigned char gid[16])
{
	for (int i = 0; i < 16; i++) {
		unsigned v;
		sscanf(hex + 2 * i, "%2x", &v);
		gid[i] = v;
	}
}

static void wire_gid(const unsigned char gid[16], char out[33])
{
	for (int i = 0; i < 4; i++) {
		uint32_t be;
		memcpy(&be, gid + 4 * i, 4);
		sprintf(out + 8 * i, "%08x", ntohl(be));
	}
}

static const char *gids[] = {
	"00000000000000000000000000000000",
	"00000000000000000000ffff0a090002",
	"00000000000000000000ffff00000000",
	"00000000000000000000ffffc0a80101",
	"fe800000000000000202c9fffe000001",
	"fd090000000000000000000000000002",
	"00000000000000000000000000000001",
	"0000000000000000000000000a000001",
	"00000000000000000000000001000000",
	"000000000000000000000000ffff0000",
	"20010db8000000010000000000000000",
	"20010db8000000000001000000000001",
	"ffffffffffffffffffffffffffffffff",
	"00010000000000000000000000000000",
	"000100000000000100000000000000ff",
};

int main(void)
{
	struct { int lid, qpn, psn; } dests[] = {
		{0, 0x11, 0xabcdef}, {0, 0xffffff, 0}, {0xffff, 0x123, 0x7}, {0x1, 0x800000, 0xffffff},
	};
	for (unsigned g = 0; g < sizeof gids / sizeof gids[0]; g++) {
		unsigned char gid[16];
		char text[INET6_ADDRSTRLEN], w[33];
		hex_to_gid(gids[g], gid);
		inet_ntop(AF_INET6, gid, text, sizeof text);
		printf("gid\t%s\t%s\n", gids[g], text);
		for (unsigned d = 0; d < sizeof dests / sizeof dests[0]; d++) {
			char msg[sizeof "0000:000000:000000:00000000000000000000000000000000"];
			if ((g + d) % 5)
				continue;
			wire_gid(gid, w);
			sprintf(msg, "%04x:%06x:%06x:%s", dests[d].lid, dests[d].qpn, dests[d].psn, w);
			printf("msg\t%d %d %d %s\t%s\n", dests[d].lid, dests[d].qpn, dests[d].psn, gids[g], msg);
			printf("addr\t%d %d %d %s\t  local address:  LID 0x%04x, QPN 0x%06x, PSN 0x%06x, GID %s\n",
			       dests[d].lid, dests[d].qpn, dests[d].psn, gids[g],
			       dests[d].lid, dests[d].qpn, dests[d].psn, text);
		}
	}
	struct { unsigned size, iters; long usec; } reps[] = {
		{4096, 1000, 12345}, {4096, 1000, 1}, {65536, 200, 2345678}, {1, 1, 7}, {0, 5, 3},
		{4096, 1000, 123456789}, {4096, 3, 10}, {1 << 20, 1000, 99999999}, {4096, 1000, 16777217},
		{4096, 7, 16777219}, {0, 0, 0}, {4096, 0, 5},
	};
	for (unsigned r = 0; r < sizeof reps / sizeof reps[0]; r++) {
		float usec = reps[r].usec;
		long long bytes = (long long) reps[r].size * reps[r].iters * 2;
		unsigned iters = reps[r].iters;
		printf("rep\t%u %u %ld\t", reps[r].size, iters, reps[r].usec);
		printf("%lld bytes in %.2f seconds = %.2f Mbit/sec|", bytes, usec / 1000000., bytes * 8. / usec);
		printf("%d iters in %.2f seconds = %.2f usec/iter\n", iters, usec / 1000000., usec / iters);
	}
	return 0;
}
