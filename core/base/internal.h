/*
 * internal.h — marks a function shared between the core's own files (one
 * file defines it, another calls it) as internal: hidden from libtessera's
 * exported symbols, so that neither plugins nor programs can link to it.
 */
#ifndef TESSERA_CORE_INTERNAL_H
#define TESSERA_CORE_INTERNAL_H

#define TS_INTERNAL __attribute__((visibility("hidden")))

#endif /* TESSERA_CORE_INTERNAL_H */
