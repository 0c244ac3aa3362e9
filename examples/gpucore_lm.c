/*
 * gpucore_lm.c — gpucore-lm, the command-line front of the language-model layer:
 *
 *   gpucore-lm generate MODEL --ids 1,2,3[;4,5,6] [--max-new N] [--sample] [--temperature T]
 *   gpucore-lm generate MODEL --prompt TEXT [--chat] [options of --ids]
 *              [--top-k K] [--top-p P] [--seed S] [--eos ID] [--adapter DIR]
 *   gpucore-lm finetune MODEL --data FILE[,FILE...] | --text FILE [--lora R | --full] [--alpha A] [--dropout P]
 *              [--targets q_proj,v_proj] [--steps N] [--batch B] [--seq T] [--lr LR]
 *              [--weight-decay WD] [--clip C] [--seed S] [--checkpoint-policy none|all|sqrt|every:K|budget:BYTES]
 *              [--save DIR] [--save-every N] [--resume DIR] [--ddp | --zero 0|1|2] [--grad-accum K]
 *   gpucore-lm eval MODEL --data FILE[,FILE...] | --text FILE [--batch B] [--seq T] [--batches N] [--adapter DIR]
 *   gpucore-lm tokenize MODEL --text FILE --out FILE.bin
 *   gpucore-lm chat MODEL [--max-new N] [--eos ID] [--adapter DIR] [--sample and its options as generate's]
 *   gpucore-lm plan MODEL [--batch B] [--seq T] [--lora R | --full] [--targets a,b] [--dropout P]
 *              [--checkpoint-policy P] [--grad-accum K] [--quantize nf4|fp4|int8|q4_0|...] [--device-memory 24GiB]
 *   common: [--device cpu|cuda|cuda:N|auto] [--dtype f32|bf16|f16] [--quantize nf4|fp4|int8] [--json] [--quiet]
 *
 * --prompt encodes TEXT with the model's tokenizer (the folder's tokenizer.json, or a GGUF file's
 * metadata) and prints the generated text; --chat first renders TEXT as the user's message of the
 * model's chat template, with the assistant's turn open. tokenize encodes a UTF-8 text file
 * with the model's tokenizer (the ids its post-processor adds included) and writes the ids
 * as an llm.c token file (gpucore_token_data_write); eval --text and finetune --text do the
 * same into a temporary file and evaluate or train on that. chat reads the user's lines from
 * standard input and answers each through the chat template (greedily, or drawn as generate
 * draws with --sample), the conversation kept in the KV cache, the answer printed as it is
 * generated; end of input (Ctrl-D) ends it.
 * MODEL is a Hugging Face folder (gpt2, llama, mistral, qwen2) or a GGUF file (llama, qwen2,
 * gpt2; its quantized blocks kept). --quantize loads a folder's linear layers quantized
 * (bitsandbytes' NF4, FP4 or int8 rows; --dtype is then the compute dtype, bf16 by default):
 * finetune then trains LoRA adapters on the frozen quantized base (QLoRA). Token files are llm.c .bin
 * or .npy (the library's token data: windows of --seq + 1 tokens, a seeded permutation per
 * epoch, each rank its shard). finetune trains LoRA adapters (default, rank 8 on PEFT's
 * default modules) or every weight (--full) with AdamW on Hugging Face's causal-LM loss.
 * --save DIR writes DIR as a PEFT adapter folder (LoRA) or a Hugging Face model folder
 * (--full), plus trainer.safetensors (trainable tensors and optimizer state) and
 * trainer_state.txt (steps done, data position); --resume DIR continues from there with
 * the same losses, bit for bit, as the run that was not interrupted (LoRA dropout is seeded
 * per step). --ddp under mpirun averages the gradients over ranks (each rank reads its own
 * shard; --batch is per rank); --zero 1|2 shards the optimizer state (and gradients) with
 * the ZeRO trainer. --grad-accum K makes each step K micro-batches of --batch rows whose
 * gradients add up before the one update, each micro-batch's loss normalised by the label
 * tokens of all K (the update of one batch of K x B rows, in the memory of B rows; the
 * step's loss printed is that batch's). plan prints the memory a finetune step with the same
 * options would take (gpucore_lm_plan: from the folder's config.json, no weights read; --device
 * cuda counts the CUDA matmul's workspace), per category, and where the peak falls; with
 * --device-memory it lists the checkpoint policies and micro-batch / --grad-accum splits of
 * --batch that fit, cheapest first, or says that nothing fits (exit status 3). Each step prints its loss, tokens/s and time; --json prints one JSON
 * object per line instead. Exit status: 0 done, 1 a library call failed (the message is
 * printed), 2 bad usage.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>
#include "gpucore.h"
#include "train_common.h"

#define MAX_FILES 64
#define MAX_TARGETS 16

typedef struct lm_opts {
    const char *cmd, *model, *device, *dtype, *ids, *adapter, *targets, *policy, *save, *resume;
    const char *data[MAX_FILES];
    int ndata, sample, full, ddp, zero, json, quiet;
    int64_t max_new, top_k, steps, batch, seq, lora_r, save_every, eval_batches, eos, grad_accum;
    double temperature, top_p, lr, wd, clip, alpha, dropout;
    uint64_t seed;
    const char *prompt; /* generate: text to encode (instead of ids) */
    int chat;           /* generate --prompt: through the chat template */
    const char *text;   /* tokenize, eval: a UTF-8 text file */
    const char *out;    /* tokenize: the token file to write */
    const char *quantize;      /* the decoder's linears quantized ("nf4", ...; plan takes the GGUF block formats too) */
    const char *device_memory; /* plan: the memory to fit ("24GiB", "8000MB", bytes) */
} lm_opts;

static int rank0 = 1; /* only rank 0 prints progress */

#define CHECK_LM(call)                                                                                  \
    do {                                                                                                \
        gpucore_status st_ = (call);                                                                    \
        if (st_ != GPUCORE_OK) {                                                                        \
            fprintf(stderr, "gpucore-lm: %s failed: %s: %s\n", #call, gpucore_status_string(st_),       \
                    gpucore_last_error());                                                              \
            return 1;                                                                                   \
        }                                                                                               \
    } while (0)

static void usage(void)
{
    fprintf(stderr,
            "usage: gpucore-lm generate MODEL --ids 1,2,3[;4,5,6] [--max-new N] [--sample] [--temperature T]\n"
            "                  [--top-k K] [--top-p P] [--seed S] [--eos ID] [--adapter DIR]\n"
            "       gpucore-lm generate MODEL --prompt TEXT [--chat] [the options of --ids]\n"
            "       gpucore-lm finetune MODEL --data FILE[,FILE...] | --text FILE [--lora R | --full] [--alpha A]\n"
            "                  [--dropout P] [--targets a,b] [--steps N] [--batch B] [--seq T] [--lr LR]\n"
            "                  [--weight-decay WD] [--clip C] [--seed S] [--checkpoint-policy none|all|sqrt|every:K|budget:BYTES]\n"
            "                  [--save DIR] [--save-every N] [--resume DIR] [--ddp | --zero 0|1|2] [--grad-accum K]\n"
            "       gpucore-lm eval MODEL --data FILE[,FILE...] | --text FILE [--batch B] [--seq T] [--batches N]\n"
            "                  [--adapter DIR]\n"
            "       gpucore-lm tokenize MODEL --text FILE --out FILE.bin\n"
            "       gpucore-lm chat MODEL [--max-new N] [--eos ID] [--adapter DIR] [--sample] [--temperature T]\n"
            "                  [--top-k K] [--top-p P] [--seed S]\n"
            "       gpucore-lm plan MODEL [--batch B] [--seq T] [--lora R | --full] [--targets a,b] [--dropout P]\n"
            "                  [--checkpoint-policy P] [--grad-accum K] [--quantize nf4|fp4|int8] [--device-memory 24GiB]\n"
            "       common: [--device D] [--dtype f32|bf16|f16] [--quantize nf4|fp4|int8] [--json] [--quiet]\n");
}

static int parse_args(int argc, char **argv, lm_opts *o)
{
    memset(o, 0, sizeof *o);
    o->device = "auto";
    o->max_new = -1, o->temperature = 1.0, o->top_p = 1.0, o->eos = -2;
    o->steps = 20, o->batch = 4, o->seq = 64, o->lr = 1e-3, o->wd = 0.0;
    o->lora_r = 8, o->alpha = 16, o->policy = "none", o->zero = -1, o->grad_accum = 1;
    if (argc < 3) return 1;
    o->cmd = argv[1];
    o->model = argv[2];
    for (int i = 3; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
#define VAL() do { if (!v) { fprintf(stderr, "gpucore-lm: %s needs a value\n", a); return 1; } i++; } while (0)
        if (!strcmp(a, "--ids")) { VAL(); o->ids = v; }
        else if (!strcmp(a, "--prompt")) { VAL(); o->prompt = v; }
        else if (!strcmp(a, "--chat")) o->chat = 1;
        else if (!strcmp(a, "--text")) { VAL(); o->text = v; }
        else if (!strcmp(a, "--out")) { VAL(); o->out = v; }
        else if (!strcmp(a, "--max-new")) { VAL(); o->max_new = atoll(v); }
        else if (!strcmp(a, "--sample")) o->sample = 1;
        else if (!strcmp(a, "--temperature")) { VAL(); o->temperature = atof(v); }
        else if (!strcmp(a, "--top-k")) { VAL(); o->top_k = atoll(v); }
        else if (!strcmp(a, "--top-p")) { VAL(); o->top_p = atof(v); }
        else if (!strcmp(a, "--seed")) { VAL(); o->seed = strtoull(v, NULL, 10); }
        else if (!strcmp(a, "--eos")) { VAL(); o->eos = atoll(v); }
        else if (!strcmp(a, "--adapter")) { VAL(); o->adapter = v; }
        else if (!strcmp(a, "--data")) {
            VAL();
            char *copy = strdup(v), *save = NULL;
            for (char *t = strtok_r(copy, ",", &save); t && o->ndata < MAX_FILES; t = strtok_r(NULL, ",", &save))
                o->data[o->ndata++] = t; /* the copy lives until exit */
        }
        else if (!strcmp(a, "--lora")) { VAL(); o->lora_r = atoll(v); o->full = 0; }
        else if (!strcmp(a, "--full")) o->full = 1;
        else if (!strcmp(a, "--alpha")) { VAL(); o->alpha = atof(v); }
        else if (!strcmp(a, "--dropout")) { VAL(); o->dropout = atof(v); }
        else if (!strcmp(a, "--targets")) { VAL(); o->targets = v; }
        else if (!strcmp(a, "--steps")) { VAL(); o->steps = atoll(v); }
        else if (!strcmp(a, "--batch")) { VAL(); o->batch = atoll(v); }
        else if (!strcmp(a, "--seq")) { VAL(); o->seq = atoll(v); }
        else if (!strcmp(a, "--batches")) { VAL(); o->eval_batches = atoll(v); }
        else if (!strcmp(a, "--grad-accum")) { VAL(); o->grad_accum = atoll(v); }
        else if (!strcmp(a, "--lr")) { VAL(); o->lr = atof(v); }
        else if (!strcmp(a, "--weight-decay")) { VAL(); o->wd = atof(v); }
        else if (!strcmp(a, "--clip")) { VAL(); o->clip = atof(v); }
        else if (!strcmp(a, "--checkpoint-policy")) { VAL(); o->policy = v; }
        else if (!strcmp(a, "--save")) { VAL(); o->save = v; }
        else if (!strcmp(a, "--save-every")) { VAL(); o->save_every = atoll(v); }
        else if (!strcmp(a, "--resume")) { VAL(); o->resume = v; }
        else if (!strcmp(a, "--ddp")) o->ddp = 1;
        else if (!strcmp(a, "--zero")) { VAL(); o->zero = atoi(v); }
        else if (!strcmp(a, "--device")) { VAL(); o->device = v; }
        else if (!strcmp(a, "--dtype")) { VAL(); o->dtype = v; }
        else if (!strcmp(a, "--json")) o->json = 1;
        else if (!strcmp(a, "--quantize")) { VAL(); o->quantize = v; }
        else if (!strcmp(a, "--device-memory")) { VAL(); o->device_memory = v; }
        else if (!strcmp(a, "--quiet")) o->quiet = 1;
        else { fprintf(stderr, "gpucore-lm: unknown option %s\n", a); return 1; }
#undef VAL
    }
    if (o->max_new < 0) o->max_new = strcmp(o->cmd, "chat") ? 20 : 512; /* a chat answer ends at its EOS */
    if (strcmp(o->cmd, "generate") && strcmp(o->cmd, "finetune") && strcmp(o->cmd, "eval") &&
        strcmp(o->cmd, "tokenize") && strcmp(o->cmd, "chat") && strcmp(o->cmd, "plan")) {
        fprintf(stderr, "gpucore-lm: unknown command %s\n", o->cmd);
        return 1;
    }
    if (!strcmp(o->cmd, "generate") && !o->ids == !o->prompt) {
        fprintf(stderr, "gpucore-lm: generate needs --ids or --prompt\n");
        return 1;
    }
    if (!strcmp(o->cmd, "tokenize") && (!o->text || !o->out)) {
        fprintf(stderr, "gpucore-lm: tokenize needs --text and --out\n");
        return 1;
    }
    if (!strcmp(o->cmd, "eval") && !o->ndata == !o->text) {
        fprintf(stderr, "gpucore-lm: eval needs --data or --text\n");
        return 1;
    }
    if (!strcmp(o->cmd, "finetune") && !o->ndata == !o->text) {
        fprintf(stderr, "gpucore-lm: finetune needs --data or --text\n");
        return 1;
    }
    if (o->ddp && o->zero >= 0) { fprintf(stderr, "gpucore-lm: --ddp and --zero exclude each other\n"); return 1; }
    if (o->zero > 2) {
        fprintf(stderr, "gpucore-lm: --zero %d: stage 3 needs the model's executor to gather its weights, "
                        "which gpucore_lm does not expose; use --zero 1 or 2\n", o->zero);
        return 1;
    }
    if (o->zero >= 0 && (o->save || o->resume)) {
        fprintf(stderr, "gpucore-lm: --save/--resume are supported with --ddp or a single process, not --zero\n");
        return 1;
    }
    if (o->batch < 1 || o->seq < 1 || o->steps < 0 || o->lora_r < 1 || o->grad_accum < 1) {
        fprintf(stderr, "gpucore-lm: --batch, --seq, --lora and --grad-accum must be >= 1, --steps >= 0\n");
        return 1;
    }
    return 0;
}

static int parse_dtype(const char *s)
{
    if (!s) return -1;
    if (!strcmp(s, "f32") || !strcmp(s, "float32")) return GPUCORE_F32;
    if (!strcmp(s, "bf16") || !strcmp(s, "bfloat16")) return GPUCORE_BF16;
    if (!strcmp(s, "f16") || !strcmp(s, "float16")) return GPUCORE_F16;
    return -2;
}

/* gpucore_quant_format of a --quantize name (nf4, fp4, int8, q4_0 .. q8_0, in that order); -2: none of them. */
static const char *const quant_names[] = {"nf4", "fp4", "int8", "q4_0", "q4_1", "q5_0", "q5_1", "q8_0"};
static int parse_quant(const char *s)
{
    for (int i = 0; i < (int)(sizeof quant_names / sizeof quant_names[0]); i++)
        if (!strcmp(s, quant_names[i])) return i;
    return -2;
}

static int open_model(const lm_opts *o, gpucore_context *ctx, gpucore_lm **lm)
{
    gpucore_lm_load_options lo;
    gpucore_lm_load_options_init(&lo);
    lo.dtype = parse_dtype(o->dtype);
    if (lo.dtype == -2) {
        fprintf(stderr, "gpucore-lm: --dtype %s: one of f32, bf16, f16\n", o->dtype);
        return 2;
    }
    if (o->quantize) {
        lo.quantize = parse_quant(o->quantize);
        if (lo.quantize < 0 || lo.quantize > GPUCORE_QUANT_INT8_ROW) {
            fprintf(stderr, "gpucore-lm: --quantize %s: a model loads quantized as nf4, fp4 or int8\n", o->quantize);
            return 2;
        }
    }
    CHECK_LM(gpucore_lm_create_ex(ctx, o->model, &lo, lm));
    if (o->adapter) CHECK_LM(gpucore_lm_load_adapter(*lm, o->adapter));
    return 0;
}

/* ---------------------------------------------------------------- generate */

/* The model's tokenizer: a GGUF file's metadata, else the folder's tokenizer.json. */
static gpucore_status open_tokenizer(const char *model, gpucore_tokenizer **tok)
{
    struct stat sb;
    if (stat(model, &sb) == 0 && S_ISREG(sb.st_mode)) return gpucore_tokenizer_create_from_gguf(model, tok);
    char path[4096];
    snprintf(path, sizeof path, "%s/tokenizer.json", model);
    return gpucore_tokenizer_create_from_file(path, tok);
}

/* messages rendered by the model's chat template with the assistant's turn open (*text: malloc'ed). */
static int render_chat(gpucore_tokenizer *tok, const gpucore_chat_message *m, int64_t n, char **text)
{
    const char *tpl = gpucore_tokenizer_chat_template(tok);
    if (!tpl) { fprintf(stderr, "gpucore-lm: the model has no chat template\n"); return 2; }
    const char *bos = gpucore_tokenizer_id_to_token(tok, gpucore_tokenizer_bos_id(tok));
    const char *eos = gpucore_tokenizer_id_to_token(tok, gpucore_tokenizer_eos_id(tok));
    int64_t len = 0;
    CHECK_LM(gpucore_chat_render(tpl, bos, eos, m, n, 1, NULL, 0, &len));
    if (!(*text = malloc((size_t)len + 1))) { fprintf(stderr, "gpucore-lm: out of host memory\n"); return 1; }
    CHECK_LM(gpucore_chat_render(tpl, bos, eos, m, n, 1, *text, len + 1, &len));
    return 0;
}

/* text's ids (*ids: malloc'ed); special: add the ids the tokenizer's post-processor adds. */
static int encode(gpucore_tokenizer *tok, const char *text, int64_t len, int special, int32_t **ids, int64_t *n)
{
    CHECK_LM(gpucore_tokenizer_encode(tok, text, len, special, NULL, 0, n));
    if (!(*ids = malloc((size_t)(*n ? *n : 1) * sizeof **ids))) { fprintf(stderr, "gpucore-lm: out of host memory\n"); return 1; }
    CHECK_LM(gpucore_tokenizer_encode(tok, text, len, special, *ids, *n, n));
    return 0;
}

/* --prompt: the text (through the chat template with --chat) as one row of ids. */
static int prompt_ids(const lm_opts *o, gpucore_tokenizer *tok, int64_t **ids, int64_t *T)
{
    char *rendered = NULL;
    gpucore_chat_message m = {"user", o->prompt};
    int rc = o->chat ? render_chat(tok, &m, 1, &rendered) : 0;
    if (rc) return rc;
    int32_t *i32 = NULL;
    int64_t n = 0; /* a rendered chat prompt holds its special tokens already */
    if ((rc = encode(tok, rendered ? rendered : o->prompt, -1, !o->chat, &i32, &n))) return rc;
    if (!(*ids = malloc((size_t)(n ? n : 1) * sizeof **ids))) { fprintf(stderr, "gpucore-lm: out of host memory\n"); return 1; }
    for (int64_t k = 0; k < n; k++) (*ids)[k] = i32[k];
    *T = n;
    free(i32);
    free(rendered);
    if (!n) { fprintf(stderr, "gpucore-lm: --prompt: the text has no tokens\n"); return 2; }
    return 0;
}

/* The new tokens of a row as text (special tokens left out). */
static int print_text(gpucore_tokenizer *tok, const int64_t *ids, int64_t n, int json)
{
    int32_t *i32 = malloc((size_t)(n ? n : 1) * sizeof *i32);
    if (!i32) { fprintf(stderr, "gpucore-lm: out of host memory\n"); return 1; }
    for (int64_t k = 0; k < n; k++) i32[k] = (int32_t)ids[k];
    int64_t len = 0;
    CHECK_LM(gpucore_tokenizer_decode(tok, i32, n, 1, NULL, 0, &len));
    char *text = malloc((size_t)len + 1);
    if (!text) { fprintf(stderr, "gpucore-lm: out of host memory\n"); return 1; }
    CHECK_LM(gpucore_tokenizer_decode(tok, i32, n, 1, text, len + 1, &len));
    if (!json) {
        fwrite(text, 1, (size_t)len, stdout);
        printf("\n");
    } else { /* a JSON string: quotes, backslashes and control characters escaped */
        printf(",\"text\":\"");
        for (int64_t k = 0; k < len; k++) {
            unsigned char c = (unsigned char)text[k];
            if (c == '"' || c == '\\') printf("\\%c", c);
            else if (c < 0x20) printf("\\u%04x", c);
            else putchar(c);
        }
        printf("\"");
    }
    free(text);
    free(i32);
    return 0;
}

/* --text FILE: the file's UTF-8 text encoded by the model's tokenizer (the ids its post-processor adds included). */
static int text_ids(const lm_opts *o, int32_t **ids, int64_t *n)
{
    FILE *f = fopen(o->text, "rb");
    if (!f) { fprintf(stderr, "gpucore-lm: --text %s: %s\n", o->text, strerror(errno)); return 2; }
    size_t cap = 1 << 16, len = 0, got;
    char *text = malloc(cap);
    while (text && (got = fread(text + len, 1, cap - len, f)) > 0)
        if ((len += got) == cap) {
            char *more = realloc(text, cap *= 2);
            if (!more) free(text);
            text = more;
        }
    int bad = ferror(f);
    fclose(f);
    if (!text) { fprintf(stderr, "gpucore-lm: out of host memory\n"); return 1; }
    if (bad) { fprintf(stderr, "gpucore-lm: --text %s: read failed\n", o->text); free(text); return 2; }
    gpucore_tokenizer *tok = NULL;
    CHECK_LM(open_tokenizer(o->model, &tok));
    int rc = encode(tok, text, (int64_t)len, 1, ids, n);
    gpucore_tokenizer_destroy(tok);
    free(text);
    return rc;
}

static int cmd_tokenize(const lm_opts *o)
{
    int32_t *ids = NULL;
    int64_t n = 0;
    int rc = text_ids(o, &ids, &n);
    if (rc) return rc;
    CHECK_LM(gpucore_token_data_write(o->out, ids, n));
    if (o->json) printf("{\"cmd\":\"tokenize\",\"tokens\":%" PRId64 ",\"out\":\"%s\"}\n", n, o->out);
    else if (!o->quiet) printf("tokenize: %" PRId64 " tokens written to %s\n", n, o->out);
    free(ids);
    return 0;
}

static int cmd_generate(const lm_opts *o)
{
    gpucore_context *ctx = NULL;
    gpucore_lm *lm = NULL;
    CHECK_LM(gpucore_context_create(o->device, &ctx));
    int rc = open_model(o, ctx, &lm);
    if (rc) return rc;
    gpucore_tokenizer *tok = NULL;
    int64_t n = 1, rows = 1, *ids = NULL, count = 0, T = 0;
    if (o->prompt) {
        CHECK_LM(open_tokenizer(o->model, &tok));
        if ((rc = prompt_ids(o, tok, &ids, &T))) return rc;
        count = T;
    }
    /* --ids: rows separated by ';', ids by ',' — every row the same length */
    for (const char *p = o->ids; p && *p; p++) n += *p == ',' || *p == ';', rows += *p == ';';
    if (!ids) ids = malloc((size_t)n * sizeof *ids);
    char *end = NULL;
    for (const char *p = o->ids; p && *p && count < n; p = end + (*end != 0)) {
        ids[count++] = strtoll(p, &end, 10);
        if (end == p) { fprintf(stderr, "gpucore-lm: --ids: bad token id list \"%s\"\n", o->ids); return 2; }
        if (*end == ';' || !*end) {
            if (!T) T = count;
            else if (count % T) { fprintf(stderr, "gpucore-lm: --ids: every prompt needs the same length\n"); return 2; }
        }
    }
    if (count != rows * T) { fprintf(stderr, "gpucore-lm: --ids: every prompt needs the same length\n"); return 2; }
    int64_t eos = o->eos, pad = -1, out_len = 0;
    if (eos == -2) CHECK_LM(gpucore_lm_config_int(lm, "eos_token_id", &eos));
    CHECK_LM(gpucore_lm_config_int(lm, "pad_token_id", &pad));
    int64_t *out = malloc((size_t)(rows * (T + o->max_new)) * sizeof *out);
    double t0 = train_now_s();
    CHECK_LM(gpucore_lm_generate(lm, ids, rows, T, o->max_new, o->sample, o->temperature, o->top_k, o->top_p, o->seed,
                                 eos, pad, out, &out_len));
    double dt = train_now_s() - t0, tps = (double)(rows * (out_len - T)) / (dt > 0 ? dt : 1e-9);
    for (int64_t b = 0; b < rows; b++) {
        if (o->json) printf("{\"cmd\":\"generate\",\"row\":%" PRId64 ",\"ids\":[", b);
        if (tok && !o->json) {
            if ((rc = print_text(tok, out + b * out_len + T, out_len - T, 0))) return rc;
            continue;
        }
        for (int64_t t = 0; t < out_len; t++) printf("%s%" PRId64, t ? (o->json ? "," : " ") : "", out[b * out_len + t]);
        if (o->json) printf("]");
        if (tok && o->json && (rc = print_text(tok, out + b * out_len + T, out_len - T, 1))) return rc;
        if (o->json) printf(",\"prompt_len\":%" PRId64 ",\"new_tokens\":%" PRId64 ",\"seconds\":%.6f,\"tokens_per_s\":%.2f}\n",
                            T, out_len - T, dt, tps);
        else printf("\n");
    }
    if (!o->json && !o->quiet) fprintf(stderr, "generated %" PRId64 " tokens in %.3f s (%.1f tokens/s)\n",
                                       rows * (out_len - T), dt, tps);
    free(ids);
    free(out);
    gpucore_tokenizer_destroy(tok);
    gpucore_lm_destroy(lm);
    gpucore_context_destroy(ctx);
    return 0;
}

/* ---------------------------------------------------------------- chat */

/* ids [1, n] through the cache; *logits (f32 host, vocab entries) of the last position. */
static int feed(gpucore_lm *lm, gpucore_lm_cache *cache, gpucore_context *ctx, const int32_t *ids, int64_t n,
                float *logits, int64_t vocab)
{
    int64_t shape[2] = {1, n}, *i64 = malloc((size_t)n * sizeof *i64);
    if (!i64) { fprintf(stderr, "gpucore-lm: out of host memory\n"); return 1; }
    for (int64_t k = 0; k < n; k++) i64[k] = ids[k];
    gpucore_tensor *in = NULL, *out = NULL, *f32 = NULL;
    CHECK_LM(gpucore_tensor_create(ctx, GPUCORE_I64, 2, shape, &in));
    CHECK_LM(gpucore_copy_from_host(in, i64, n * (int64_t)sizeof *i64));
    CHECK_LM(gpucore_lm_forward_cached(lm, cache, in, 1, &out));
    if (gpucore_tensor_dtype(out) != GPUCORE_F32) {
        int64_t vs[3] = {1, 1, vocab};
        CHECK_LM(gpucore_tensor_create(ctx, GPUCORE_F32, 3, vs, &f32));
        CHECK_LM(gpucore_cast(f32, out, NULL));
    }
    CHECK_LM(gpucore_copy_to_host(logits, vocab * (int64_t)sizeof *logits, f32 ? f32 : out));
    gpucore_tensor_destroy(f32);
    gpucore_tensor_destroy(out);
    gpucore_tensor_destroy(in);
    free(i64);
    return 0;
}

/* Print the text of ids[0..n) past the *printed bytes already shown (special tokens left out). */
static int stream_text(gpucore_tokenizer *tok, const int32_t *ids, int64_t n, int64_t *printed)
{
    int64_t len = 0;
    CHECK_LM(gpucore_tokenizer_decode(tok, ids, n, 1, NULL, 0, &len));
    char *text = malloc((size_t)len + 1);
    if (!text) { fprintf(stderr, "gpucore-lm: out of host memory\n"); return 1; }
    CHECK_LM(gpucore_tokenizer_decode(tok, ids, n, 1, text, len + 1, &len));
    if (len > *printed) fwrite(text + *printed, 1, (size_t)(len - *printed), stdout), *printed = len;
    fflush(stdout);
    free(text);
    return 0;
}

/* An interactive conversation: each line read is the user's message; the whole conversation is rendered by the
 * chat template and only the ids past those the KV cache holds are run (the cache is refilled when the rendered
 * ids no longer start with them); the answer is greedy (or sampled: --sample), printed as it is generated, up to
 * the EOS or --max-new tokens. End of input (Ctrl-D) ends it and prints the generation speed. */
static int cmd_chat(const lm_opts *o)
{
    gpucore_context *ctx = NULL;
    gpucore_lm *lm = NULL;
    gpucore_tokenizer *tok = NULL;
    gpucore_lm_cache *cache = NULL;
    CHECK_LM(gpucore_context_create(o->device, &ctx));
    int rc = open_model(o, ctx, &lm);
    if (rc) return rc;
    CHECK_LM(open_tokenizer(o->model, &tok));
    if (!gpucore_tokenizer_chat_template(tok)) { fprintf(stderr, "gpucore-lm: chat: the model has no chat template\n"); return 2; }
    int64_t eos = o->eos, vocab = 0, cap = 0;
    if (eos == -2) CHECK_LM(gpucore_lm_config_int(lm, "eos_token_id", &eos));
    CHECK_LM(gpucore_lm_config_int(lm, "vocab_size", &vocab));
    CHECK_LM(gpucore_lm_config_int(lm, "max_position_embeddings", &cap));
    if (cap <= 0 || cap > 4096) cap = 4096;
    CHECK_LM(gpucore_lm_cache_create(lm, 1, cap, &cache));
    int32_t *held = malloc((size_t)cap * sizeof *held), *ids = NULL;
    float *logits = malloc((size_t)vocab * sizeof *logits);
    gpucore_chat_message *msgs = NULL;
    int64_t nheld = 0, nmsg = 0, total = 0;
    double seconds = 0;
    char *line = NULL;
    size_t line_cap = 0;
    if (!held || !logits) { fprintf(stderr, "gpucore-lm: out of host memory\n"); return 1; }
    for (;;) {
        if (!o->quiet) fputs("> ", stdout), fflush(stdout);
        ssize_t got = getline(&line, &line_cap, stdin);
        if (got < 0) break;
        while (got > 0 && (line[got - 1] == '\n' || line[got - 1] == '\r')) line[--got] = 0;
        if (!got) continue;
        gpucore_chat_message *more = realloc(msgs, (size_t)(nmsg + 2) * sizeof *msgs);
        if (!more) { fprintf(stderr, "gpucore-lm: out of host memory\n"); return 1; }
        msgs = more;
        msgs[nmsg++] = (gpucore_chat_message){"user", strdup(line)};
        char *text = NULL;
        int64_t n = 0;
        if ((rc = render_chat(tok, msgs, nmsg, &text)) || (rc = encode(tok, text, -1, 0, &ids, &n))) return rc;
        free(text);
        if (n >= cap) { fprintf(stderr, "gpucore-lm: chat: the conversation outgrew the cache (%" PRId64 " tokens)\n", cap); break; }
        int64_t keep = 0;
        while (keep < nheld && keep < n - 1 && held[keep] == ids[keep]) keep++;
        if (keep < nheld) { /* the held ids no longer a prefix: refill */
            CHECK_LM(gpucore_lm_cache_reset(cache));
            keep = 0;
        }
        double t0 = train_now_s();
        if ((rc = feed(lm, cache, ctx, ids + keep, n - keep, logits, vocab))) return rc;
        memcpy(held, ids, (size_t)n * sizeof *held);
        nheld = n;
        int64_t start = nheld, printed = 0;
        for (int64_t step = 0; step < o->max_new && nheld < cap; step++) {
            int64_t pick = 0; /* as gpucore_lm_generate picks, the session's count of tokens the Philox counter */
            CHECK_LM(gpucore_lm_sample_token(logits, vocab, o->sample, o->temperature, o->top_k, o->top_p, o->seed,
                                             (uint64_t)total, &pick));
            int32_t next = (int32_t)pick;
            total++;
            if (next == eos) break;
            held[nheld++] = next;
            if ((rc = stream_text(tok, held + start, nheld - start, &printed))) return rc;
            if (step + 1 < o->max_new && (rc = feed(lm, cache, ctx, &next, 1, logits, vocab))) return rc;
        }
        seconds += train_now_s() - t0;
        printf("\n");
        int64_t len = 0;
        CHECK_LM(gpucore_tokenizer_decode(tok, held + start, nheld - start, 1, NULL, 0, &len));
        char *answer = malloc((size_t)len + 1);
        if (!answer) { fprintf(stderr, "gpucore-lm: out of host memory\n"); return 1; }
        CHECK_LM(gpucore_tokenizer_decode(tok, held + start, nheld - start, 1, answer, len + 1, &len));
        msgs[nmsg++] = (gpucore_chat_message){"assistant", answer};
        free(ids);
        ids = NULL;
    }
    if (!o->quiet) fprintf(stderr, "\nchat: %" PRId64 " tokens generated in %.3f s (%.1f tokens/s, prompts included)\n",
                           total, seconds, (double)total / (seconds > 0 ? seconds : 1e-9));
    for (int64_t k = 0; k < nmsg; k++) free((char *)msgs[k].content);
    free(msgs);
    free(line);
    free(held);
    free(logits);
    gpucore_lm_cache_destroy(cache);
    gpucore_tokenizer_destroy(tok);
    gpucore_lm_destroy(lm);
    gpucore_context_destroy(ctx);
    return 0;
}

/* ---------------------------------------------------------------- token data */

static int open_data(const lm_opts *o, gpucore_context *ctx, gpucore_lm *lm, int shuffle, int rank, int size,
                     gpucore_token_data **td)
{
    gpucore_token_data_options to;
    gpucore_token_data_options_default(&to);
    to.batch_size = o->batch;
    to.seq_len = o->seq;
    to.seed = o->seed;
    to.shuffle = shuffle;
    to.dtype = GPUCORE_I64;
    to.rank = rank;
    to.world_size = size;
    to.layout = GPUCORE_TOKEN_LAYOUT_WINDOW; /* the model's loss shifts inside: T + 1 tokens give T predictions */
    CHECK_LM(gpucore_lm_config_int(lm, "vocab_size", &to.vocab_size));
    CHECK_LM(gpucore_token_data_open(ctx, o->data, o->ndata, &to, td));
    return 0;
}

/* ---------------------------------------------------------------- eval */

static int cmd_eval_data(const lm_opts *o);

/* --text: the file tokenized into a temporary token file, run(o with that file as --data), the file removed. */
static int with_text_data(const lm_opts *o, int (*run)(const lm_opts *))
{
    int32_t *ids = NULL;
    int64_t n = 0;
    int rc = text_ids(o, &ids, &n);
    if (rc) return rc;
    const char *dir = getenv("TMPDIR");
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s/gpucore-lm-text-XXXXXX", dir && *dir ? dir : "/tmp");
    int fd = mkstemp(tmp);
    if (fd < 0) { fprintf(stderr, "gpucore-lm: cannot create a temporary file %s: %s\n", tmp, strerror(errno)); return 1; }
    close(fd);
    lm_opts with = *o;
    with.data[0] = tmp, with.ndata = 1;
    gpucore_status st = gpucore_token_data_write(tmp, ids, n);
    free(ids);
    if (st != GPUCORE_OK) {
        fprintf(stderr, "gpucore-lm: gpucore_token_data_write failed: %s: %s\n", gpucore_status_string(st),
                gpucore_last_error());
        unlink(tmp);
        return 1;
    }
    rc = run(&with);
    unlink(tmp);
    return rc;
}

static int cmd_eval(const lm_opts *o)
{
    return o->text ? with_text_data(o, cmd_eval_data) : cmd_eval_data(o);
}

static int cmd_eval_data(const lm_opts *o)
{
    gpucore_context *ctx = NULL;
    gpucore_lm *lm = NULL;
    gpucore_token_data *td = NULL;
    CHECK_LM(gpucore_context_create(o->device, &ctx));
    int rc = open_model(o, ctx, &lm);
    if (rc || (rc = open_data(o, ctx, lm, 0, 0, 1, &td))) return rc;
    int64_t per_epoch = 0;
    CHECK_LM(gpucore_token_data_sizes(td, NULL, NULL, &per_epoch));
    int64_t n = o->eval_batches > 0 && o->eval_batches < per_epoch ? o->eval_batches : per_epoch;
    double sum = 0, t0 = train_now_s();
    for (int64_t k = 0; k < n; k++) {
        gpucore_tensor *ids = NULL, *lab = NULL;
        double loss = 0;
        CHECK_LM(gpucore_token_data_next(td, NULL, &ids, &lab, NULL, NULL));
        CHECK_LM(gpucore_lm_loss(lm, ids, NULL, &loss));
        gpucore_tensor_destroy(ids);
        gpucore_tensor_destroy(lab);
        sum += loss; /* every batch predicts batch * seq tokens: the mean of means is the mean */
        if (!o->json && !o->quiet) fprintf(stderr, "eval batch %" PRId64 "/%" PRId64 " loss %.6f\n", k + 1, n, loss);
    }
    double dt = train_now_s() - t0, mean = sum / (double)n, tokens = (double)(n * o->batch * o->seq);
    if (o->json)
        printf("{\"cmd\":\"eval\",\"batches\":%" PRId64 ",\"tokens\":%.0f,\"loss\":%.17g,\"perplexity\":%.17g,"
               "\"seconds\":%.6f,\"tokens_per_s\":%.2f}\n", n, tokens, mean, exp(mean), dt, tokens / dt);
    else
        printf("eval: %" PRId64 " batches, %.0f predicted tokens, loss %.6f, perplexity %.4f, %.1f tokens/s\n", n,
               tokens, mean, exp(mean), tokens / dt);
    gpucore_token_data_close(td);
    gpucore_lm_destroy(lm);
    gpucore_context_destroy(ctx);
    return 0;
}

/* ---------------------------------------------------------------- finetune */

typedef struct trainer {
    const lm_opts *o;
    train_world w;
    gpucore_lm *lm;
    gpucore_token_data *td;
    gpucore_optimizer *opt;
    gpucore_zero *zero;
    int64_t count;
    const char **names;
    gpucore_tensor **params, **grads;
    gpucore_tensor *norm;
    gpucore_tensor *loss; /* 0-d f64, for the mean loss over ranks */
} trainer;

static int path_join(char *buf, size_t len, const char *dir, const char *name)
{
    return snprintf(buf, len, "%s/%s", dir, name) >= (int)len;
}

/* trainer_state.txt: "key value" lines. */
static int read_state(const char *dir, int64_t *step, int64_t *position, int64_t *full)
{
    char p[4096], key[64];
    long long v;
    path_join(p, sizeof p, dir, "trainer_state.txt");
    FILE *f = fopen(p, "r");
    if (!f) { fprintf(stderr, "gpucore-lm: --resume: cannot read %s: %s\n", p, strerror(errno)); return 1; }
    int got = 0;
    while (fscanf(f, "%63s %lld", key, &v) == 2) {
        if (!strcmp(key, "step")) *step = v, got |= 1;
        else if (!strcmp(key, "data_position")) *position = v, got |= 2;
        else if (!strcmp(key, "full")) *full = v, got |= 4;
    }
    fclose(f);
    if (got != 7) { fprintf(stderr, "gpucore-lm: --resume: %s lacks step, data_position or full\n", p); return 1; }
    return 0;
}

static int save_state(trainer *t, const char *dir, int64_t step)
{
    if (!rank0) return 0;
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
        fprintf(stderr, "gpucore-lm: --save: cannot create %s: %s\n", dir, strerror(errno));
        return 1;
    }
    char p[4096], tmp[4200];
    int64_t position = 0;
    if (t->o->full) CHECK_LM(gpucore_lm_save_pretrained(t->lm, dir));
    else CHECK_LM(gpucore_lm_save_adapter(t->lm, dir));
    path_join(p, sizeof p, dir, "trainer.safetensors");
    CHECK_LM(gpucore_checkpoint_save(p, t->names, t->params, t->count, t->opt, NULL));
    CHECK_LM(gpucore_token_data_position(t->td, &position));
    path_join(p, sizeof p, dir, "trainer_state.txt");
    snprintf(tmp, sizeof tmp, "%s.tmp", p);
    FILE *f = fopen(tmp, "w");
    if (!f) { fprintf(stderr, "gpucore-lm: --save: cannot write %s: %s\n", tmp, strerror(errno)); return 1; }
    fprintf(f, "step %" PRId64 "\ndata_position %" PRId64 "\nfull %d\n", step, position, t->o->full);
    if (fclose(f) != 0 || rename(tmp, p) != 0) {
        fprintf(stderr, "gpucore-lm: --save: cannot write %s: %s\n", p, strerror(errno));
        return 1;
    }
    return 0;
}

static int split_targets(const char *s, char *buf, size_t len, const char **out, int64_t *n)
{
    *n = 0;
    if (!s) return 0;
    snprintf(buf, len, "%s", s);
    char *save = NULL;
    for (char *t = strtok_r(buf, ",", &save); t && *n < MAX_TARGETS; t = strtok_r(NULL, ",", &save)) out[(*n)++] = t;
    return 0;
}

/* PEFT's default targets when --targets is not given. */
static const char *const *default_targets(gpucore_lm *lm, int64_t *n)
{
    static const char *const gpt2[] = {"c_attn"}, *const others[] = {"q_proj", "v_proj"};
    const char *arch = gpucore_lm_arch_name(lm);
    if (arch && !strcmp(arch, "gpt2")) { *n = 1; return gpt2; }
    *n = 2;
    return others;
}

static int setup_training(trainer *t, int64_t *start_step)
{
    const lm_opts *o = t->o;
    char tbuf[1024];
    const char *targets[MAX_TARGETS];
    int64_t nt = 0;
    split_targets(o->targets, tbuf, sizeof tbuf, targets, &nt);
    if (o->full) CHECK_LM(gpucore_lm_set_full_finetune(t->lm, 1));
    else if (nt) CHECK_LM(gpucore_lm_add_lora(t->lm, o->lora_r, o->alpha, o->dropout, targets, nt, o->seed));
    else {
        const char *const *d = default_targets(t->lm, &nt);
        CHECK_LM(gpucore_lm_add_lora(t->lm, o->lora_r, o->alpha, o->dropout, d, nt, o->seed));
    }
    train_policy pol;
    if (train_parse_policy(o->policy, &pol)) {
        fprintf(stderr, "gpucore-lm: --checkpoint-policy %s: none, all, sqrt, every:K or budget:BYTES\n", o->policy);
        return 2;
    }
    int64_t param = pol.param;
    if (pol.kind == GPUCORE_CKPT_BUDGET) { /* an activation budget on top of what is allocated now */
        gpucore_memory_stats ms;
        ms.struct_size = sizeof ms;
        CHECK_LM(gpucore_memory_get_stats(t->w.ctx, GPUCORE_MEMORY_DEVICE, &ms));
        param += ms.allocated_bytes;
    }
    CHECK_LM(gpucore_lm_set_checkpoint_policy(t->lm, pol.kind, param));
    t->count = gpucore_lm_trainable_count(t->lm);
    t->names = calloc((size_t)t->count, sizeof *t->names);
    t->params = calloc((size_t)t->count, sizeof *t->params);
    t->grads = calloc((size_t)t->count, sizeof *t->grads);
    for (int64_t i = 0; i < t->count; i++) CHECK_LM(gpucore_lm_trainable(t->lm, i, &t->names[i], &t->params[i], &t->grads[i]));
    gpucore_optimizer_config cfg;
    CHECK_LM(gpucore_optimizer_config_default(GPUCORE_OPTIMIZER_ADAMW, &cfg));
    cfg.lr = o->lr;
    cfg.weight_decay = o->wd;
    if (t->w.comm) CHECK_LM(gpucore_tensor_create(t->w.ctx, GPUCORE_F64, 0, NULL, &t->loss));
    if (t->w.comm) /* every rank starts from rank 0's values */
        for (int64_t i = 0; i < t->count; i++) CHECK_LM(gpucore_comm_broadcast(t->w.comm, t->params[i], t->params[i], 0, NULL));
    if (o->zero >= 0) {
        gpucore_zero_options zo;
        gpucore_zero_options_default(&zo);
        zo.stage = o->zero;
        zo.max_grad_norm = o->clip;
        CHECK_LM(gpucore_zero_create(t->w.comm, t->params, (int)t->count, &cfg, &zo, &t->zero));
    } else {
        CHECK_LM(gpucore_optimizer_create(t->w.ctx, &cfg, t->params, t->count, &t->opt));
        if (o->clip > 0) CHECK_LM(gpucore_tensor_create(t->w.ctx, GPUCORE_F32, 0, NULL, &t->norm));
    }
    int rc = open_data(o, t->w.ctx, t->lm, 1, t->w.rank, t->w.size, &t->td);
    if (rc) return rc;
    *start_step = 0;
    if (o->resume) {
        int64_t position = 0, full = 0;
        char p[4096];
        if (read_state(o->resume, start_step, &position, &full)) return 1;
        if (full != o->full) {
            fprintf(stderr, "gpucore-lm: --resume %s was saved %s --full; give the same options\n", o->resume,
                    full ? "with" : "without");
            return 2;
        }
        path_join(p, sizeof p, o->resume, "trainer.safetensors");
        CHECK_LM(gpucore_checkpoint_load(p, t->names, t->params, t->count, t->opt, NULL));
        CHECK_LM(gpucore_token_data_seek(t->td, position));
    }
    return 0;
}

/* The step's K micro-batches (ids[K], taken from the data here): their label tokens counted first,
 * then each one's loss and gradients, added up and normalised by that count. */
static int micro_batches(trainer *t, int64_t step, gpucore_tensor **ids, double *loss, int64_t *epoch)
{
    const int64_t K = t->o->grad_accum;
    gpucore_lm_backward_options bo;
    gpucore_lm_backward_options_init(&bo);
    for (int64_t k = 0; k < K; k++) {
        gpucore_tensor *lab = NULL;
        int64_t n = 0;
        CHECK_LM(gpucore_token_data_next(t->td, NULL, &ids[k], &lab, epoch, NULL));
        gpucore_tensor_destroy(lab);
        CHECK_LM(gpucore_lm_count_label_tokens(t->lm, ids[k], NULL, &n));
        bo.total_label_tokens += n;
    }
    *loss = 0;
    for (int64_t k = 0; k < K; k++) {
        double part = 0;
        /* dropout drawn from (seed, micro-batch): a resumed run draws what the uninterrupted one did */
        CHECK_LM(gpucore_lm_set_seed(t->lm, t->o->seed + (uint64_t)(step * K + k) * 0x9E3779B97F4A7C15ull));
        bo.accumulate = k > 0;
        CHECK_LM(gpucore_lm_forward_backward_ex(t->lm, ids[k], NULL, K > 1 ? &bo : NULL, &part));
        *loss += part;
    }
    return 0;
}

/* One step: the micro-batches' loss and gradients, their reduction over ranks, the update. */
static int train_step(trainer *t, int64_t step, double *loss, int64_t *epoch)
{
    gpucore_tensor **ids = calloc((size_t)t->o->grad_accum, sizeof *ids);
    if (!ids) { fprintf(stderr, "gpucore-lm: out of host memory\n"); return 1; }
    int rc = micro_batches(t, step, ids, loss, epoch);
    for (int64_t k = 0; k < t->o->grad_accum; k++) gpucore_tensor_destroy(ids[k]);
    free(ids);
    if (rc) return rc;
    if (t->w.comm) { /* the loss of the global batch: the mean of the ranks' (equal token counts) */
        CHECK_LM(gpucore_copy_from_host(t->loss, loss, sizeof *loss));
        CHECK_LM(gpucore_comm_allreduce(t->w.comm, t->loss, t->loss, GPUCORE_REDUCE_AVG, NULL));
        CHECK_LM(gpucore_copy_to_host(loss, sizeof *loss, t->loss));
    }
    if (t->zero) {
        for (int64_t i = t->count - 1; i >= 0; i--) {
            gpucore_tensor *g = NULL;
            CHECK_LM(gpucore_zero_grad(t->zero, (int)i, NULL, &g));
            CHECK_LM(gpucore_copy(g, t->grads[i], NULL));
            CHECK_LM(gpucore_zero_mark_ready(t->zero, (int)i, NULL));
        }
        CHECK_LM(gpucore_zero_step(t->zero, NULL, NULL));
        return 0;
    }
    if (t->w.comm)
        for (int64_t i = 0; i < t->count; i++)
            CHECK_LM(gpucore_comm_allreduce(t->w.comm, t->grads[i], t->grads[i], GPUCORE_REDUCE_AVG, NULL));
    if (t->norm) CHECK_LM(gpucore_clip_grad_norm(t->grads, t->count, t->o->clip, t->norm, NULL, NULL));
    CHECK_LM(gpucore_optimizer_step(t->opt, t->grads, t->count, NULL, NULL));
    return 0;
}

static int cmd_finetune(const lm_opts *o)
{
    trainer t;
    memset(&t, 0, sizeof t);
    t.o = o;
    int rc = train_open_world("gpucore-lm", o->device, o->ddp || o->zero >= 0, 0, 0, &t.w);
    if (rc) return rc;
    rank0 = t.w.rank == 0;
    int64_t start = 0;
    if ((rc = open_model(o, t.w.ctx, &t.lm)) || (rc = setup_training(&t, &start))) return rc;
    double total_s = 0, last = NAN;
    int64_t tokens_per_step = o->batch * o->grad_accum * o->seq * t.w.size, done = 0;
    if (rank0 && !o->json && !o->quiet)
        fprintf(stderr, "finetune %s (%s) on %s: %s, %" PRId64 " trainable tensors, %d rank(s), steps %" PRId64 "..%" PRId64 "\n",
                o->model, gpucore_lm_arch_name(t.lm), gpucore_context_device_name(t.w.ctx), o->full ? "full" : "LoRA",
                t.count, t.w.size, start + 1, o->steps);
    for (int64_t step = start; step < o->steps; step++) {
        double t0 = train_now_s(), loss = 0;
        int64_t epoch = 0;
        if ((rc = train_step(&t, step, &loss, &epoch))) return rc;
        CHECK_LM(gpucore_context_synchronize(t.w.ctx));
        double dt = train_now_s() - t0;
        total_s += dt;
        done++;
        last = loss;
        if (rank0 && o->json)
            printf("{\"cmd\":\"finetune\",\"step\":%" PRId64 ",\"epoch\":%" PRId64 ",\"loss\":%.17g,\"ms\":%.3f,"
                   "\"tokens_per_s\":%.2f}\n", step + 1, epoch, loss, dt * 1e3, (double)tokens_per_step / dt);
        else if (rank0 && !o->quiet)
            printf("step %" PRId64 "/%" PRId64 " epoch %" PRId64 " loss %.6f  %.1f ms  %.0f tokens/s\n", step + 1,
                   o->steps, epoch, loss, dt * 1e3, (double)tokens_per_step / dt);
        fflush(stdout);
        if (o->save && o->save_every > 0 && (step + 1) % o->save_every == 0 && (rc = save_state(&t, o->save, step + 1)))
            return rc;
    }
    if (o->save && (rc = save_state(&t, o->save, o->steps))) return rc;
    if (rank0 && o->json)
        printf("{\"cmd\":\"finetune\",\"steps\":%" PRId64 ",\"final_loss\":%.17g,\"tokens_per_s\":%.2f,\"ranks\":%d}\n",
               done, last, done ? (double)(tokens_per_step * done) / total_s : 0.0, t.w.size);
    else if (rank0 && !o->quiet)
        printf("done: %" PRId64 " steps, final loss %.6f, %.0f tokens/s%s%s\n", done, last,
               done ? (double)(tokens_per_step * done) / total_s : 0.0, o->save ? ", saved to " : "",
               o->save ? o->save : "");
    gpucore_token_data_close(t.td);
    gpucore_zero_destroy(t.zero);
    gpucore_optimizer_destroy(t.opt);
    gpucore_tensor_destroy(t.norm);
    gpucore_tensor_destroy(t.loss);
    gpucore_lm_destroy(t.lm);
    free(t.names);
    free(t.params);
    free(t.grads);
    if (t.w.comm) gpucore_comm_destroy(t.w.comm);
    gpucore_context_destroy(t.w.ctx);
    return 0;
}

/* ---------------------------------------------------------------------------------- plan */

/* "24GiB", "8000MB", "1.5G", plain bytes; -1 when malformed. */
static int64_t parse_size(const char *s)
{
    char *end = NULL;
    double v = strtod(s, &end);
    if (end == s || !(v > 0)) return -1;
    double m = 1;
    if (!strcasecmp(end, "") || !strcasecmp(end, "b")) m = 1;
    else if (!strcasecmp(end, "k") || !strcasecmp(end, "kib")) m = 1024.0;
    else if (!strcasecmp(end, "m") || !strcasecmp(end, "mib")) m = 1048576.0;
    else if (!strcasecmp(end, "g") || !strcasecmp(end, "gib")) m = 1073741824.0;
    else if (!strcasecmp(end, "kb")) m = 1e3;
    else if (!strcasecmp(end, "mb")) m = 1e6;
    else if (!strcasecmp(end, "gb")) m = 1e9;
    else return -1;
    return (int64_t)(v * m);
}

/* Whether the folder's config.json names GPT-2 (its default LoRA target is c_attn, not q_proj/v_proj). */
static int config_is_gpt2(const char *folder)
{
    char p[4096], buf[8192];
    path_join(p, sizeof p, folder, "config.json");
    FILE *f = fopen(p, "rb");
    if (!f) return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    const char *k = strstr(buf, "\"model_type\"");
    const char *q = k ? strchr(k + 12, '"') : NULL;
    return q && !strncmp(q, "\"gpt2\"", 6);
}

/* The plan of one setting; nonzero on an error (printed). */
static int plan_one(const lm_opts *o, gpucore_lm_plan_options *po, gpucore_lm_memory_plan *p)
{
    p->struct_size = sizeof *p;
    CHECK_LM(gpucore_lm_plan(NULL, o->model, po, p));
    return 0;
}

static void print_plan(const lm_opts *o, const gpucore_lm_plan_options *po, const gpucore_lm_memory_plan *p)
{
    const double mib = 1048576.0;
    if (o->json) {
        printf("{\"model\": \"%s\", \"batch\": %lld, \"seq\": %lld, \"peak_bytes\": %lld, \"persistent_bytes\": %lld, "
               "\"where\": \"%s\", \"layer\": %lld, \"recomputed_segments\": %lld, \"segments\": %lld, \"breakdown\": {",
               o->model, (long long)po->batch, (long long)po->seq, (long long)p->peak_bytes,
               (long long)p->persistent_bytes, p->where, (long long)p->layer, (long long)p->recomputed_segments,
               (long long)p->segments);
        for (int c = 0; c < GPUCORE_MEM_CATEGORIES; c++)
            printf("%s\"%s\": %lld", c ? ", " : "", gpucore_mem_category_name(c), (long long)p->bytes[c]);
        printf("}}\n");
        return;
    }
    printf("memory plan: %s, batch %lld x seq %lld, %s, checkpoint policy %s\n", o->model, (long long)po->batch,
           (long long)po->seq, po->full_finetune ? "full fine-tuning" : "LoRA", o->policy);
    printf("  %-12s %12s %7s\n", "category", "MiB", "share");
    for (int c = 0; c < GPUCORE_MEM_CATEGORIES; c++)
        printf("  %-12s %12.2f %6.1f%%\n", gpucore_mem_category_name(c), p->bytes[c] / mib,
               100.0 * (double)p->bytes[c] / (double)p->peak_bytes);
    printf("  %-12s %12.2f\n  at %s; %lld of %lld segments recomputed; %.2f MiB held between steps\n", "peak",
           p->peak_bytes / mib, p->where, (long long)p->recomputed_segments, (long long)p->segments,
           p->persistent_bytes / mib);
}

/* With a memory limit: the settings that fit (checkpoint policy x micro-batch with accumulation),
 * cheapest first by estimated extra compute: a recomputed segment runs its forward again (about a third
 * of its forward and backward), and each halving of the micro-batch is counted 5% for the GEMMs' worse
 * shapes. */
static int plan_fits(const lm_opts *o, gpucore_lm_plan_options base, int64_t limit)
{
    static const char *const pols[] = {"none", "sqrt", "all"};
    static const int kinds[] = {GPUCORE_CKPT_KEEP_ALL, GPUCORE_CKPT_SQRT_N, GPUCORE_CKPT_RECOMPUTE_ALL};
    struct fit { const char *pol; int64_t micro, accum, peak; double cost; } fits[64];
    int n = 0;
    for (int64_t micro = base.batch, halvings = 0; micro >= 1; micro /= 2, halvings++) {
        for (int k = 0; k < 3 && n < 64; k++) {
            gpucore_lm_plan_options po = base;
            gpucore_lm_memory_plan p;
            po.batch = micro;
            po.grad_accum = (base.batch + micro - 1) / micro;
            po.ckpt_policy = kinds[k];
            po.ckpt_param = 0;
            po.memory_limit = limit; /* replayed under the limit: it caps the allocator's segments, not its blocks */
            p.struct_size = sizeof p;
            const gpucore_status st = gpucore_lm_plan(NULL, o->model, &po, &p);
            if (st == GPUCORE_ERR_OUT_OF_MEMORY) continue;
            CHECK_LM(st);
            fits[n++] = (struct fit){pols[k], micro, po.grad_accum, p.peak_bytes,
                                     100.0 / 3.0 * (double)p.recomputed_segments / (double)p.segments + 5.0 * halvings};
        }
        if (micro == 1) break;
    }
    for (int i = 1; i < n; i++) /* cheapest first */
        for (int j = i; j > 0 && fits[j].cost < fits[j - 1].cost; j--) {
            struct fit t = fits[j]; fits[j] = fits[j - 1]; fits[j - 1] = t;
        }
    if (!n) {
        printf("nothing fits in %.2f MiB: not even micro-batch 1 with every layer recomputed; try --lora with a "
               "smaller rank, --quantize nf4, --dtype bf16 or a shorter --seq\n", limit / 1048576.0);
        return 3;
    }
    printf("settings that fit in %.2f MiB, cheapest first:\n", limit / 1048576.0);
    printf("  %-19s %8s %12s %12s %10s\n", "--checkpoint-policy", "--batch", "--grad-accum", "peak MiB", "recompute");
    for (int i = 0; i < n; i++)
        printf("  %-19s %8lld %12lld %12.2f %9.0f%%\n", fits[i].pol, (long long)fits[i].micro, (long long)fits[i].accum,
               fits[i].peak / 1048576.0, fits[i].cost);
    return 0;
}

static int cmd_plan(const lm_opts *o)
{
    gpucore_lm_plan_options po;
    gpucore_lm_plan_options_init(&po);
    po.batch = o->batch;
    po.seq = o->seq;
    po.dtype = parse_dtype(o->dtype);
    po.device_type = !strncmp(o->device, "cuda", 4) ? GPUCORE_DEVICE_CUDA : GPUCORE_DEVICE_CPU;
    po.grad_accum = o->grad_accum;
    char tbuf[1024];
    const char *targets[MAX_TARGETS];
    static const char *const gpt2[] = {"c_attn"}, *const others[] = {"q_proj", "v_proj"};
    int64_t nt = 0;
    split_targets(o->targets, tbuf, sizeof tbuf, targets, &nt);
    if (o->full) {
        po.full_finetune = 1;
    } else {
        po.lora_r = o->lora_r;
        po.lora_dropout = o->dropout;
        po.lora_targets = nt ? targets : config_is_gpt2(o->model) ? gpt2 : others;
        po.n_lora_targets = nt ? nt : config_is_gpt2(o->model) ? 1 : 2;
    }
    if (o->quantize) {
        po.quant_format = parse_quant(o->quantize);
        if (po.quant_format == -2) {
            fprintf(stderr, "gpucore-lm: --quantize %s: nf4, fp4, int8, q4_0, q4_1, q5_0, q5_1 or q8_0\n", o->quantize);
            return 2;
        }
    }
    if (o->zero > 0) po.zero_stage = o->zero;
    train_policy pol;
    if (train_parse_policy(o->policy, &pol)) {
        fprintf(stderr, "gpucore-lm: --checkpoint-policy %s: none, all, sqrt, every:K or budget:BYTES\n", o->policy);
        return 2;
    }
    gpucore_lm_memory_plan p;
    if (pol.kind == GPUCORE_CKPT_BUDGET) { /* as finetune: an activation budget above the model and its gradients */
        if (plan_one(o, &po, &p)) return 1;
        pol.param += p.persistent_bytes - p.bytes[GPUCORE_MEM_OPTIMIZER];
    }
    po.ckpt_policy = pol.kind;
    po.ckpt_param = pol.param;
    if (plan_one(o, &po, &p)) return 1;
    print_plan(o, &po, &p);
    if (!o->device_memory) return 0;
    const int64_t limit = parse_size(o->device_memory);
    if (limit <= 0) {
        fprintf(stderr, "gpucore-lm: --device-memory %s: give bytes or a size such as 24GiB, 8000MB\n", o->device_memory);
        return 2;
    }
    return plan_fits(o, po, limit);
}

int main(int argc, char **argv)
{
    lm_opts o;
    if (parse_args(argc, argv, &o)) {
        usage();
        return 2;
    }
    if (!strcmp(o.cmd, "generate")) return cmd_generate(&o);
    if (!strcmp(o.cmd, "eval")) return cmd_eval(&o);
    if (!strcmp(o.cmd, "tokenize")) return cmd_tokenize(&o);
    if (!strcmp(o.cmd, "chat")) return cmd_chat(&o);
    if (!strcmp(o.cmd, "plan")) return cmd_plan(&o);
    return o.text ? with_text_data(&o, cmd_finetune) : cmd_finetune(&o);
}
