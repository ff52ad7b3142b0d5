/*
 * golden.c prints perftest's result tables and JSON results for fixed
 * numbers, with perftest's own format strings, for report_test.go to
 * compare gorxe's printers with. The #defines are copied from
 * linux-rdma/perftest src/perftest_parameters.h at tag v4.5-0.17 (6.06;
 * lines 194-253) and, for the JSON, at 00b55b6 (6.29; lines 224-250),
 * whose JSON is valid (6.06 leaves the keys unquoted).
 *
 * Run ./make.sh after changing it.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

/* v4.5-0.17 */
#define RESULT_LINE "---------------------------------------------------------------------------------------\n"
#define RESULT_FMT		" #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]"
#define RESULT_FMT_G	" #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]"
#define RESULT_FMT_LAT " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99""%"" percentile[usec]   99.9""%"" percentile[usec] "
#define RESULT_FMT_LAT_DUR " #bytes        #iterations       t_avg[usec]    tps average"
#define RESULT_EXT "\n"
#define REPORT_FMT " %-7lu    %-10" PRIu64 "       %-7.2lf            %-7.2lf		   %-7.6lf"
#define REPORT_FMT_EXT " %-7lu    %" PRIu64 "           %-7.6lf            %-7.6lf            %-7.6lf"
#define REPORT_EXT	"\n"
#define REPORT_FMT_LAT " %-7lu %" PRIu64 "          %-7.2f        %-7.2f      %-7.2f  	       %-7.2f     	%-7.2f		%-7.2f 		%-7.2f"
#define REPORT_FMT_LAT_DUR " %-7lu       %" PRIu64 "            %-7.2f        %-7.2f"

/* 00b55b6 (6.29) */
#define REPORT_FMT_JSON "\"MsgSize\": %lu,\n\"n_iterations\": %" PRIu64 ",\n\"BW_peak\": %.2lf,\n\"BW_average\": %.2lf,\n\"MsgRate\": %.6lf"
#define REPORT_FMT_EXT_JSON "\"MsgSize\": %lu,\n\"n_iterations\": %" PRIu64 ",\n\"BW_peak\": %.6lf,\n\"BW_average\": %.6lf,\n\"MsgRate\": %.6lf"
#define REPORT_FMT_LAT_JSON "\"MsgSize\": %lu,\n\"n_iterations\": %" PRIu64 ",\n\"t_min\": %.2f,\n\"t_max\": %.2f,\n\"t_typical\": %.2f,\n\"t_avg\": %.2f,\n\
\"t_stdev\": %.2f,\n\"percentile_99\": %.2f,\n\"percentile_99.9\": %.2f"
#define REPORT_FMT_LAT_DUR_JSON "\"MsgSize\": %lu,\n\"n_iterations\": %" PRIu64 ",\n\"t_avg\": %.2f,\n\"tps_average\": %.2f"
#define REPORT_EXT_JSON	"\n"

static FILE *create(const char *name)
{
	char path[64];

	snprintf(path, sizeof path, "%s.txt", name);
	return fopen(path, "w");
}

/* The samples of the -U/-H case (read_lat: whole READs), in microseconds. */
static const double samples[] = {1.5, 1.25, 2, 1, 5, 0.001, 1234567};
#define NSAMPLES (sizeof samples / sizeof samples[0])

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

int main(void)
{
	FILE *f;
	double sorted[NSAMPLES];
	unsigned i;

	/* print_full_bw_report, MB/s, no peak (-D, -N, ...) */
	f = create("bw_mb");
	fprintf(f, RESULT_FMT);
	fprintf(f, RESULT_EXT);
	fprintf(f, REPORT_FMT, 65536UL, (uint64_t)5000, 0.0, 1187.456, 0.0189993);
	fprintf(f, REPORT_EXT);
	fclose(f);

	/* a peak, and a size and count as wide as the columns */
	f = create("bw_peak");
	fprintf(f, REPORT_FMT, 8388608UL, (uint64_t)1234567890, 2543.219, 2498.004, 0.000312);
	fprintf(f, REPORT_EXT);
	fclose(f);

	/* --report_gbits */
	f = create("bw_gb");
	fprintf(f, RESULT_FMT_G);
	fprintf(f, RESULT_EXT);
	fprintf(f, REPORT_FMT, 65536UL, (uint64_t)5000, 0.0, 9.961, 0.0189993);
	fprintf(f, REPORT_EXT);
	fclose(f);

	/* --report_gbits below 0.1 Gb/s: inc_accuracy */
	f = create("bw_gb_ext");
	fprintf(f, REPORT_FMT_EXT, 2UL, (uint64_t)1000, 0.0, 0.0123457, 0.771605);
	fprintf(f, REPORT_EXT);
	fclose(f);

	/* print_report_lat */
	f = create("lat");
	fprintf(f, "%s", RESULT_FMT_LAT);
	fprintf(f, RESULT_EXT);
	fprintf(f, REPORT_FMT_LAT, 2UL, (uint64_t)1000, 1.234, 9.871, 1.503, 1.6249, 0.351, 3.214, 8.762);
	fprintf(f, REPORT_EXT);
	fclose(f);

	/* print_report_lat with -U and -H: the samples as taken, then sorted
	 * without the largest LAT_MEASURE_TAIL (2), then the header again */
	f = create("lat_hist");
	fprintf(f, "#, %s\n", "usec");
	for (i = 0; i < NSAMPLES; i++)
		fprintf(f, "%d, %g\n", i + 1, samples[i]);
	for (i = 0; i < NSAMPLES; i++)
		sorted[i] = samples[i];
	qsort(sorted, NSAMPLES, sizeof sorted[0], cmp);
	fprintf(f, "#, %s\n", "usec");
	for (i = 0; i < NSAMPLES - 2; i++)
		fprintf(f, "%d, %g\n", i + 1, sorted[i]);
	fprintf(f, RESULT_LINE);
	fprintf(f, "%s", RESULT_FMT_LAT);
	fprintf(f, RESULT_EXT);
	fprintf(f, REPORT_FMT_LAT, 2UL, (uint64_t)7, 1.234, 9.871, 1.503, 1.6249, 0.351, 3.214, 8.762);
	fprintf(f, REPORT_EXT);
	fclose(f);

	/* print_report_lat_duration */
	f = create("lat_dur");
	fprintf(f, "%s", RESULT_FMT_LAT_DUR);
	fprintf(f, RESULT_EXT);
	fprintf(f, REPORT_FMT_LAT_DUR, 2UL, (uint64_t)123456, 4.0512, 123456.784);
	fprintf(f, REPORT_EXT);
	fclose(f);

	/* the "results" objects of write_bw_report_to_file,
	 * write_report_lat_to_file and write_report_lat_duration_to_file */
	f = create("json_bw");
	fprintf(f, "\"results\": {\n");
	fprintf(f, REPORT_FMT_JSON, 65536UL, (uint64_t)5000, 0.0, 1187.456, 0.0189993);
	fprintf(f, REPORT_EXT_JSON);
	fprintf(f, "}\n");
	fclose(f);

	f = create("json_bw_ext");
	fprintf(f, "\"results\": {\n");
	fprintf(f, REPORT_FMT_EXT_JSON, 2UL, (uint64_t)1000, 0.0, 0.0123457, 0.771605);
	fprintf(f, REPORT_EXT_JSON);
	fprintf(f, "}\n");
	fclose(f);

	f = create("json_lat");
	fprintf(f, "\"results\": {\n");
	fprintf(f, REPORT_FMT_LAT_JSON, 2UL, (uint64_t)1000, 1.234, 9.871, 1.503, 1.6249, 0.351, 3.214, 8.762);
	fprintf(f, REPORT_EXT_JSON);
	fprintf(f, "}\n");
	fclose(f);

	f = create("json_lat_dur");
	fprintf(f, "\"results\": {\n");
	fprintf(f, REPORT_FMT_LAT_DUR_JSON, 2UL, (uint64_t)123456, 4.0512, 123456.784);
	fprintf(f, REPORT_EXT_JSON);
	fprintf(f, "}\n");
	fclose(f);
	return 0;
}
