/* `tessera quantize`: a model (Hugging Face directory or GGUF) written as a GGUF v3 file with
 * Q8_0, Q4_0 or BF16 weight matrices that tessera and llama.cpp both load (docs/quantization.md). Here,
 * above model/ and tok/, because a directory's tokenizer.json becomes the file's vocabulary. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"
#include "io/gguf.h"
#include "model/gguf_export.h"
#include "model/model.h"
#include "runtime/quantize_file.h"
#include "tok/tokenizer.h"

static int same_file(const char *a, const char *b) {
    struct stat sa, sb;
    return stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

ts_status ts_quantize_file(const char *model, const char *out, ts_dtype type, int force, ts_quantize_report *rep,
                           ts_error *err) {
    ts_quantize_report dummy;
    if (!rep) rep = &dummy;
    memset(rep, 0, sizeof *rep);
    if (type != TS_DTYPE_Q8_0 && type != TS_DTYPE_Q4_0 && type != TS_DTYPE_BF16)
        return ts_fail(err, TS_ERR_ARG, "quantize: type %s, expected Q8_0, Q4_0 or BF16", ts_dtype_name(type));
    struct stat so;
    if (stat(out, &so) == 0) {
        if (S_ISDIR(so.st_mode))
            return ts_fail(err, TS_ERR_ARG, "%s: is a directory, expected the path of the .gguf file to write", out);
        if (same_file(model, out))
            return ts_fail(err, TS_ERR_ARG, "%s: is the input model itself, expected a different output file (the "
                           "input is never modified)", out);
        if (!force)
            return ts_fail(err, TS_ERR_ARG, "%s: exists, expected a new file (pass --force to overwrite it)", out);
    }
    ts_model *m;
    ts_status s = ts_model_open(model, &m, err);
    if (s) return s;
    ts_gguf_writer *w = ts_gguf_writer_new();
    if (!w) s = ts_fail(err, TS_ERR_NOMEM, "out of memory");
    /* a directory's tokenizer.json, padded to the embedding's rows, before the tensors */
    if (!s && !m->gguf) s = ts_tok_gguf_write(w, m->dir, m->cfg.n_vocab, m->cfg.eos_ids, m->cfg.n_eos, NULL, &rep->pre,
                                                err);
    if (!s) s = ts_gguf_export(w, m, type, rep, err);
    char *tmp = malloc(strlen(out) + 32);
    if (!s && !tmp) s = ts_fail(err, TS_ERR_NOMEM, "out of memory");
    if (!s) {
        sprintf(tmp, "%s.tmp%ld", out, (long)getpid());
        s = ts_gguf_writer_save(w, tmp, err);
        if (!s && rename(tmp, out) != 0)
            s = ts_fail(err, TS_ERR_IO, "%s: cannot rename the written file to it: %s", out, strerror(errno));
        if (s) unlink(tmp);
    }
    if (!s) { /* what was written, read back: a file that does not open is a failure here */
        ts_model *back;
        s = ts_model_open(out, &back, err);
        if (s) ts_error_prefix(err, "the written file does not open as a model");
        else {
            rep->chat_template = ts_gguf_find(back->gguf, "tokenizer.chat_template") != NULL;
            ts_model_close(back);
        }
    }
    free(tmp);
    ts_gguf_writer_free(w);
    ts_model_close(m);
    return s;
}
