/* Internal view of the synth presets, for tests and tools that need a preset's config
 * without writing its weights. */
#ifndef TS_MODEL_SYNTH_H
#define TS_MODEL_SYNTH_H
#include "model/config.h"

/* The ts_config that `tessera synth NAME` would write (parsed back through the real
 * config.json reader). */
ts_status ts_synth_preset_config(const char *name, int vocab_override, ts_config *out,
                                 ts_error *err);

#endif
