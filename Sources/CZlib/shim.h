#ifndef DELTASNAP_CZLIB_SHIM_H
#define DELTASNAP_CZLIB_SHIM_H
#include <zlib.h>

// deflateInit2/inflateInit2 are macros (they pass ZLIB_VERSION and sizeof(z_stream)),
// which Swift cannot call: wrap them in functions.
static inline int deltasnap_deflateInit2(z_streamp strm, int level, int windowBits) {
    return deflateInit2(strm, level, Z_DEFLATED, windowBits, 8, Z_DEFAULT_STRATEGY);
}

static inline int deltasnap_inflateInit2(z_streamp strm, int windowBits) {
    return inflateInit2(strm, windowBits);
}
#endif
