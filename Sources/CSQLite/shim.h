#ifndef DELTASNAP_CSQLITE_SHIM_H
#define DELTASNAP_CSQLITE_SHIM_H
#include <sqlite3.h>

/// `sqlite3_config` is variadic, which Swift cannot call: its one use here, wrapped.
/// Turns off SQLite's memory statistics, which take a process-wide mutex on every
/// allocation; DeltaSnap never reads them. Only takes effect before SQLite's first use.
static inline int deltasnap_sqlite3_disable_memory_statistics(void) {
    return sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0);
}
#endif
