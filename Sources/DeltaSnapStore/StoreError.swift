import DeltaSnapCore

/// What went wrong in the store, in words a data owner can act on.
public enum StoreError: Error, Equatable, Sendable, CustomStringConvertible {
    case unknownCollection(String)
    case duplicateID(String)
    case invalidEpoch(String)
    case notADeltaSnapStore(path: String, reason: String)

    public var description: String {
        switch self {
        case .unknownCollection(let name): "collection \"\(name)\" does not exist"
        case .duplicateID(let id): "duplicate id \"\(id)\": each record may appear once per write"
        case .invalidEpoch(let epoch): "invalid epoch \"\(epoch)\": use 16 lowercase hex digits"
        case .notADeltaSnapStore(let path, let reason): "\(path) is not a DeltaSnap store: \(reason)"
        }
    }
}
