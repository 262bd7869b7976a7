/* What a ref session costs in memory before it exists (model/memory.h): `tessera inspect`
 * and `tessera logits` report it and refuse a request the machine cannot hold. */
#ifndef TS_TARGET_REF_MEM_H
#define TS_TARGET_REF_MEM_H
#include "model/memory.h"
#include "model/model.h"

/* A session of max_seq positions, forward calls of n_tokens (the scratch is sized for
 * min(n_tokens, 64)-token chunks), and n_threads as ts_ref_set_threads (0: all cores; the
 * per-thread rows exist only above one thread). Outputs are the caller's: left 0. */
void ts_ref_mem_need(const ts_model *m, int max_seq, int n_tokens, int n_threads, ts_mem_need *out);

#endif
