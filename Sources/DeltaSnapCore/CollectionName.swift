/// Collection names: `[a-z0-9][a-z0-9_-]{0,63}`, safe in a URL path and a file name.
package enum CollectionName {
    /// Whether `name` is a valid collection name (not a partition: see ``CollectionPath``).
    package static func isValid(_ name: String) -> Bool {
        guard (1...64).contains(name.utf8.count) else { return false }
        for (index, byte) in name.utf8.enumerated() {
            let lowerOrDigit = (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(byte) || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte)
            if lowerOrDigit { continue }
            if index > 0 && (byte == UInt8(ascii: "_") || byte == UInt8(ascii: "-")) { continue }
            return false
        }
        return true
    }

    /// Throws a message a user can act on when `name` is not valid.
    package static func validate(_ name: String) throws(InvalidCollectionName) {
        guard isValid(name) else { throw InvalidCollectionName(name: name) }
    }
}

/// Partition keys: 1–128 of `A-Za-z0-9._:@-` (a user id, an e-mail address, a set number),
/// except `.` and `..`, which URL libraries remove from a path.
package enum PartitionKey {
    package static func isValid(_ key: String) -> Bool {
        guard (1...128).contains(key.utf8.count), key != ".", key != ".." else { return false }
        return key.utf8.allSatisfy { byte in
            (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(byte) || (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(byte)
                || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte)
                || byte == UInt8(ascii: ".") || byte == UInt8(ascii: "_") || byte == UInt8(ascii: ":")
                || byte == UInt8(ascii: "@") || byte == UInt8(ascii: "-")
        }
    }
}

/// What a store keeps a token line for: a collection `NAME`, or one partition of it,
/// `NAME/KEY` (`attempts/alice`, `sets/8271`). A partition has everything a collection has
/// (versions, deltas, pushes, history) and is created by its first write; in a store it is
/// one more row, named by its path.
///
/// ```swift
/// let path = CollectionPath("sets/8271")!   // path.name == "sets", path.key == "8271"
/// CollectionPath("countries")?.key          // nil: a whole collection
/// ```
package struct CollectionPath: Hashable, Sendable, CustomStringConvertible {
    /// The collection's name.
    package var name: String
    /// The partition's key; nil for a collection that is not partitioned.
    package var key: String?

    /// Parses `NAME` or `NAME/KEY`; nil when either part is invalid.
    package init?(_ path: String) {
        if let slash = path.utf8.firstIndex(of: UInt8(ascii: "/")) {
            let name = String(path[..<slash])
            let key = String(path[path.index(after: slash)...])
            guard CollectionName.isValid(name), PartitionKey.isValid(key) else { return nil }
            self.name = name
            self.key = key
        } else {
            guard CollectionName.isValid(path) else { return nil }
            name = path
            key = nil
        }
    }

    /// `name/key`, both already valid.
    package init?(name: String, key: String?) {
        guard CollectionName.isValid(name), key.map(PartitionKey.isValid) ?? true else { return nil }
        self.name = name
        self.key = key
    }

    /// `NAME` or `NAME/KEY`: how stores, bodies and the index name it.
    package var description: String { key.map { "\(name)/\($0)" } ?? name }

    /// Whether `path` is a valid `NAME` or `NAME/KEY`.
    package static func isValid(_ path: String) -> Bool { CollectionPath(path) != nil }

    /// Whether `path` names a partition (it holds a `/`); says nothing of its validity.
    package static func isPartition(_ path: String) -> Bool { path.utf8.contains(UInt8(ascii: "/")) }

    /// Throws a message a user can act on when `path` is neither a valid `NAME` nor `NAME/KEY`.
    package static func validate(_ path: String) throws(InvalidCollectionName) {
        guard isValid(path) else { throw InvalidCollectionName(name: path) }
    }

    /// The path of the collection endpoint: `/v1/collections/NAME` or
    /// `/v1/collections/NAME/partitions/KEY` (both parts need no percent-encoding).
    package var urlPath: String {
        key.map { "/v1/collections/\(name)/partitions/\($0)" } ?? "/v1/collections/\(name)"
    }
}

package struct InvalidCollectionName: Error, Equatable, Sendable, CustomStringConvertible {
    package var name: String

    package init(name: String) {
        self.name = name
    }
    package var description: String {
        if CollectionPath.isPartition(name) {
            return "invalid partition \"\(name)\": use NAME/KEY, NAME of 1 to 64 characters of a-z, 0-9, '_' and '-' (starting with a letter or digit), KEY of 1 to 128 characters of A-Z, a-z, 0-9, '.', '_', ':', '@' and '-'"
        }
        return "invalid collection name \"\(name)\": use 1 to 64 characters of a-z, 0-9, '_' and '-', starting with a letter or digit"
    }
}
