/* trajectory.svg: the optimization trajectories of phases 4 (prefill) and 5 (decode) as two
 * bar charts, tok/s after each optimization with +-1 standard deviation whiskers. */
#ifndef TS_DEPLOY_TRAJECTORY_SVG_H
#define TS_DEPLOY_TRAJECTORY_SVG_H
#include <jansson.h>

#include "tessera.h"

/* p4, p5: the phase reports (either may be NULL); title: the model's name. */
ts_status ts_trajectory_svg(const json_t *p4, const json_t *p5, const char *title, const char *path, ts_error *err);

#endif
