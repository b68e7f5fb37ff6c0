/// Why a PostgreSQL store refused or failed; each message says what to do.
public enum PostgresStoreError: Error, Equatable, Sendable, CustomStringConvertible {
    case badURL(String, String)
    case unreachable(String, String)
    case newerSchema(found: Int, supported: Int)
    case duplicateID(String)
    case unknownCollection(String)
    case database(String)

    public var description: String {
        switch self {
        case .badURL(let url, let reason): "invalid database URL \(url): \(reason)"
        case .unreachable(let url, let reason): "cannot connect to \(url): \(reason)"
        case .newerSchema(let found, let supported): "the database holds DeltaSnap schema version \(found), newer than this release's \(supported); upgrade deltasnap"
        case .duplicateID(let id): "record \"\(id)\" appears twice in one write"
        case .unknownCollection(let name): "collection \"\(name)\" does not exist"
        case .database(let message): "PostgreSQL: \(message)"
        }
    }
}
