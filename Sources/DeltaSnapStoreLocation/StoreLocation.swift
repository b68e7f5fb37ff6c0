import DeltaSnapPostgresStore
import DeltaSnapStore

/// Where a store lives, as every `--db` option names it: an SQLite file path or a
/// PostgreSQL URL (`postgres://user[:password]@host[:port]/database`, optionally with a
/// streaming replica to read from). Opening it is ``open(configuration:readOnly:logger:)``,
/// the one place that knows every kind of store.
///
/// ```swift
/// let location = try StoreLocation("postgres://deltasnap@127.0.0.1:5432/deltasnap")
/// print(location)   // the URL without its password
/// ```
package enum StoreLocation: Sendable, Equatable, CustomStringConvertible {
    /// An SQLite file, created on first use.
    case sqlite(path: String)
    /// A PostgreSQL primary, and a read replica when given.
    case postgres(url: String, readReplica: String?)

    /// Parses what `--db` (and `--read-db`) take.
    package init(_ text: String, readReplica: String? = nil) throws(StoreError) {
        if PostgresURL.isPostgresURL(text) {
            if let readReplica, !PostgresURL.isPostgresURL(readReplica) {
                throw .badLocation(readReplica, "a read replica is a postgres:// URL")
            }
            self = .postgres(url: text, readReplica: readReplica)
        } else {
            guard readReplica == nil else {
                throw .badLocation(text, "a read replica (--read-db) needs a PostgreSQL primary: --db postgres://…")
            }
            guard !text.isEmpty else { throw .badLocation(text, "give an SQLite file path or a postgres:// URL") }
            self = .sqlite(path: text)
        }
    }

    /// The location as printed in logs and messages: never a password.
    package var description: String {
        switch self {
        case .sqlite(let path): path
        case .postgres(let url, _): PostgresURL.withoutPassword(url)
        }
    }
}
