/// Collection names: `[a-z0-9][a-z0-9_-]{0,63}`, safe in a URL path and a file name.
public enum CollectionName {
    /// Whether `name` is a valid collection name.
    public static func isValid(_ name: String) -> Bool {
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
    public static func validate(_ name: String) throws(InvalidCollectionName) {
        guard isValid(name) else { throw InvalidCollectionName(name: name) }
    }
}

public struct InvalidCollectionName: Error, Equatable, Sendable, CustomStringConvertible {
    public var name: String
    public var description: String {
        "invalid collection name \"\(name)\": use 1 to 64 characters of a-z, 0-9, '_' and '-', starting with a letter or digit"
    }
}
