/*
 * binder.h — every placement of the layout plan bound to something that
 * implements it, or start-up stops.
 *
 * After the plugins' transforms, each (tensor, axis, placement) of the plan
 * must be implemented either by one of the core's generic rules or by a
 * provider a plugin registered:
 *
 *   the batch (data.tokens, data.targets)
 *     R      every rank of the axis reads the same sequences
 *     S(0)   the axis cuts the batch: each rank reads its block of sequences,
 *            and the loss is normalised over all of them (the trainer)
 *     S(1)   the axis cuts every sequence: bound when a plugin provides
 *            attention over the axis (TS_PROVIDE_ATTENTION)
 *   the hidden state (act.x)
 *     on an axis that cuts the batch: R or the batch's own placement (each
 *     rank's rows are its own sequences);
 *     on an axis whose ranks read the same tokens: R, or S(1) (the sequence
 *     cut between the layers' regions; the layers gather and scatter it)
 *   parameters
 *     R      a replica (its gradient is partial where the rows are cut, and
 *            a gradient reduction sums it: the core's, or a plugin's)
 *     S(d)   on an axis whose ranks read the same tokens: a block the layers
 *            compute with (column and row parallel products, a vocabulary-
 *            cut embedding; layers.h checks the rest when the model is built);
 *            on an axis that cuts the batch: bound when a plugin provides
 *            parameter storage there (TS_PROVIDE_PARAM_STORAGE: it keeps the
 *            block and presents the parameter whole to the layers)
 *   the pipeline axis: stages come from the plan's stage field; every
 *     placement over it stays R.
 *   Finally, an axis a plugin claims with more than one rank must be used by
 *   some placement (or be the pipeline axis): otherwise all its ranks would
 *   do the same work and nothing would implement the axis. (Axes no plugin
 *   claims are derived, like the expert mesh's etp and edp.)
 *
 * Anything else is unbound: start-up stops with TS_ERR_PLUGIN and a message
 * naming the tensor, the axis, the placement and the plugin transform that
 * set it. `tessera plan` runs the same binder (inside its dry run).
 *
 * What it does not do: check shapes the layers need (heads, divisibility);
 * the model's layers do when it is built.
 */
#ifndef TESSERA_CORE_BINDER_H
#define TESSERA_CORE_BINDER_H

#include "plugin.h"
#include "tessera/layout.h"
#include "tessera/mesh.h"

#ifdef __cplusplus
extern "C" {
#endif

ts_status ts_bind(const ts_layout_plan *plan, const ts_mesh *mesh, const ts_plugins *reg);

#ifdef __cplusplus
}
#endif
#endif /* TESSERA_CORE_BINDER_H */
