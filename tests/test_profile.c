/*
 * test_profile.c — the per-op profiler on every backend: enabled, a known
 * sequence of ops gives exact call counts and bytes per op name (an op built
 * from other ops counts once); disabled, nothing is added; the table and the
 * JSON summary are well formed; reset forgets; bad arguments are refused.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "check.h"

static const gpucore_profile_entry *find(const gpucore_profile_entry *e, int n, const char *name)
{
    for (int i = 0; i < n; i++)
        if (!strcmp(e[i].name, name)) return &e[i];
    return NULL;
}

/* A minimal JSON syntax check: balanced braces/brackets outside strings, valid escapes. */
static int json_balanced(const char *s)
{
    int depth = 0, in_str = 0;
    for (; *s; s++) {
        if (in_str) {
            if (*s == '\\') { if (!s[1]) return 0; s++; }
            else if (*s == '"') in_str = 0;
            continue;
        }
        if (*s == '"') in_str = 1;
        else if (*s == '{' || *s == '[') depth++;
        else if (*s == '}' || *s == ']') { if (--depth < 0) return 0; }
    }
    return depth == 0 && !in_str;
}

static void run_on(const char *dev)
{
    printf("== %s\n", dev);
    gpucore_context *ctx = NULL;
    CHECK_OK(gpucore_context_create(dev, &ctx));
    if (!ctx) return;
    int64_t v[1] = {1000}, m[2] = {32, 64}, w[2] = {16, 64}, y[2] = {32, 16}, col[1] = {16};
    gpucore_tensor *a = NULL, *b = NULL, *c = NULL, *x = NULL, *wt = NULL, *yt = NULL, *dy = NULL, *dx = NULL,
                   *dw = NULL, *db = NULL, *r = NULL;
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 1, v, &a));
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 1, v, &b));
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 1, v, &c));
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 2, m, &x));
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 2, w, &wt));
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 2, y, &yt));
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 2, y, &dy));
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 2, m, &dx));
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 2, w, &dw));
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 1, col, &db));
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 1, col, &r));

    /* disabled (the default): ops add nothing */
    CHECK(gpucore_profiler_enabled(ctx) == 0);
    CHECK_OK(gpucore_random(a, GPUCORE_NORMAL, 0, 1, 1, 0, NULL));
    CHECK_OK(gpucore_random(b, GPUCORE_NORMAL, 0, 1, 2, 0, NULL));
    CHECK_OK(gpucore_random(x, GPUCORE_NORMAL, 0, 1, 3, 0, NULL));
    CHECK_OK(gpucore_random(wt, GPUCORE_NORMAL, 0, 1, 4, 0, NULL));
    CHECK_OK(gpucore_random(dy, GPUCORE_NORMAL, 0, 1, 5, 0, NULL));
    int n = -1;
    CHECK_OK(gpucore_profiler_entries(ctx, NULL, 0, &n));
    CHECK(n == 0);

    /* enabled: a known sequence */
    CHECK_OK(gpucore_profiler_enable(ctx, 1));
    CHECK(gpucore_profiler_enabled(ctx) == 1);
    for (int i = 0; i < 3; i++) CHECK_OK(gpucore_binary(GPUCORE_ADD, c, a, b, NULL)); /* 3 x 12000 bytes */
    CHECK_OK(gpucore_binary(GPUCORE_MUL, c, c, b, NULL));                              /* 12000 */
    CHECK_OK(gpucore_linear_forward(x, wt, NULL, GPUCORE_ACT_NONE, yt, NULL, NULL));   /* (2048+1024+512)*4 */
    CHECK_OK(gpucore_linear_backward(dy, x, wt, NULL, dx, dw, db, NULL));              /* one call, two GEMMs */
    CHECK_OK(gpucore_reduce(GPUCORE_REDUCTION_SUM, r, yt, 0, NULL));                   /* (512+16)*4 */
    gpucore_stream *s2 = NULL;
    CHECK_OK(gpucore_stream_create(ctx, 0, &s2));
    CHECK_OK(gpucore_context_synchronize(ctx)); /* c is still being written on the default stream */
    CHECK_OK(gpucore_fill(c, 1.0, s2)); /* on another stream: counted too */
    CHECK_OK(gpucore_stream_synchronize(s2));
    /* a failing op (shape mismatch) is not counted */
    CHECK(gpucore_binary(GPUCORE_ADD, c, a, yt, NULL) != GPUCORE_OK);
    gpucore_clear_error();

    gpucore_profile_entry e[32];
    for (int i = 0; i < 32; i++) e[i].struct_size = sizeof e[i];
    CHECK_OK(gpucore_profiler_entries(ctx, e, 32, &n));
    CHECK(n == 6);
    const gpucore_profile_entry *add = find(e, n, "add"), *mul = find(e, n, "mul"), *lf = find(e, n, "linear_forward"),
                                *lb = find(e, n, "linear_backward"), *red = find(e, n, "reduce"),
                                *fill = find(e, n, "fill");
    CHECK(add && add->calls == 3 && add->bytes == 3 * 12000 && add->timed_calls == 3);
    CHECK(mul && mul->calls == 1 && mul->bytes == 12000);
    CHECK(lf && lf->calls == 1 && lf->bytes == (2048 + 1024 + 512) * 4);
    CHECK(lb && lb->calls == 1 && lb->bytes == (512 + 2048 + 1024 + 2048 + 1024) * 4);
    CHECK(fill && fill->calls == 1 && fill->bytes == 4000);
    if (!red) {
        for (int i = 0; i < n; i++) fprintf(stderr, "  entry %s calls %lld\n", e[i].name, (long long)e[i].calls);
    }
    CHECK(red && red->calls == 1 && red->bytes == (512 + 16) * 4);
    CHECK(find(e, n, "matmul") == NULL); /* the linear calls' GEMMs are not counted twice */
    for (int i = 0; i < n; i++) {
        CHECK(e[i].total_ms >= 0 && e[i].min_ms <= e[i].max_ms && e[i].timed_calls == e[i].calls);
        if (i) CHECK(e[i - 1].total_ms >= e[i].total_ms); /* sorted by time */
    }

    /* text and JSON summaries */
    int64_t need = 0;
    CHECK_OK(gpucore_profiler_summary(ctx, 0, NULL, 0, &need));
    CHECK(need > 100);
    char *buf = malloc((size_t)need);
    CHECK_OK(gpucore_profiler_summary(ctx, 0, buf, need, NULL));
    CHECK(strstr(buf, "linear_backward") && strstr(buf, "calls") && strstr(buf, "total"));
    printf("%s", buf);
    free(buf);
    CHECK_OK(gpucore_profiler_summary(ctx, 1, NULL, 0, &need));
    buf = malloc((size_t)need);
    CHECK_OK(gpucore_profiler_summary(ctx, 1, buf, need, NULL));
    CHECK(json_balanced(buf) && buf[0] == '{' && strstr(buf, "\"ops\":[") && strstr(buf, "\"name\":\"add\",\"calls\":3,"));
    printf("%s", buf);
    char small[16];
    CHECK_STATUS(gpucore_profiler_summary(ctx, 1, small, sizeof small, NULL), GPUCORE_ERR_INVALID_ARGUMENT);
    CHECK(strlen(small) == sizeof small - 1 && !memcmp(small, buf, sizeof small - 1));
    free(buf);

    /* disabled again: counts freeze */
    CHECK_OK(gpucore_profiler_enable(ctx, 0));
    CHECK_OK(gpucore_binary(GPUCORE_ADD, c, a, b, NULL));
    CHECK_OK(gpucore_profiler_entries(ctx, e, 32, &n));
    add = find(e, n, "add");
    CHECK(add && add->calls == 3);

    /* reset forgets */
    CHECK_OK(gpucore_profiler_reset(ctx));
    CHECK_OK(gpucore_profiler_entries(ctx, e, 32, &n));
    CHECK(n == 0);

    /* many ops without asking: the pending records are bounded and resolved on the way */
    CHECK_OK(gpucore_profiler_enable(ctx, 1));
    for (int i = 0; i < 10000; i++) gpucore_scale(c, a, 2.0, 0.0, NULL);
    CHECK_OK(gpucore_profiler_entries(ctx, e, 32, &n));
    CHECK(n == 1 && e[0].calls == 10000 && !strcmp(e[0].name, "scale") && e[0].timed_calls == 10000);

    /* bad arguments */
    CHECK_STATUS(gpucore_profiler_enable(NULL, 1), GPUCORE_ERR_NULL_POINTER);
    CHECK_STATUS(gpucore_profiler_enable(ctx, 2), GPUCORE_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(gpucore_profiler_summary(ctx, 3, NULL, 0, NULL), GPUCORE_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(gpucore_profiler_entries(ctx, NULL, 4, &n), GPUCORE_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(gpucore_profiler_entries(ctx, e, 4, NULL), GPUCORE_ERR_NULL_POINTER);
    CHECK(gpucore_profiler_enabled(NULL) == -1);

    gpucore_tensor *all[] = {a, b, c, x, wt, yt, dy, dx, dw, db, r};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) gpucore_tensor_destroy(all[i]);
    CHECK_OK(gpucore_stream_destroy(s2));
    CHECK_OK(gpucore_context_destroy(ctx)); /* with the profiler still on: frees its events */
}

int main(void)
{
    const char *devs[4];
    int n = test_devices(devs, 4);
    for (int i = 0; i < n; i++) {
        if (!strcmp(devs[i], "cuda-emulated")) continue; /* no matmul entry there; the front-end is shared */
        run_on(devs[i]);
    }
    return check_finish("test_profile");
}
