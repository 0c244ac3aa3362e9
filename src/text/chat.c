/*
 * chat.c — gpucore_chat_render: a conversation as a model's chat template renders it, for the
 * template families recognised from the template's text (ChatML, Llama-3, Mistral [INST], Zephyr),
 * written out in C; any other template is refused with its first line.
 */
#include <stdlib.h>
#include <string.h>
#include "text_internal.h"

typedef enum family { F_CHATML, F_LLAMA3, F_MISTRAL, F_ZEPHYR, F_UNKNOWN } family;

static family recognise(const char *tpl)
{
    if (strstr(tpl, "<|im_start|>") && strstr(tpl, "<|im_end|>") && strstr(tpl, "message['role']")) return F_CHATML;
    if (strstr(tpl, "<|start_header_id|>") && strstr(tpl, "<|eot_id|>") && !strstr(tpl, "tools") &&
        !strstr(tpl, "Cutting Knowledge"))
        return F_LLAMA3;
    if (strstr(tpl, "[INST]") && strstr(tpl, "[/INST]") && !strstr(tpl, "system") && !strstr(tpl, "tools"))
        return F_MISTRAL;
    if (strstr(tpl, "<|user|>") && strstr(tpl, "<|assistant|>") && strstr(tpl, "<|system|>") && strstr(tpl, "eos_token"))
        return F_ZEPHYR;
    return F_UNKNOWN;
}

/* ChatML templates that put a system message first when the conversation has none hold it as
 * '<|im_start|>system\n...<|im_end|>' literal text; NULL when the template has none. */
static const char *default_system(const char *tpl, size_t *len)
{
    static const char head[] = "<|im_start|>system\n";
    for (const char *p = strstr(tpl, head); p; p = strstr(p + 1, head)) {
        const char *body = p + sizeof head - 1, *e = strstr(body, "<|im_end|>");
        if (!e || body[0] == '\'') continue; /* '<|im_start|>system\n' + message['content'] */
        size_t n = (size_t)(e - body);
        if (memchr(body, '\'', n) || memchr(body, '{', n)) continue;
        *len = n;
        return body;
    }
    return NULL;
}

typedef struct sink { char *out; int64_t cap, len; } sink;

static void put(sink *s, const char *text, size_t n)
{
    for (size_t i = 0; i < n; i++, s->len++)
        if (s->len < s->cap) s->out[s->len] = text[i];
}
static void puts_(sink *s, const char *text) { put(s, text, strlen(text)); }

/* Jinja's trim: white space off both ends. */
static void put_trimmed(sink *s, const char *text)
{
    const char *b = text, *e = text + strlen(text);
    while (b < e && (*b == ' ' || *b == '\t' || *b == '\n' || *b == '\r' || *b == '\f' || *b == '\v')) b++;
    while (e > b && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\n' || e[-1] == '\r' || e[-1] == '\f' || e[-1] == '\v')) e--;
    put(s, b, (size_t)(e - b));
}

gpucore_status gpucore_chat_render(const char *tpl, const char *bos, const char *eos, const gpucore_chat_message *m,
                                   int64_t n, int add_generation_prompt, char *out, int64_t cap, int64_t *len)
{
    static const char op[] = "gpucore_chat_render";
    if (!tpl || !len || (n > 0 && !m) || (cap > 0 && !out))
        return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "%s: chat_template, len, messages (when n_messages > 0) "
                                 "and out (when cap > 0) must not be NULL", op);
    if (n < 0 || cap < 0)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: n_messages %lld and cap %lld must not be negative",
                                 op, (long long)n, (long long)cap);
    *len = 0;
    for (int64_t i = 0; i < n; i++)
        if (!m[i].role || !m[i].content)
            return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "%s: messages[%lld] has a NULL role or content", op,
                                     (long long)i);
    family f = recognise(tpl);
    if (f == F_UNKNOWN) {
        size_t line = strcspn(tpl, "\n");
        return gpucore_set_error(GPUCORE_ERR_NOT_SUPPORTED, "%s: the chat template is not one of the families "
                                 "rendered here (ChatML, Llama-3, Mistral [INST], Zephyr); it begins: %.*s", op,
                                 (int)(line > 200 ? 200 : line), tpl);
    }
    if ((f == F_LLAMA3 || f == F_MISTRAL) && !bos)
        return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "%s: this template starts with bos_token: bos_token must "
                                 "not be NULL", op);
    if ((f == F_MISTRAL || f == F_ZEPHYR) && !eos)
        return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "%s: this template ends turns with eos_token: eos_token "
                                 "must not be NULL", op);
    sink s = {out, cap, 0};
    switch (f) {
    case F_CHATML: {
        size_t dn = 0;
        const char *dsys = default_system(tpl, &dn);
        if (dsys && n > 0 && strcmp(m[0].role, "system")) {
            puts_(&s, "<|im_start|>system\n");
            put(&s, dsys, dn);
            puts_(&s, "<|im_end|>\n");
        }
        for (int64_t i = 0; i < n; i++) {
            puts_(&s, "<|im_start|>"); puts_(&s, m[i].role); puts_(&s, "\n");
            puts_(&s, m[i].content); puts_(&s, "<|im_end|>\n");
        }
        if (add_generation_prompt) puts_(&s, "<|im_start|>assistant\n");
        break;
    }
    case F_LLAMA3:
        for (int64_t i = 0; i < n; i++) {
            if (i == 0) puts_(&s, bos);
            puts_(&s, "<|start_header_id|>"); puts_(&s, m[i].role); puts_(&s, "<|end_header_id|>\n\n");
            put_trimmed(&s, m[i].content); puts_(&s, "<|eot_id|>");
        }
        if (add_generation_prompt) puts_(&s, "<|start_header_id|>assistant<|end_header_id|>\n\n");
        break;
    case F_MISTRAL:
        puts_(&s, bos);
        for (int64_t i = 0; i < n; i++) {
            int user = !strcmp(m[i].role, "user");
            if (user != (i % 2 == 0) || (!user && strcmp(m[i].role, "assistant")))
                return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: messages[%lld] is '%s': this template takes "
                                         "user and assistant messages alternating, user first", op, (long long)i,
                                         m[i].role);
            if (user) { puts_(&s, "[INST] "); puts_(&s, m[i].content); puts_(&s, " [/INST]"); }
            else { puts_(&s, m[i].content); puts_(&s, eos); }
        }
        break;
    default: /* F_ZEPHYR */
        for (int64_t i = 0; i < n; i++) {
            const char *r = m[i].role;
            if (strcmp(r, "user") && strcmp(r, "system") && strcmp(r, "assistant")) continue; /* the template skips it */
            puts_(&s, "<|"); puts_(&s, r); puts_(&s, "|>\n"); puts_(&s, m[i].content); puts_(&s, eos); puts_(&s, "\n");
        }
        if (add_generation_prompt && n > 0) puts_(&s, "<|assistant|>\n");
        break;
    }
    if (s.len < cap) out[s.len] = 0;
    *len = s.len;
    return GPUCORE_OK;
}
