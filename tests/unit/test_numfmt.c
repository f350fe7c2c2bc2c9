/* test_numfmt.c: checks kernels/cpu/numfmt.c, the FP32 <-> FP16 / BF16 / FP8 /
 * INT8 conversions, against the ml_dtypes fixtures in tests/fixtures/numfmt
 * (written by tools/make-numfmt-fixtures.py), against hand-worked cases
 * (saturation, INT8 rounding), and its array converters against its scalar
 * ones.
 *
 * Fixtures are looked for in $NUMFMT_FIXTURES, then tests/fixtures/numfmt
 * under the working directory, then relative to this program
 * (build/<cfg>/tests/test_numfmt -> ../../../tests/fixtures/numfmt).
 *
 * Loops over many values count mismatches and assert once at the end: check's
 * ck_assert records a mark point per call, which is slow in a hot loop.
 */
#include "engine/numfmt.h"
#include "tests/unit/testutil.h"

#include <check.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ======================================================================== */
/* helpers                                                                  */
/* ======================================================================== */

/* Bit views of floats, for exact comparisons. */
/* The four float formats the fixtures cover, with what the tests need to
 * know about each, so one test body serves all four. */
typedef struct {
    const char *name;       /* fixture file prefix */
    nf_format fmt;
    unsigned bits;
    uint32_t sign;          /* sign bit of a code */
    uint32_t (*enc)(float);
    float (*dec)(uint32_t);
    bool (*is_nan)(uint32_t);
} ffmt;

static uint32_t enc_f16(float x) { return nf_f32_to_f16(x); }
static uint32_t enc_bf16(float x) { return nf_f32_to_bf16(x); }
static uint32_t enc_e4m3(float x) { return nf_f32_to_e4m3(x); }
static uint32_t enc_e5m2(float x) { return nf_f32_to_e5m2(x); }
static float dec_f16(uint32_t c) { return nf_f16_to_f32((uint16_t)c); }
static float dec_bf16(uint32_t c) { return nf_bf16_to_f32((uint16_t)c); }
static float dec_e4m3(uint32_t c) { return nf_e4m3_to_f32((uint8_t)c); }
static float dec_e5m2(uint32_t c) { return nf_e5m2_to_f32((uint8_t)c); }
static bool nan_f16(uint32_t c) { return (c & 0x7fffu) > 0x7c00u; }
static bool nan_bf16(uint32_t c) { return (c & 0x7fffu) > 0x7f80u; }
static bool nan_e4m3(uint32_t c) { return (c & 0x7fu) == 0x7fu; }
static bool nan_e5m2(uint32_t c) { return (c & 0x7fu) > 0x7cu; }

static const ffmt FF[] = {
    { "f16",  NF_F16,  16, 0x8000u, enc_f16,  dec_f16,  nan_f16 },
    { "bf16", NF_BF16, 16, 0x8000u, enc_bf16, dec_bf16, nan_bf16 },
    { "e4m3", NF_E4M3,  8, 0x80u,   enc_e4m3, dec_e4m3, nan_e4m3 },
    { "e5m2", NF_E5M2,  8, 0x80u,   enc_e5m2, dec_e5m2, nan_e5m2 },
};
enum { FF_F16, FF_BF16, FF_E4M3, FF_E5M2 };

/* Mismatch counter: keeps the first few descriptions for the failure text. */
typedef struct {
    long bad;
    char first[400];
} tally;

static void tally_bad(tally *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void tally_bad(tally *t, const char *fmt, ...)
{
    if (t->bad++ < 3) {
        size_t len = strlen(t->first);
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(t->first + len, sizeof t->first - len, fmt, ap);
        va_end(ap);
        len = strlen(t->first);
        if (len + 3 < sizeof t->first)
            strcat(t->first, "; ");
    }
}

#define ck_assert_tally(t) \
    ck_assert_msg((t).bad == 0, "%ld mismatches; first: %s", (t).bad, (t).first)

/* A decoded value against the reference: NaN matches any NaN with the same
 * sign (payloads are implementation detail); everything else bit for bit,
 * so -0 and +0 differ. */
static bool same_f32(float got, float want)
{
    if (isnan(want))
        return isnan(got) && signbit(got) == signbit(want);
    return nf_bits(got) == nf_bits(want);
}

/* Deterministic generator (xorshift64*), so a failure reproduces. */
typedef struct { uint64_t s; } rng;

static uint32_t rng_u32(rng *r)
{
    r->s ^= r->s >> 12;
    r->s ^= r->s << 25;
    r->s ^= r->s >> 27;
    return (uint32_t)((r->s * 0x2545F4914F6CDD1DULL) >> 32);
}

/* A random FP32 input that is likely to be interesting to some format:
 * any bit pattern; a value of some format nudged a few FP32 ulps; a
 * midpoint of BF16 neighbours; or a special. */
static float rng_input(rng *r)
{
    static const uint32_t specials[] = {
        0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u, 0x7fc00000u, 0xffc00000u,
        0x7f800001u, 0xff800001u, 0x7fffffffu, 0x00000001u, 0x807fffffu, 0x7f7fffffu,
        0x43e00000u, 0x43e80000u, 0x47600000u, 0x47700000u, 0x477fe000u, 0x477ff000u,
    };
    uint32_t k = rng_u32(r) % 6;
    int32_t nudge = (int32_t)(rng_u32(r) % 5) - 2;

    switch (k) {
    case 0: return nf_float(rng_u32(r));
    case 1: return nf_float(nf_bits(nf_f16_to_f32((uint16_t)rng_u32(r))) + (uint32_t)nudge);
    case 2: return nf_float(nf_bits(nf_e4m3_to_f32((uint8_t)rng_u32(r))) + (uint32_t)nudge);
    case 3: return nf_float(nf_bits(nf_e5m2_to_f32((uint8_t)rng_u32(r))) + (uint32_t)nudge);
    case 4: return nf_float(((rng_u32(r) & 0xffff0000u) | 0x8000u) + (uint32_t)nudge);
    default: return nf_float(specials[rng_u32(r) % (sizeof specials / sizeof specials[0])]);
    }
}

/* ======================================================================== */
/* fixtures                                                                 */
/* ======================================================================== */

typedef struct {
    uint32_t count, in_size, out_size;
    unsigned char *data;      /* whole file */
    const unsigned char *in;  /* count * in_size bytes (NULL when in_size 0) */
    const unsigned char *out; /* count * out_size bytes */
} fixture;

/* Where the fixture folder is; see the top of the file. */
static const char *fixture_dir(void)
{
    static char dir[PATH_MAX + 64];
    const char *env = getenv("NUMFMT_FIXTURES");
    if (env && *env)
        return env;
    if (access("tests/fixtures/numfmt/README.md", R_OK) == 0)
        return "tests/fixtures/numfmt";
    char exe[PATH_MAX];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (len > 0) {
        exe[len] = '\0';
        char *slash = strrchr(exe, '/');
        if (slash)
            *slash = '\0';
        snprintf(dir, sizeof dir, "%s/../../../tests/fixtures/numfmt", exe);
        return dir;
    }
    return "tests/fixtures/numfmt";
}

/* Little-endian field reads, so the fixtures mean the same on any host. */
static uint32_t le_u32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint32_t le_uint(const unsigned char *p, uint32_t size)
{
    uint32_t v = 0;
    for (uint32_t i = 0; i < size; i++)
        v |= (uint32_t)p[i] << (8 * i);
    return v;
}

/* Reads <name>.bin and checks its header against its size; a missing or
 * malformed fixture fails the test (they are committed, never optional). */
static fixture fixture_load(const char *name)
{
    char path[PATH_MAX + 128];
    snprintf(path, sizeof path, "%s/%s.bin", fixture_dir(), name);
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "cannot open fixture %s (set NUMFMT_FIXTURES)", path);
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    ck_assert_msg(size >= 16, "%s: too short", path);
    fixture fx = { .data = malloc((size_t)size) };
    ck_assert_ptr_nonnull(fx.data);
    ck_assert_msg(fread(fx.data, 1, (size_t)size, f) == (size_t)size, "%s: read failed", path);
    fclose(f);
    ck_assert_msg(memcmp(fx.data, "NFX1", 4) == 0, "%s: bad magic", path);
    fx.count = le_u32(fx.data + 4);
    fx.in_size = le_u32(fx.data + 8);
    fx.out_size = le_u32(fx.data + 12);
    ck_assert_msg((uint64_t)16 + (uint64_t)fx.count * (fx.in_size + fx.out_size) == (uint64_t)size,
                  "%s: size does not match its header", path);
    fx.in = fx.in_size ? fx.data + 16 : NULL;
    fx.out = fx.data + 16 + (size_t)fx.count * fx.in_size;
    return fx;
}

static uint32_t fixture_in(const fixture *fx, uint32_t i)
{
    return fx->in ? le_uint(fx->in + (size_t)i * fx->in_size, fx->in_size) : i;
}

static uint32_t fixture_out(const fixture *fx, uint32_t i)
{
    return le_uint(fx->out + (size_t)i * fx->out_size, fx->out_size);
}

/* ======================================================================== */
/* decode: every bit pattern against ml_dtypes                              */
/* ======================================================================== */

/* Shared body: all 2^bits patterns, through the scalar decoder. */
static void check_decode_fixture(const ffmt *ff)
{
    char name[32];
    snprintf(name, sizeof name, "%s_decode", ff->name);
    fixture fx = fixture_load(name);
    ck_assert_uint_eq(fx.count, 1u << ff->bits);
    ck_assert_uint_eq(fx.out_size, 4);

    tally t = { 0 };
    for (uint32_t i = 0; i < fx.count; i++) {
        float want = nf_float(fixture_out(&fx, fixture_in(&fx, i)));
        float got = ff->dec(i);
        if (!same_f32(got, want))
            tally_bad(&t, "%s 0x%x -> 0x%08x, want 0x%08x", ff->name, i, nf_bits(got),
                      nf_bits(want));
    }
    free(fx.data);
    ck_assert_tally(t);
}

START_TEST(f16_every_pattern_decodes_like_ml_dtypes) { check_decode_fixture(&FF[FF_F16]); }
END_TEST
START_TEST(bf16_every_pattern_decodes_like_ml_dtypes) { check_decode_fixture(&FF[FF_BF16]); }
END_TEST
START_TEST(e4m3_every_pattern_decodes_like_ml_dtypes) { check_decode_fixture(&FF[FF_E4M3]); }
END_TEST
START_TEST(e5m2_every_pattern_decodes_like_ml_dtypes) { check_decode_fixture(&FF[FF_E5M2]); }
END_TEST

/* ======================================================================== */
/* round trip: decode then encode gives the same bits                       */
/* ======================================================================== */

/* Every non-NaN code (both zeros, subnormals, the largest finite, inf where
 * the format has it) must survive decode -> encode unchanged. */
static void check_round_trip(const ffmt *ff)
{
    tally t = { 0 };
    long tried = 0;
    for (uint32_t c = 0; c < (1u << ff->bits); c++) {
        if (ff->is_nan(c))
            continue;
        tried++;
        uint32_t back = ff->enc(ff->dec(c));
        if (back != c)
            tally_bad(&t, "%s 0x%x -> %a -> 0x%x", ff->name, c, (double)ff->dec(c), back);
    }
    ck_assert_int_gt(tried, 0);
    ck_assert_uint_eq(ff->enc(0.0f), 0);
    ck_assert_uint_eq(ff->enc(-0.0f), ff->sign);
    ck_assert_uint_eq(nf_bits(ff->dec(0)), 0);
    ck_assert_uint_eq(nf_bits(ff->dec(ff->sign)), 0x80000000u);
    ck_assert_tally(t);
}

START_TEST(f16_every_non_nan_pattern_round_trips) { check_round_trip(&FF[FF_F16]); }
END_TEST
START_TEST(bf16_every_non_nan_pattern_round_trips) { check_round_trip(&FF[FF_BF16]); }
END_TEST
START_TEST(e4m3_every_non_nan_pattern_round_trips) { check_round_trip(&FF[FF_E4M3]); }
END_TEST
START_TEST(e5m2_every_non_nan_pattern_round_trips) { check_round_trip(&FF[FF_E5M2]); }
END_TEST

/* The saturating E5M2 encoder keeps every finite code too. */
START_TEST(e5m2_sat_every_finite_pattern_round_trips)
{
    tally t = { 0 };
    for (uint32_t c = 0; c < 256; c++) {
        if ((c & 0x7fu) >= 0x7cu)
            continue;
        uint32_t back = nf_f32_to_e5m2_sat(nf_e5m2_to_f32((uint8_t)c));
        if (back != c)
            tally_bad(&t, "0x%x -> 0x%x", c, back);
    }
    ck_assert_tally(t);
}
END_TEST

/* ======================================================================== */
/* encode: every rounding boundary against ml_dtypes                        */
/* ======================================================================== */

/* An encoded code against the reference: NaN matches any NaN code with the
 * same sign, everything else exactly. */
static bool same_code(const ffmt *ff, uint32_t got, uint32_t want)
{
    if (ff->is_nan(want))
        return ff->is_nan(got) && (got & ff->sign) == (want & ff->sign);
    return got == want;
}

/* Each fixture input x, and -x (the generator checked that ml_dtypes is
 * sign-symmetric on these inputs), through the scalar encoder and through
 * the array encoder. For E5M2 the saturating encoder is checked on the same
 * inputs: it must agree except that inf becomes the largest finite. */
static void check_encode_fixture(const ffmt *ff, uint32_t min_count)
{
    char name[32];
    snprintf(name, sizeof name, "%s_encode", ff->name);
    fixture fx = fixture_load(name);
    ck_assert_uint_ge(fx.count, min_count);
    ck_assert_uint_eq(fx.in_size, 4);
    ck_assert_uint_eq(fx.out_size, ff->bits / 8);

    float *xs = malloc(2 * (size_t)fx.count * sizeof *xs);
    uint32_t *want = malloc(2 * (size_t)fx.count * sizeof *want);
    ck_assert_ptr_nonnull(xs);
    ck_assert_ptr_nonnull(want);
    for (uint32_t i = 0; i < fx.count; i++) {
        xs[2 * i] = nf_float(fixture_in(&fx, i));
        want[2 * i] = fixture_out(&fx, i);
        xs[2 * i + 1] = -xs[2 * i];
        want[2 * i + 1] = want[2 * i] ^ ff->sign;
    }
    size_t n = 2 * (size_t)fx.count;

    tally t = { 0 };
    for (size_t i = 0; i < n; i++) {
        uint32_t got = ff->enc(xs[i]);
        if (!same_code(ff, got, want[i]))
            tally_bad(&t, "%s(%a = 0x%08x) = 0x%x, want 0x%x", ff->name, (double)xs[i],
                      nf_bits(xs[i]), got, want[i]);
        if (ff->fmt == NF_E5M2) {
            uint32_t w = (want[i] & 0x7fu) == 0x7cu ? (want[i] & 0x80u) | 0x7bu : want[i];
            uint32_t s = nf_f32_to_e5m2_sat(xs[i]);
            if (!same_code(ff, s, w))
                tally_bad(&t, "e5m2_sat(%a) = 0x%x, want 0x%x", (double)xs[i], s, w);
        }
    }

    /* the same inputs through the array path (SIMD body and tail) */
    unsigned char *codes = malloc(n * 2);
    ck_assert_ptr_nonnull(codes);
    ck_assert_ptr_nonnull(nf_traits_table[ff->fmt].from_f32);
    nf_traits_table[ff->fmt].from_f32(xs, codes, n, 1.0f);
    for (size_t i = 0; i < n; i++) {
        uint32_t got = ff->bits == 8 ? codes[i] : (uint32_t)((uint16_t *)(void *)codes)[i];
        if (!same_code(ff, got, want[i]))
            tally_bad(&t, "%s array(%a) = 0x%x, want 0x%x", ff->name, (double)xs[i], got,
                      want[i]);
    }
    free(codes);
    free(xs);
    free(want);
    free(fx.data);
    ck_assert_tally(t);
}

START_TEST(f16_encodes_every_rounding_boundary_like_ml_dtypes)
{
    check_encode_fixture(&FF[FF_F16], 4 * 31743u);
}
END_TEST
START_TEST(bf16_encodes_every_rounding_boundary_like_ml_dtypes)
{
    check_encode_fixture(&FF[FF_BF16], 4 * 32639u);
}
END_TEST
START_TEST(e4m3_encodes_every_rounding_boundary_like_ml_dtypes)
{
    check_encode_fixture(&FF[FF_E4M3], 4 * 126u);
}
END_TEST
START_TEST(e5m2_encodes_every_rounding_boundary_like_ml_dtypes)
{
    check_encode_fixture(&FF[FF_E5M2], 4 * 123u);
}
END_TEST

/* ======================================================================== */
/* hand-worked edges                                                        */
/* ======================================================================== */

/* E4M3 FN has no inf; we clamp. 448 = 1.110b * 2^8 is the largest finite
 * code 0x7e; the next step would be 480 = 1.111b * 2^8 (0x7f, which FN
 * spends on NaN). 464, the midpoint, is a tie that goes to the even
 * mantissa 110, i.e. 448 (ml_dtypes agrees); anything above would round to
 * 480 and so saturates to 448 instead of becoming NaN; inf does too. */
START_TEST(e4m3_saturates_out_of_range_and_inf_to_448)
{
    static const struct { float x; uint8_t want; } cases[] = {
        { 448.0f, 0x7e },  { 449.0f, 0x7e },  { 463.99997f, 0x7e }, { 464.0f, 0x7e },
        { 464.00003f, 0x7e }, { 480.0f, 0x7e }, { 1e9f, 0x7e }, { FLT_MAX, 0x7e },
        { INFINITY, 0x7e }, { -448.0f, 0xfe }, { -464.0f, 0xfe }, { -1e9f, 0xfe },
        { -INFINITY, 0xfe }, { 432.0f, 0x7e },  /* tie 416|448 -> even 448 */
        { 431.99997f, 0x7d }, { 0x1p-10f, 0x00 }, /* tie 0|2^-9 -> even 0 */
        { 0x1.000002p-10f, 0x01 }, { 0x3p-10f, 0x02 }, /* tie 1|2 -> even 2 */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint8_t got = nf_f32_to_e4m3(cases[i].x);
        ck_assert_msg(got == cases[i].want, "e4m3(%a) = 0x%x, want 0x%x", (double)cases[i].x,
                      got, cases[i].want);
        uint8_t arr[9];
        float xs[9];
        for (int j = 0; j < 9; j++)
            xs[j] = cases[i].x;
        nf_f32_to_e4m3_array(xs, arr, 9);
        for (int j = 0; j < 9; j++)
            ck_assert_uint_eq(arr[j], cases[i].want);
    }
    ck_assert_float_eq(nf_e4m3_to_f32(0x7e), 448.0f);
    ck_assert_float_eq(nf_e4m3_to_f32(0xfe), -448.0f);
}
END_TEST

/* Every NaN, whatever its payload, becomes S.1111.111 with its sign. */
START_TEST(e4m3_nan_encodes_to_s1111111)
{
    static const uint32_t nans[] = { 0x7fc00000u, 0x7f800001u, 0x7fffffffu, 0x7fa00000u,
                                     0x7fc00001u };
    for (size_t i = 0; i < sizeof nans / sizeof nans[0]; i++) {
        ck_assert_uint_eq(nf_f32_to_e4m3(nf_float(nans[i])), 0x7f);
        ck_assert_uint_eq(nf_f32_to_e4m3(nf_float(nans[i] | 0x80000000u)), 0xff);
    }
    ck_assert(isnan(nf_e4m3_to_f32(0x7f)) && !signbit(nf_e4m3_to_f32(0x7f)));
    ck_assert(isnan(nf_e4m3_to_f32(0xff)) && signbit(nf_e4m3_to_f32(0xff)));
}
END_TEST

/* E5M2: 57344 = 1.11b * 2^15 (0x7b) is the largest finite, 65536 would be
 * next; 61440 is their midpoint and ties to the even 65536, which is inf.
 * The saturating variant clamps all of those, and inf, to 57344. */
START_TEST(e5m2_overflows_to_inf_and_sat_variant_clamps_to_57344)
{
    static const struct { float x; uint8_t ieee, sat; } cases[] = {
        { 57344.0f, 0x7b, 0x7b },   { 61439.996f, 0x7b, 0x7b }, { 61440.0f, 0x7c, 0x7b },
        { 65536.0f, 0x7c, 0x7b },   { 1e9f, 0x7c, 0x7b },       { INFINITY, 0x7c, 0x7b },
        { -61440.0f, 0xfc, 0xfb },  { -INFINITY, 0xfc, 0xfb },  { -57344.0f, 0xfb, 0xfb },
        { 0x1p-17f, 0x00, 0x00 },   /* tie 0|2^-16 -> even 0 */
        { 0x1.000002p-17f, 0x01, 0x01 },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ck_assert_msg(nf_f32_to_e5m2(cases[i].x) == cases[i].ieee, "e5m2(%a) = 0x%x",
                      (double)cases[i].x, nf_f32_to_e5m2(cases[i].x));
        ck_assert_msg(nf_f32_to_e5m2_sat(cases[i].x) == cases[i].sat, "e5m2_sat(%a) = 0x%x",
                      (double)cases[i].x, nf_f32_to_e5m2_sat(cases[i].x));
    }
    ck_assert(isinf(nf_e5m2_to_f32(0x7c)) && isinf(nf_e5m2_to_f32(0xfc)));
    ck_assert(nan_e5m2(nf_f32_to_e5m2(NAN)) && nan_e5m2(nf_f32_to_e5m2_sat(NAN)));
    ck_assert_uint_eq(nf_f32_to_e5m2_sat(-NAN) & 0x80u, 0x80u);
}
END_TEST

/* FP16's overflow boundary and subnormal ties, worked by hand. */
START_TEST(f16_overflow_and_subnormal_ties_round_to_even)
{
    ck_assert_uint_eq(nf_f32_to_f16(65504.0f), 0x7bff);
    ck_assert_uint_eq(nf_f32_to_f16(65519.996f), 0x7bff);
    ck_assert_uint_eq(nf_f32_to_f16(65520.0f), 0x7c00);   /* tie 65504|65536 -> inf */
    ck_assert_uint_eq(nf_f32_to_f16(-1e30f), 0xfc00);
    ck_assert_uint_eq(nf_f32_to_f16(0x1p-24f), 0x0001);
    ck_assert_uint_eq(nf_f32_to_f16(0x1p-25f), 0x0000);   /* tie 0|2^-24 -> 0 */
    ck_assert_uint_eq(nf_f32_to_f16(0x1.000002p-25f), 0x0001);
    ck_assert_uint_eq(nf_f32_to_f16(0x3p-25f), 0x0002);   /* tie 1|2 -> 2 */
    ck_assert_uint_eq(nf_f32_to_f16(0x1.ff8p-15f), 0x03ff); /* largest subnormal */
    ck_assert_uint_eq(nf_f32_to_f16(0x1.ffbffep-15f), 0x03ff);
    ck_assert_uint_eq(nf_f32_to_f16(0x1.ffcp-15f), 0x0400); /* tie -> min normal */
    ck_assert_uint_eq(nf_f32_to_f16(nf_float(1)), 0x0000); /* FP32 subnormal */
}
END_TEST

/* NaN stays NaN, keeps its sign, and comes out quiet, including signalling
 * NaNs whose payload sits only in the bits that get dropped; for BF16 that
 * is the case that naive rounding would carry into the inf pattern. */
START_TEST(nan_stays_quiet_nan_and_never_rounds_into_inf)
{
    static const uint32_t nans[] = { 0x7f800001u, 0x7f801fffu, 0x7f807fffu, 0x7fffffffu,
                                     0x7fc00000u, 0x7fbfffffu };
    for (size_t i = 0; i < sizeof nans / sizeof nans[0]; i++) {
        for (uint32_t s = 0; s <= 1; s++) {
            float x = nf_float(nans[i] | s << 31);
            uint16_t h = nf_f32_to_f16(x), b = nf_f32_to_bf16(x);
            ck_assert_msg(nan_f16(h) && (h & 0x0200u) && (h >> 15) == s, "f16 0x%x", h);
            ck_assert_msg(nan_bf16(b) && (b & 0x0040u) && (b >> 15) == s, "bf16 0x%x", b);
            uint8_t e = nf_f32_to_e5m2(x);
            ck_assert_msg(nan_e5m2(e) && (e & 0x02u) && (uint32_t)(e >> 7) == s, "e5m2 0x%x", e);
        }
    }
    ck_assert_uint_eq(nf_f32_to_bf16(nf_float(0x7f7fffffu)), 0x7f80); /* FLT_MAX -> inf */
    ck_assert_uint_eq(nf_f32_to_bf16(nf_float(0x7f7f7fffu)), 0x7f7f);
    ck_assert_uint_eq(nf_f32_to_bf16(nf_float(0x00008000u)), 0x0000); /* subnormal tie */
    ck_assert_uint_eq(nf_f32_to_bf16(nf_float(0x00018000u)), 0x0002);
    ck_assert(isnan(nf_f16_to_f32(0x7c01)) && isnan(nf_bf16_to_f32(0xff81)));
}
END_TEST

/* ======================================================================== */
/* INT8                                                                     */
/* ======================================================================== */

/* Halves go to the even integer, in both signs and through the scale. */
START_TEST(i8_rounds_half_to_even)
{
    static const struct { float x, scale; int8_t want; } cases[] = {
        { 0.5f, 1, 0 },    { 1.5f, 1, 2 },     { 2.5f, 1, 2 },     { 3.5f, 1, 4 },
        { -0.5f, 1, 0 },   { -1.5f, 1, -2 },   { -2.5f, 1, -2 },   { 126.5f, 1, 126 },
        { -126.5f, 1, -126 }, { 0.49999997f, 1, 0 }, { 0.50000006f, 1, 1 },
        { 2.5000002f, 1, 3 }, { 0.375f, 0.25f, 2 }, { 0.625f, 0.25f, 2 },
        { -0.625f, 0.25f, -2 }, { 1.0f, 0.1f, 10 }, { -0.0f, 1, 0 }, { 0.0f, 3, 0 },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int8_t got = nf_f32_to_i8(cases[i].x, cases[i].scale);
        ck_assert_msg(got == cases[i].want, "i8(%a / %a) = %d, want %d", (double)cases[i].x,
                      (double)cases[i].scale, got, cases[i].want);
    }
}
END_TEST

/* The code range is symmetric, [-127, 127]: beyond it (inf too) clamps;
 * NaN gives 0; -128 is never produced but still decodes. */
START_TEST(i8_clamps_at_plus_minus_127)
{
    ck_assert_int_eq(nf_f32_to_i8(127.0f, 1), 127);
    ck_assert_int_eq(nf_f32_to_i8(127.5f, 1), 127);
    ck_assert_int_eq(nf_f32_to_i8(128.0f, 1), 127);
    ck_assert_int_eq(nf_f32_to_i8(1e9f, 1), 127);
    ck_assert_int_eq(nf_f32_to_i8(INFINITY, 1), 127);
    ck_assert_int_eq(nf_f32_to_i8(-127.0f, 1), -127);
    ck_assert_int_eq(nf_f32_to_i8(-127.5f, 1), -127);
    ck_assert_int_eq(nf_f32_to_i8(-128.0f, 1), -127);
    ck_assert_int_eq(nf_f32_to_i8(-1e9f, 1), -127);
    ck_assert_int_eq(nf_f32_to_i8(-INFINITY, 1), -127);
    ck_assert_int_eq(nf_f32_to_i8(NAN, 1), 0);
    ck_assert_int_eq(nf_f32_to_i8(-NAN, 0.5f), 0);
    ck_assert_int_eq(nf_f32_to_i8(1.0f, 1e-30f), 127);
    ck_assert_float_eq(nf_i8_to_f32(-128, 0.5f), -64.0f);
    ck_assert_float_eq(nf_i8_to_f32(127, 0.25f), 31.75f);
    ck_assert_float_eq(nf_i8_to_f32(-3, 2.0f), -6.0f);
}
END_TEST

/* Against an independent formula (libm rintf, default rounding mode = ties
 * to even), and the symmetry q(-x) == -q(x), on seeded random inputs. */
START_TEST(i8_matches_rintf_and_is_symmetric_on_random_inputs)
{
    rng r = { 0x9e3779b97f4a7c15ULL };
    tally t = { 0 };
    for (int i = 0; i < 200000; i++) {
        float scale = 0.001f + (float)(rng_u32(&r) % 10000) / 1000.0f;
        float x = ((float)(int32_t)rng_u32(&r) / 2147483648.0f) * 200.0f * scale;
        if (i % 4 == 0)   /* exact halves */
            x = ((float)((int32_t)(rng_u32(&r) % 300) - 150) + 0.5f) * scale;
        float v = x / scale;
        float want = isnan(v) ? 0 : rintf(fminf(fmaxf(v, -127.0f), 127.0f));
        int8_t got = nf_f32_to_i8(x, scale);
        if (got != (int8_t)want || nf_f32_to_i8(-x, scale) != -got)
            tally_bad(&t, "i8(%a / %a) = %d, want %g", (double)x, (double)scale, got,
                      (double)want);
    }
    ck_assert_tally(t);
}
END_TEST

START_TEST(u8_asym_rounds_half_to_even_clamps_and_maps_nan_to_the_zero_point)
{
    ck_assert_int_eq(nf_f32_to_u8_asym(0.0f, 1, 10), 10);
    ck_assert_int_eq(nf_f32_to_u8_asym(2.5f, 1, 10), 12);   /* 2.5 -> 2 */
    ck_assert_int_eq(nf_f32_to_u8_asym(3.5f, 1, 10), 14);   /* 3.5 -> 4 */
    ck_assert_int_eq(nf_f32_to_u8_asym(-2.5f, 1, 10), 8);   /* -2.5 -> -2 */
    ck_assert_int_eq(nf_f32_to_u8_asym(-10.0f, 1, 10), 0);
    ck_assert_int_eq(nf_f32_to_u8_asym(-10.5f, 1, 10), 0);  /* -10 (even) + 10 */
    ck_assert_int_eq(nf_f32_to_u8_asym(-11.0f, 1, 10), 0);
    ck_assert_int_eq(nf_f32_to_u8_asym(245.0f, 1, 10), 255);
    ck_assert_int_eq(nf_f32_to_u8_asym(246.0f, 1, 10), 255);
    ck_assert_int_eq(nf_f32_to_u8_asym(1e30f, 1, 10), 255);
    ck_assert_int_eq(nf_f32_to_u8_asym(INFINITY, 1, 10), 255);
    ck_assert_int_eq(nf_f32_to_u8_asym(-INFINITY, 1, 10), 0);
    ck_assert_int_eq(nf_f32_to_u8_asym(NAN, 1, 10), 10);
    ck_assert_int_eq(nf_f32_to_u8_asym(-NAN, 0.5f, 200), 200);
    ck_assert_int_eq(nf_f32_to_u8_asym(1.0f, 1e30f, 0), 255); /* the reciprocal of 1e-30 */
    ck_assert_int_eq(nf_f32_to_u8_asym(-1.0f, 1e30f, 255), 0);
    ck_assert_int_eq(nf_f32_to_u8_asym(0.75f, 4.0f, 0), 3);
    ck_assert_int_eq(nf_f32_to_u8_asym(0.625f, 4.0f, 0), 2); /* 2.5 -> 2 */
}
END_TEST

/* Against an independent formula (libm rintf in double-checked range). */
START_TEST(u8_asym_matches_rintf_on_random_inputs)
{
    rng r = { 0x51ed270b27d4f1a3ULL };
    tally t = { 0 };
    for (int i = 0; i < 200000; i++) {
        float scale = 0.001f + (float)(rng_u32(&r) % 10000) / 1000.0f;
        int zp = (int)(rng_u32(&r) % 256);
        float x = ((float)(int32_t)rng_u32(&r) / 2147483648.0f) * 300.0f * scale;
        if (i % 4 == 0)   /* exact halves */
            x = ((float)((int32_t)(rng_u32(&r) % 600) - 300) + 0.5f) * scale;
        const float rcp = 1.0f / scale;
        float q = rintf(x * rcp) + (float)zp;
        int want = q < 0 ? 0 : q > 255 ? 255 : (int)q;
        int got = nf_f32_to_u8_asym(x, rcp, zp);
        if (got != want)
            tally_bad(&t, "u8(%a / %a + %d) = %d, want %d", (double)x, (double)scale, zp, got,
                      want);
    }
    ck_assert_tally(t);
}
END_TEST

/* ======================================================================== */
/* array converters against the scalar ones                                 */
/* ======================================================================== */

/* The converters in one table, so each array test covers all of them. */
typedef struct {
    const char *name;
    unsigned esize;
    void (*arr_enc)(const float *, void *, size_t, float);
    uint32_t (*sc_enc)(float, float);
    void (*arr_dec)(const void *, float *, size_t, float);
    float (*sc_dec)(uint32_t, float);
} conv;

#define CONV_FLOAT(tag, T, encfn, decfn)                                                  \
    static void ae_##tag(const float *s, void *d, size_t n, float k) { (void)k; encfn##_array(s, d, n); } \
    static uint32_t se_##tag(float x, float k) { (void)k; return encfn(x); }                \
    static void ad_##tag(const void *s, float *d, size_t n, float k) { (void)k; decfn##_array(s, d, n); } \
    static float sd_##tag(uint32_t c, float k) { (void)k; return decfn((T)c); }

CONV_FLOAT(f16, uint16_t, nf_f32_to_f16, nf_f16_to_f32)
CONV_FLOAT(bf16, uint16_t, nf_f32_to_bf16, nf_bf16_to_f32)
CONV_FLOAT(e4m3, uint8_t, nf_f32_to_e4m3, nf_e4m3_to_f32)
CONV_FLOAT(e5m2, uint8_t, nf_f32_to_e5m2, nf_e5m2_to_f32)
CONV_FLOAT(e5m2s, uint8_t, nf_f32_to_e5m2_sat, nf_e5m2_to_f32)

static void ae_i8(const float *s, void *d, size_t n, float k) { nf_f32_to_i8_array(s, d, n, k); }
static uint32_t se_i8(float x, float k) { return (uint8_t)nf_f32_to_i8(x, k); }
static void ad_i8(const void *s, float *d, size_t n, float k) { nf_i8_to_f32_array(s, d, n, k); }
static float sd_i8(uint32_t c, float k) { return nf_i8_to_f32((int8_t)(uint8_t)c, k); }

/* UINT8 asymmetric with a fixed zero point; the decoder is the definition
 * (numfmt has none: these codes live only inside the W8A8 GEMM). */
#define U8_ZP 77
static void ae_u8(const float *s, void *d, size_t n, float k) { nf_f32_to_u8_asym_array(s, d, n, k, U8_ZP); }
static uint32_t se_u8(float x, float k) { return nf_f32_to_u8_asym(x, k, U8_ZP); }
static float sd_u8(uint32_t c, float k) { return ((float)(int)c - U8_ZP) * k; }
static void ad_u8(const void *s, float *d, size_t n, float k)
{
    for (size_t i = 0; i < n; i++)
        d[i] = sd_u8(((const uint8_t *)s)[i], k);
}

static const conv CONVS[] = {
    { "f16", 2, ae_f16, se_f16, ad_f16, sd_f16 },
    { "bf16", 2, ae_bf16, se_bf16, ad_bf16, sd_bf16 },
    { "e4m3", 1, ae_e4m3, se_e4m3, ad_e4m3, sd_e4m3 },
    { "e5m2", 1, ae_e5m2, se_e5m2, ad_e5m2, sd_e5m2 },
    { "e5m2_sat", 1, ae_e5m2s, se_e5m2s, ad_e5m2s, sd_e5m2s },
    { "i8", 1, ae_i8, se_i8, ad_i8, sd_i8 },
    { "u8_asym", 1, ae_u8, se_u8, ad_u8, sd_u8 },
};
#define NCONV (sizeof CONVS / sizeof CONVS[0])

/* The integer formats take a scale; the float ones ignore it. */
static int scaled(const conv *cv)
{
    return cv->sc_enc == se_i8 || cv->sc_enc == se_u8;
}

static uint32_t load_code(const unsigned char *p, unsigned esize)
{
    uint32_t v = 0;
    memcpy(&v, p, esize);   /* host order: the converters write host order */
    return v;
}

/* Every length 0..67 (the vector bodies' tails included), from a source
 * pointer off by one element (unaligned), into a buffer with guard bytes on
 * both sides: the array encoder must give the scalar encoder's bits and
 * write nothing outside dst[0..n). */
START_TEST(array_encoders_match_scalar_for_lengths_0_to_67)
{
    rng r = { 12345 };
    tally t = { 0 };
    float src[1 + 67];
    unsigned char buf[16 + 67 * 2 + 16];

    for (size_t c = 0; c < NCONV; c++) {
        const conv *cv = &CONVS[c];
        for (size_t n = 0; n <= 67; n++) {
            for (int rep = 0; rep < 8; rep++) {
                for (size_t i = 0; i < n + 1; i++)
                    src[i] = rng_input(&r);
                if (scaled(cv))   /* integer codes: plausible values too */
                    for (size_t i = 0; i < n + 1; i += 2)
                        src[i] = (float)(int32_t)rng_u32(&r) / (float)(1 << 23);
                float scale = scaled(cv) ? 0.5f + (float)rep : 1.0f;
                memset(buf, 0xa5, sizeof buf);
                cv->arr_enc(src + 1, buf + 16, n, scale);
                for (size_t i = 0; i < n; i++) {
                    uint32_t got = load_code(buf + 16 + i * cv->esize, cv->esize);
                    uint32_t want = cv->sc_enc(src[1 + i], scale);
                    if (got != want)
                        tally_bad(&t, "%s n=%zu [%zu] %a(0x%08x): array 0x%x, scalar 0x%x",
                                  cv->name, n, i, (double)src[1 + i], nf_bits(src[1 + i]),
                                  got, want);
                }
                for (size_t i = 0; i < sizeof buf; i++)
                    if ((i < 16 || i >= 16 + n * cv->esize) && buf[i] != 0xa5)
                        tally_bad(&t, "%s n=%zu wrote outside dst at %zd", cv->name, n,
                                  (ssize_t)i - 16);
            }
        }
    }
    ck_assert_tally(t);
}
END_TEST

/* The same for the decoders: random codes, every length 0..67, unaligned
 * source, guarded destination; bits compared exactly (NaN payloads too). */
START_TEST(array_decoders_match_scalar_for_lengths_0_to_67)
{
    rng r = { 67890 };
    tally t = { 0 };
    unsigned char src[2 + 67 * 2];
    float buf[4 + 67 + 4];

    for (size_t c = 0; c < NCONV; c++) {
        const conv *cv = &CONVS[c];
        for (size_t n = 0; n <= 67; n++) {
            for (int rep = 0; rep < 8; rep++) {
                for (size_t i = 0; i < sizeof src; i++)
                    src[i] = (unsigned char)rng_u32(&r);
                float scale = scaled(cv) ? 0.25f * (float)(rep + 1) : 1.0f;
                for (size_t i = 0; i < sizeof buf / sizeof buf[0]; i++)
                    buf[i] = nf_float(0xdeadbeefu);
                cv->arr_dec(src + cv->esize, buf + 4, n, scale);
                for (size_t i = 0; i < n; i++) {
                    uint32_t code = load_code(src + cv->esize * (1 + i), cv->esize);
                    float want = cv->sc_dec(code, scale);
                    if (nf_bits(buf[4 + i]) != nf_bits(want))
                        tally_bad(&t, "%s n=%zu code 0x%x: array 0x%08x, scalar 0x%08x",
                                  cv->name, n, code, nf_bits(buf[4 + i]), nf_bits(want));
                }
                for (size_t i = 0; i < sizeof buf / sizeof buf[0]; i++)
                    if ((i < 4 || i >= 4 + n) && nf_bits(buf[i]) != 0xdeadbeefu)
                        tally_bad(&t, "%s n=%zu wrote outside dst", cv->name, n);
            }
        }
    }
    ck_assert_tally(t);
}
END_TEST

/* Every code of every format through the array decoder in one call. */
START_TEST(array_decoders_match_scalar_on_every_pattern)
{
    tally t = { 0 };
    uint16_t *codes = malloc(65536 * sizeof *codes);
    float *out = malloc(65536 * sizeof *out);
    ck_assert_ptr_nonnull(codes);
    ck_assert_ptr_nonnull(out);

    for (size_t c = 0; c < NCONV; c++) {
        const conv *cv = &CONVS[c];
        size_t n = cv->esize == 2 ? 65536 : 256;
        for (size_t i = 0; i < n; i++) {
            if (cv->esize == 2)
                codes[i] = (uint16_t)i;
            else
                ((unsigned char *)codes)[i] = (unsigned char)i;
        }
        cv->arr_dec(codes, out, n, 1.0f);
        for (size_t i = 0; i < n; i++) {
            float want = cv->sc_dec((uint32_t)i, 1.0f);
            if (nf_bits(out[i]) != nf_bits(want))
                tally_bad(&t, "%s 0x%zx: array 0x%08x, scalar 0x%08x", cv->name, i,
                          nf_bits(out[i]), nf_bits(want));
        }
    }
    free(codes);
    free(out);
    ck_assert_tally(t);
}
END_TEST

/* A million seeded random inputs through every array encoder at once. */
START_TEST(array_encoders_match_scalar_on_random_inputs)
{
    enum { N = 1 << 20 };
    rng r = { 424242 };
    tally t = { 0 };
    float *src = malloc(N * sizeof *src);
    unsigned char *dst = malloc(N * 2);
    ck_assert_ptr_nonnull(src);
    ck_assert_ptr_nonnull(dst);
    for (size_t i = 0; i < N; i++)
        src[i] = rng_input(&r);

    for (size_t c = 0; c < NCONV; c++) {
        const conv *cv = &CONVS[c];
        float scale = scaled(cv) ? 1e-3f : 1.0f;
        cv->arr_enc(src, dst, N, scale);
        for (size_t i = 0; i < N; i++) {
            uint32_t got = load_code(dst + i * cv->esize, cv->esize);
            uint32_t want = cv->sc_enc(src[i], scale);
            if (got != want)
                tally_bad(&t, "%s %a(0x%08x): array 0x%x, scalar 0x%x", cv->name,
                          (double)src[i], nf_bits(src[i]), got, want);
        }
    }
    free(src);
    free(dst);
    ck_assert_tally(t);
}
END_TEST

/* ======================================================================== */
/* traits table                                                             */
/* ======================================================================== */

/* Scalar encode/decode by format number, for checking the traits table. */
static uint32_t scalar_enc(nf_format f, float x, float scale)
{
    float v = scale == 1.0f ? x : x / scale;   /* scale 1: no division at all */
    switch (f) {
    case NF_F32:  return nf_bits(v);
    case NF_F16:  return nf_f32_to_f16(v);
    case NF_BF16: return nf_f32_to_bf16(v);
    case NF_E4M3: return nf_f32_to_e4m3(v);
    case NF_E5M2: return nf_f32_to_e5m2(v);
    case NF_I8:   return (uint8_t)nf_f32_to_i8(x, scale);
    }
    return 0;
}

static float scalar_dec(nf_format f, uint32_t c, float scale)
{
    switch (f) {
    case NF_F32:  return nf_float(c) * scale;
    case NF_F16:  return nf_f16_to_f32((uint16_t)c) * scale;
    case NF_BF16: return nf_bf16_to_f32((uint16_t)c) * scale;
    case NF_E4M3: return nf_e4m3_to_f32((uint8_t)c) * scale;
    case NF_E5M2: return nf_e5m2_to_f32((uint8_t)c) * scale;
    case NF_I8:   return nf_i8_to_f32((int8_t)(uint8_t)c, scale);
    }
    return 0;
}

/* Names are distinct; bits, max_finite, has_inf and has_nan agree with
 * what decoding every code of the format actually gives; the lookup is
 * bounds-checked. */
START_TEST(traits_table_matches_the_formats)
{
    static const nf_format all[] = { NF_F32, NF_F16, NF_BF16, NF_E4M3, NF_E5M2, NF_I8 };
    ck_assert_int_eq(sizeof all / sizeof all[0], NF_FORMAT_COUNT);

    for (size_t i = 0; i < NF_FORMAT_COUNT; i++) {
        const nf_traits *tr = nf_traits_of(all[i]);
        ck_assert_ptr_eq(tr, &nf_traits_table[all[i]]);
        ck_assert_ptr_nonnull(tr->name);
        ck_assert_ptr_nonnull(tr->to_f32);
        ck_assert_ptr_nonnull(tr->from_f32);
        for (size_t j = 0; j < i; j++)
            ck_assert_str_ne(tr->name, nf_traits_table[all[j]].name);

        if (all[i] == NF_F32) {
            ck_assert_uint_eq(tr->bits, 32);
            ck_assert_float_eq(tr->max_finite, FLT_MAX);
            ck_assert(tr->has_inf && tr->has_nan);
            continue;
        }
        ck_assert(tr->bits == 8 || tr->bits == 16);
        float max = -INFINITY;
        bool inf = false, nan = false;
        for (uint32_t c = 0; c < (1u << tr->bits); c++) {
            float v = scalar_dec(all[i], c, 1.0f);
            if (isnan(v))
                nan = true;
            else if (isinf(v))
                inf = true;
            else if (v > max)
                max = v;
        }
        ck_assert_msg(nf_bits(max) == nf_bits(tr->max_finite), "%s max %a vs %a", tr->name,
                      (double)max, (double)tr->max_finite);
        ck_assert_int_eq(inf, tr->has_inf);
        ck_assert_int_eq(nan, tr->has_nan);
        /* the largest finite encodes to a code that decodes to itself */
        ck_assert_float_eq(scalar_dec(all[i], scalar_enc(all[i], tr->max_finite, 1), 1),
                           tr->max_finite);
    }
    ck_assert_ptr_null(nf_traits_of((nf_format)NF_FORMAT_COUNT));
    ck_assert_ptr_null(nf_traits_of((nf_format)-1));
}
END_TEST

/* The table's converters are the scalar ones applied to x / scale (encode)
 * and times scale (decode), with scale 1 a plain conversion; 1000 elements
 * cross the internal 256-element chunking. */
START_TEST(traits_converters_match_scalar_with_and_without_scale)
{
    enum { N = 1000 };
    static const float scales[] = { 1.0f, 0.375f, 3.0f, 1e-3f };
    rng r = { 777 };
    tally t = { 0 };
    float src[N], out[N];
    unsigned char codes[N * 4];

    for (size_t i = 0; i < N; i++)
        src[i] = i % 3 ? rng_input(&r) : (float)(int32_t)rng_u32(&r) / (float)(1 << 24);

    for (int f = 0; f < NF_FORMAT_COUNT; f++) {
        const nf_traits *tr = &nf_traits_table[f];
        unsigned esize = tr->bits / 8;
        for (size_t k = 0; k < sizeof scales / sizeof scales[0]; k++) {
            float scale = scales[k];
            tr->from_f32(src, codes, N, scale);
            for (size_t i = 0; i < N; i++) {
                uint32_t got = load_code(codes + i * esize, esize);
                uint32_t want = scalar_enc((nf_format)f, src[i], scale);
                /* FP32 NaN payloads: compilers may fold the reference's
                 * "scale == 1 ? x : x / scale" into a division that quiets
                 * a signalling NaN; exactness is checked below instead. */
                bool both_nan = f == NF_F32 && isnan(nf_float(got)) && isnan(nf_float(want));
                if (got != want && !both_nan)
                    tally_bad(&t, "%s enc(%a, %g) 0x%x want 0x%x", tr->name, (double)src[i],
                              (double)scale, got, want);
            }
            tr->to_f32(codes, out, N, scale);
            for (size_t i = 0; i < N; i++) {
                float want = scalar_dec((nf_format)f, load_code(codes + i * esize, esize), scale);
                if (nf_bits(out[i]) != nf_bits(want) && !(isnan(out[i]) && isnan(want)))
                    tally_bad(&t, "%s dec(scale %g) [%zu] 0x%08x want 0x%08x", tr->name,
                              (double)scale, i, nf_bits(out[i]), nf_bits(want));
            }
        }
        /* scale 1 is bit-exact for FP32, NaN payloads included */
        if (f == NF_F32) {
            tr->from_f32(src, codes, N, 1.0f);
            ck_assert_int_eq(memcmp(codes, src, sizeof src), 0);
        }
    }
    ck_assert_tally(t);
}
END_TEST

/* The checked entry points refuse what a file or config could hand them. */
START_TEST(nf_encode_and_decode_reject_bad_format_scale_and_buffers)
{
    float x[4] = { 1, 2, 3, 4 }, y[4];
    uint8_t q[4];
    mt_err err = { { 0 } };

    ck_assert_int_eq(nf_encode(NF_I8, x, q, 4, 0.5f, &err), MT_OK);
    ck_assert_int_eq(q[3], 8);
    ck_assert_int_eq(nf_decode(NF_I8, q, y, 4, 0.5f, &err), MT_OK);
    ck_assert_float_eq(y[3], 4.0f);

    ck_assert_int_eq(nf_encode((nf_format)99, x, q, 4, 1, &err), MT_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "unknown number format"));
    ck_assert_int_eq(nf_decode((nf_format)-1, q, y, 4, 1, &err), MT_EINVAL);
    static const float bad_scales[] = { 0.0f, -0.0f, -1.0f, NAN, INFINITY, -INFINITY };
    for (size_t i = 0; i < sizeof bad_scales / sizeof bad_scales[0]; i++) {
        err.msg[0] = '\0';
        ck_assert_int_eq(nf_encode(NF_E4M3, x, q, 4, bad_scales[i], &err), MT_EINVAL);
        ck_assert_ptr_nonnull(strstr(err.msg, "scale"));
        ck_assert_int_eq(nf_decode(NF_E4M3, q, y, 4, bad_scales[i], NULL), MT_EINVAL);
    }
    ck_assert_int_eq(nf_encode(NF_F16, NULL, q, 4, 1, &err), MT_EINVAL);
    ck_assert_int_eq(nf_decode(NF_F16, q, NULL, 4, 1, &err), MT_EINVAL);
    ck_assert_int_eq(nf_encode(NF_F16, NULL, NULL, 0, 1, &err), MT_OK);
    ck_assert_int_eq(nf_decode(NF_F16, NULL, NULL, 0, 1, &err), MT_OK);
}
END_TEST

/* ======================================================================== */
/* runner                                                                   */
/* ======================================================================== */

static Suite *numfmt_suite(void)
{
    Suite *s = suite_create("numfmt");
    TCase *ref = tcase_create("reference");
    tcase_set_timeout(ref, 60);
    tcase_add_test(ref, f16_every_pattern_decodes_like_ml_dtypes);
    tcase_add_test(ref, bf16_every_pattern_decodes_like_ml_dtypes);
    tcase_add_test(ref, e4m3_every_pattern_decodes_like_ml_dtypes);
    tcase_add_test(ref, e5m2_every_pattern_decodes_like_ml_dtypes);
    tcase_add_test(ref, f16_every_non_nan_pattern_round_trips);
    tcase_add_test(ref, bf16_every_non_nan_pattern_round_trips);
    tcase_add_test(ref, e4m3_every_non_nan_pattern_round_trips);
    tcase_add_test(ref, e5m2_every_non_nan_pattern_round_trips);
    tcase_add_test(ref, e5m2_sat_every_finite_pattern_round_trips);
    tcase_add_test(ref, f16_encodes_every_rounding_boundary_like_ml_dtypes);
    tcase_add_test(ref, bf16_encodes_every_rounding_boundary_like_ml_dtypes);
    tcase_add_test(ref, e4m3_encodes_every_rounding_boundary_like_ml_dtypes);
    tcase_add_test(ref, e5m2_encodes_every_rounding_boundary_like_ml_dtypes);
    suite_add_tcase(s, ref);

    TCase *edge = tcase_create("edges");
    tcase_add_test(edge, e4m3_saturates_out_of_range_and_inf_to_448);
    tcase_add_test(edge, e4m3_nan_encodes_to_s1111111);
    tcase_add_test(edge, e5m2_overflows_to_inf_and_sat_variant_clamps_to_57344);
    tcase_add_test(edge, f16_overflow_and_subnormal_ties_round_to_even);
    tcase_add_test(edge, nan_stays_quiet_nan_and_never_rounds_into_inf);
    tcase_add_test(edge, i8_rounds_half_to_even);
    tcase_add_test(edge, i8_clamps_at_plus_minus_127);
    tcase_add_test(edge, i8_matches_rintf_and_is_symmetric_on_random_inputs);
    tcase_add_test(edge, u8_asym_rounds_half_to_even_clamps_and_maps_nan_to_the_zero_point);
    tcase_add_test(edge, u8_asym_matches_rintf_on_random_inputs);
    suite_add_tcase(s, edge);

    TCase *arr = tcase_create("arrays");
    tcase_set_timeout(arr, 60);
    tcase_add_test(arr, array_encoders_match_scalar_for_lengths_0_to_67);
    tcase_add_test(arr, array_decoders_match_scalar_for_lengths_0_to_67);
    tcase_add_test(arr, array_decoders_match_scalar_on_every_pattern);
    tcase_add_test(arr, array_encoders_match_scalar_on_random_inputs);
    suite_add_tcase(s, arr);

    TCase *tr = tcase_create("traits");
    tcase_add_test(tr, traits_table_matches_the_formats);
    tcase_add_test(tr, traits_converters_match_scalar_with_and_without_scale);
    tcase_add_test(tr, nf_encode_and_decode_reject_bad_format_scale_and_buffers);
    suite_add_tcase(s, tr);
    return s;
}

static Suite *test_suite(void)
{
    printf("numfmt array path: %s\n", nf_simd_path());
    return numfmt_suite();
}

#include "tests/unit/check_main.h"
