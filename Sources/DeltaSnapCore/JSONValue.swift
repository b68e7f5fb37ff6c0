import Foundation

/// A parsed JSON value, kept in the shape DeltaSnap needs for canonical bytes.
///
/// Numbers keep their literal text (`1.0` stays `1.0`, `12345678901234567890` loses no
/// digit), and object members are sorted by the UTF-8 bytes of their keys as they are parsed,
/// so writing a value back with ``CanonicalJSON`` is deterministic.
///
/// ```swift
/// let value = try JSONReader(bytes: Array(#"{"b":1,"a":[true,null]}"#.utf8)).readValue()
/// CanonicalJSON.string(value) // {"a":[true,null],"b":1}
/// ```
public enum JSONValue: Hashable, Sendable {
    case null
    case bool(Bool)
    /// The number's literal text, validated against the JSON grammar.
    case number(String)
    case string(String)
    case array([JSONValue])
    /// Members sorted by the UTF-8 bytes of their keys; keys are unique.
    case object([JSONMember])

    /// How deeply arrays and objects nest in this value (a scalar is 0, `{}` is 1).
    package var depth: Int {
        switch self {
        case .array(let elements): 1 + (elements.map(\.depth).max() ?? 0)
        case .object(let members): 1 + (members.map(\.value.depth).max() ?? 0)
        default: 0
        }
    }

    /// The value of `key` when this is an object holding it.
    public subscript(key: String) -> JSONValue? {
        guard case .object(let members) = self else { return nil }
        return members.first(where: { $0.key == key })?.value
    }
}

/// One `"key": value` pair of a JSON object.
public struct JSONMember: Hashable, Sendable {
    public var key: String
    public var value: JSONValue

    public init(_ key: String, _ value: JSONValue) {
        self.key = key
        self.value = value
    }
}

extension String {
    /// Byte-wise ordering of the UTF-8 encodings: the order canonical JSON sorts keys in
    /// (Swift's `<` on `String` follows Unicode canonical equivalence, not bytes).
    @inlinable
    package func utf8Precedes(_ other: String) -> Bool {
        // Native strings are contiguous UTF-8: one memcmp instead of a generic byte loop
        // (sorting a view's thousand entries spent most of its time there).
        let fast = utf8.withContiguousStorageIfAvailable { mine in
            other.utf8.withContiguousStorageIfAvailable { theirs -> Bool in
                let common = Swift.min(mine.count, theirs.count)
                let order = common == 0 ? 0 : memcmp(mine.baseAddress!, theirs.baseAddress!, common)
                return order != 0 ? order < 0 : mine.count < theirs.count
            }
        }
        if let fast, let result = fast { return result }
        return utf8.lexicographicallyPrecedes(other.utf8)
    }
}
