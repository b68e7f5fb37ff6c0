import Foundation

/// A replica file opened for another collection, or another server, than the one it syncs
/// with. Its records and queued writes belong to that collection on that server: syncing it
/// elsewhere would push the writes to the wrong place and replace the data.
///
/// ```swift
/// do { _ = try DeltaSnapReplica(path: "notes.sqlite", collection: "other", url: otherURL) }
/// catch let error as ReplicaBindingError { print(error) }   // names both, says what to do
/// ```
public enum ReplicaBindingError: Error, Equatable, CustomStringConvertible {
    /// The replica holds collection `held`; it was opened for `requested`.
    case otherCollection(path: String, held: String, requested: String)
    /// The replica syncs with the collection URL `held` (another scheme or host); it was
    /// opened with `requested`.
    case otherServer(path: String, held: String, requested: String)

    public var description: String {
        switch self {
        case .otherCollection(let path, let held, let requested):
            "\(path) is the replica of collection \"\(held)\", not \"\(requested)\": use another replica file for \"\(requested)\""
        case .otherServer(let path, let held, let requested):
            "\(path) syncs with \(held), not \(requested): use another replica file, or, if the server moved, accept the new URL (`--rebind`, `acceptingServerChange: true`)"
        }
    }

    /// Throws when `state` is bound to another collection, or to another server (another
    /// scheme or host) unless the caller accepts a server change. The port and path may
    /// change: a server restarted on another port, or behind another path prefix, is the same
    /// server to its clients.
    static func check(_ state: ReplicaState, path: String, collection: String, url: URL, acceptingServerChange: Bool) throws {
        if let held = state.collection, held != collection {
            throw ReplicaBindingError.otherCollection(path: path, held: held, requested: collection)
        }
        if !acceptingServerChange, let held = state.server, !isSameServer(held, url) {
            throw ReplicaBindingError.otherServer(path: path, held: held, requested: url.absoluteString)
        }
    }

    /// Whether `held` and `url` name one server: the same scheme and host.
    static func isSameServer(_ held: String, _ url: URL) -> Bool {
        guard let heldURL = URL(string: held) else { return false }
        return heldURL.scheme?.lowercased() == url.scheme?.lowercased() && heldURL.host?.lowercased() == url.host?.lowercased()
    }
}
