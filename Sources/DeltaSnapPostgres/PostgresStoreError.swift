import PostgresNIO

/// Why a PostgreSQL store refused or failed; each message says what to do.
public enum PostgresStoreError: Error, Equatable, Sendable, CustomStringConvertible {
    case badURL(String, String)
    /// The server cannot be reached, is shutting down or restarting: retry shortly.
    case unreachable(String, String)
    case newerSchema(found: Int, supported: Int)
    case unknownCollection(String)
    case database(String)

    public var description: String {
        switch self {
        case .badURL(let url, let reason): "invalid database URL \(url): \(reason)"
        case .unreachable(let url, let reason): "cannot reach PostgreSQL at \(url): \(reason)"
        case .newerSchema(let found, let supported): "the database holds DeltaSnap schema version \(found), newer than this release's \(supported); upgrade deltasnap"
        case .unknownCollection(let name): "collection \"\(name)\" does not exist"
        case .database(let message): "PostgreSQL: \(message)"
        }
    }

    /// Whether the database is (perhaps briefly) out of reach, rather than refusing this
    /// operation: the server answers `503` with `Retry-After` and reconnects by itself.
    public var isUnavailable: Bool {
        if case .unreachable = self { return true }
        return false
    }

    /// A one-line reason for `error`, without postgres-nio's multi-line dumps.
    static func reason(_ error: any Error) -> String {
        if let error = error as? PSQLError {
            if let message = error.serverInfo?[.message] { return message }
            return error.code.description
        }
        return String(describing: error)
    }
}
