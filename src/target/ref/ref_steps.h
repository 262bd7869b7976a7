/* One step of the oracle alone, for diagnosis: the step reads and writes the named buffers of
 * st (plan/steps.h). The attention step first stores st->k, st->v as the cache rows of
 * positions pos0..pos0+S-1; earlier positions must already be in the cache. */
#ifndef TS_TARGET_REF_STEPS_H
#define TS_TARGET_REF_STEPS_H
#include "plan/steps.h"
#include "tessera.h"

ts_status ts_ref_step(ts_ref *r, int layer, ts_step step, ts_step_state *st, int S, int pos0, ts_error *err);

#endif
