/*
 * mesh_types.h — the mesh's types: the two mesh kinds, the opaque mesh and
 * the limits on axes and their names.
 *
 * This header is part of the SDK installed under include/tessera/. It
 * declares no function of libtessera; mesh.h includes it and declares the
 * library's mesh functions (and the SDK 1.0-1.1 inline wrappers that call
 * them), for programs that link libtessera.
 */
#ifndef TESSERA_MESH_TYPES_H
#define TESSERA_MESH_TYPES_H

#ifdef __cplusplus
extern "C" {
#endif

/* The two meshes that cover the world. */
typedef enum ts_mesh_kind {
    TS_MESH_DENSE = 0,  /* attention, dense MLP, embeddings */
    TS_MESH_EXPERT = 1, /* the experts of MoE layers        */
} ts_mesh_kind;

/* Opaque: the validated axes, the normalized order and the strides of both
 * meshes. Immutable after creation, so one mesh may be read from any thread. */
typedef struct ts_mesh ts_mesh;

/* The most axes of one mesh definition, and the bytes of a name (NUL
 * included). Names are [a-z][a-z0-9_]*, case-insensitive on input. */
#define TS_MESH_MAX_AXES 16
#define TS_MESH_NAME_MAX 16

#ifdef __cplusplus
}
#endif
#endif /* TESSERA_MESH_TYPES_H */
