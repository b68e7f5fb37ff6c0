import DeltaSnapCore

/// What went wrong in a store (SQLite or PostgreSQL), in words a data owner can act on.
/// The server answers each case once (`404`, `503` + `Retry-After`, …); the CLI prints it.
public enum StoreError: Error, Equatable, Sendable, CustomStringConvertible {
    case unknownCollection(String)
    case duplicateID(String)
    case invalidEpoch(String)
    case notADeltaSnapStore(path: String, reason: String)
    /// `--db` names no store this release can open.
    case badLocation(String, String)
    /// The database cannot be reached, is shutting down or restarting: retry shortly.
    case unavailable(String, String)
    /// The database holds a newer schema than this release knows.
    case newerSchema(found: Int, supported: Int)
    /// A write to a store opened read-only.
    case readOnly(String)
    /// The data kept changing under an operation that needs a stable read: retry.
    case busy(String)
    /// The database refused an operation (its own message).
    case database(String)

    public var description: String {
        switch self {
        case .unknownCollection(let name): "collection \"\(name)\" does not exist"
        case .duplicateID(let id): "duplicate id \"\(id)\": each record may appear once per write"
        case .invalidEpoch(let epoch): "invalid epoch \"\(epoch)\": use 16 lowercase hex digits"
        case .notADeltaSnapStore(let path, let reason): "\(path) is not a DeltaSnap store: \(reason)"
        case .badLocation(let location, let reason): "invalid database URL \(location): \(reason)"
        case .unavailable(let location, let reason): "cannot reach PostgreSQL at \(location): \(reason)"
        case .newerSchema(let found, let supported):
            "the database holds DeltaSnap schema version \(found), newer than this release's \(supported); upgrade deltasnap"
        case .readOnly(let path): "\(path) was opened read-only; open it for writing to change it"
        case .busy(let message): message
        case .database(let message): "PostgreSQL: \(message)"
        }
    }
}
