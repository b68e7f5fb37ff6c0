/// Where a store lives, as every `--db` option names it: an SQLite file path or a
/// PostgreSQL URL (`postgres://user[:password]@host[:port]/database`, optionally with a
/// streaming replica to read from). Opening it is `StoreFactory.open` (DeltaSnapStores),
/// the one place that knows every kind of store.
///
/// ```swift
/// let location = try StoreLocation("postgres://deltasnap@127.0.0.1:5432/deltasnap")
/// print(location)   // the URL without its password
/// ```
public enum StoreLocation: Sendable, Equatable, CustomStringConvertible {
    /// An SQLite file, created on first use.
    case sqlite(path: String)
    /// A PostgreSQL primary, and a read replica when given.
    case postgres(url: String, readReplica: String?)

    /// Parses what `--db` (and `--read-db`) take.
    public init(_ text: String, readReplica: String? = nil) throws(StoreError) {
        if Self.isPostgresURL(text) {
            if let readReplica, !Self.isPostgresURL(readReplica) {
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

    /// Whether `text` names a PostgreSQL server rather than an SQLite file.
    static func isPostgresURL(_ text: String) -> Bool {
        text.hasPrefix("postgres://") || text.hasPrefix("postgresql://")
    }

    /// The location as printed in logs and messages: never a password.
    public var description: String {
        switch self {
        case .sqlite(let path): path
        case .postgres(let url, _): Self.withoutPassword(url)
        }
    }

    /// `url` with any password between the user and `@` removed.
    public static func withoutPassword(_ url: String) -> String {
        guard let scheme = url.range(of: "://") else { return url }
        let authority = url[scheme.upperBound...].prefix { $0 != "/" && $0 != "?" }
        guard let at = authority.lastIndex(of: "@") else { return url }
        let userInfo = url[scheme.upperBound..<at]
        guard let colon = userInfo.firstIndex(of: ":") else { return url }
        return String(url[..<colon]) + String(url[at...])
    }
}
