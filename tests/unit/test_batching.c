/* test_batching.c: the "auto" batching delay's decision (sc_auto_due in
 * server/core/batch.c), a pure function of arrival times, the service-time
 * fit and the latency target. Checked: it never waits without a fit or at
 * low load; a burst that has paused goes at once; under a steady stream
 * the oldest text waits at most the predicted service time of its batch,
 * however many texts keep arriving; a closed-loop burst is gathered whole;
 * the latency target bounds the wait; and, on seeded random inputs, the answer is never before now and
 * never past either bound. */
#include <check.h>
#include <stdint.h>
#include <stdio.h>

#include "server/core/sched_internal.h"

static const double MS = 1e6;

/* A dense stream: fit a = 2 ms, b = 20 us per token, arrivals every 0.3 ms. */
static sc_auto_in dense(uint64_t oldest)
{
    return (sc_auto_in){.now = oldest, .oldest = oldest, .last_arrival = oldest,
                        .gap = 0.3 * MS, .fitted = true, .a = 2 * MS, .b = 0.02 * MS,
                        .tok_per_text = 12, .n = 1, .target_ns = 100 * MS};
}

START_TEST(no_fit_or_no_gap_goes_now)
{
    sc_auto_in in = dense(1000000);
    in.fitted = false;
    ck_assert_uint_eq(sc_auto_due(&in), in.now);
    in = dense(1000000);
    in.gap = 0;
    ck_assert_uint_eq(sc_auto_due(&in), in.now);
}
END_TEST

START_TEST(sparse_arrivals_go_now)
{
    sc_auto_in in = dense(1000000);
    in.gap = 3 * MS; /* longer than a: nobody is expected in time */
    ck_assert_uint_eq(sc_auto_due(&in), in.now);
}
END_TEST

START_TEST(a_paused_burst_goes_now)
{
    sc_auto_in in = dense(1000000);
    in.now = in.last_arrival + (uint64_t)(2 * in.gap);
    ck_assert_uint_eq(sc_auto_due(&in), in.now);
}
END_TEST

START_TEST(a_lone_text_in_a_dense_stream_waits_a_little)
{
    sc_auto_in in = dense(1000000);
    uint64_t due = sc_auto_due(&in);
    ck_assert_uint_gt(due, in.now);
    ck_assert_uint_le(due, in.last_arrival + (uint64_t)(2 * in.gap));
}
END_TEST

/* Predicted service time of a batch of n + 1 texts. */
static double service(const sc_auto_in *in)
{
    return in->a + in->b * in->tok_per_text * ((double)in->n + 1);
}

/* Texts keep arriving every gap (a steady stream at about 80% of what
 * batches of its size can serve): each arrival decides again. The oldest
 * must go by oldest + the service time of its batch, not be pushed back
 * by every new arrival until the latency budget. */
START_TEST(a_steady_stream_never_holds_the_oldest_past_its_batch_time)
{
    const uint64_t oldest = 5000000;
    sc_auto_in in = dense(oldest);
    in.b = 0.02 * MS; /* 0.24 ms a text: a stream every 0.3 ms is 80% busy */
    int went_at = -1;
    for (int k = 0; k < 400 && went_at < 0; k++) {
        in.now = in.last_arrival = oldest + (uint64_t)(k * in.gap);
        in.n = (size_t)k + 1;
        uint64_t due = sc_auto_due(&in);
        ck_assert_uint_ge(due, in.now);
        ck_assert_msg(due == in.now || (double)due <= (double)oldest + service(&in) + 1,
                      "arrival %d: due %.3f ms after the oldest, past the batch's service "
                      "time %.3f ms", k, (double)(due - oldest) / MS, service(&in) / MS);
        if (due == in.now)
            went_at = k;
    }
    /* t = a + b * tok * (t / gap + 2) at t = (2 + 0.48) ms / (1 - 0.8) = 12.4 ms,
     * far below the 0.7 * 100 ms budget the old rule waited for */
    ck_assert_msg(went_at > 0 && went_at * in.gap <= 12.4 * MS + in.gap,
                  "the batch went at arrival %d (%.2f ms), expected by 12.4 ms", went_at,
                  went_at * in.gap / MS);
}
END_TEST

/* Closed-loop clients answered together send again together: a burst of
 * 64 arrivals 20 us apart is gathered whole, then goes when it pauses. */
START_TEST(a_closed_loop_burst_is_gathered_whole)
{
    const uint64_t oldest = 5000000;
    sc_auto_in in = dense(oldest);
    in.a = 0.5 * MS;
    in.gap = 0.02 * MS;
    for (int k = 0; k < 64; k++) {
        in.now = in.last_arrival = oldest + (uint64_t)(k * in.gap);
        in.n = (size_t)k + 1;
        ck_assert_msg(sc_auto_due(&in) > in.now, "arrival %d: went before the burst ended", k);
    }
    in.now = in.last_arrival + (uint64_t)(2 * in.gap);
    ck_assert_uint_eq(sc_auto_due(&in), in.now);
}
END_TEST

START_TEST(the_latency_target_bounds_the_wait)
{
    sc_auto_in in = dense(1000000);
    in.target_ns = 4 * MS; /* 0.7 * 4 ms - service (2 + 0.02 * 12 * 2 ms) = 0.32 ms */
    uint64_t due = sc_auto_due(&in);
    double by_target = 0.7 * in.target_ns - (in.a + in.b * in.tok_per_text * 2);
    ck_assert_uint_le(due, in.oldest + (uint64_t)by_target + 1);
    in.target_ns = 1 * MS; /* already late: go */
    ck_assert_uint_eq(sc_auto_due(&in), in.now);
}
END_TEST

static uint64_t next_u64(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static double uni(uint64_t *s, double lo, double hi)
{
    return lo + (hi - lo) * (double)(next_u64(s) >> 11) / 9007199254740992.0;
}

START_TEST(random_inputs_stay_within_both_bounds)
{
    uint64_t seed = 20261124;
    for (int i = 0; i < 200000; i++) {
        sc_auto_in in = {.oldest = 1000000000 + (uint64_t)uni(&seed, 0, 1e9)};
        in.last_arrival = in.oldest + (uint64_t)uni(&seed, 0, 20 * MS);
        in.now = in.last_arrival + (uint64_t)uni(&seed, 0, 10 * MS);
        in.gap = uni(&seed, -1, 5 * MS);
        in.fitted = next_u64(&seed) % 8 != 0;
        in.a = uni(&seed, 0, 5 * MS);
        in.b = uni(&seed, 0, 0.1 * MS);
        in.tok_per_text = uni(&seed, 1, 256);
        in.n = (size_t)(next_u64(&seed) % 64);
        in.target_ns = uni(&seed, 1, 300) * MS;
        uint64_t due = sc_auto_due(&in);
        ck_assert_uint_ge(due, in.now);
        if (due == in.now)
            continue;
        double by_target = (double)in.oldest + 0.7 * in.target_ns -
                           (in.a + in.b * in.tok_per_text * ((double)in.n + 1));
        ck_assert_msg(in.fitted && in.gap > 0 && in.gap <= in.a && in.n > 0,
                      "case %d waits where it must not", i);
        ck_assert_msg((double)due <= (double)in.oldest + service(&in) + 1,
                      "case %d: past the batch's service time", i);
        ck_assert_msg((double)due <= by_target + 1, "case %d: past the latency target", i);
        ck_assert_msg((double)due <= (double)in.last_arrival + 2 * in.gap + 1,
                      "case %d: past the expected next arrival", i);
    }
}
END_TEST

static Suite *test_suite(void)
{
    Suite *s = suite_create("batching");
    TCase *tc = tcase_create("auto delay");
    tcase_add_test(tc, no_fit_or_no_gap_goes_now);
    tcase_add_test(tc, sparse_arrivals_go_now);
    tcase_add_test(tc, a_paused_burst_goes_now);
    tcase_add_test(tc, a_lone_text_in_a_dense_stream_waits_a_little);
    tcase_add_test(tc, a_steady_stream_never_holds_the_oldest_past_its_batch_time);
    tcase_add_test(tc, a_closed_loop_burst_is_gathered_whole);
    tcase_add_test(tc, the_latency_target_bounds_the_wait);
    tcase_add_test(tc, random_inputs_stay_within_both_bounds);
    suite_add_tcase(s, tc);
    return s;
}

#include "tests/unit/check_main.h"
