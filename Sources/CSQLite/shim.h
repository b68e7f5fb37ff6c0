#ifndef DELTASNAP_CSQLITE_SHIM_H
#define DELTASNAP_CSQLITE_SHIM_H
#include <sqlite3.h>
#endif
