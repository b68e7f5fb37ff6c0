/// The checksum of a collection's whole visible state: the sum, modulo 2^64, of the XXH64
/// hash of every visible record's canonical bytes.
///
/// A sum is order-independent and can be maintained in O(changed records): add a record's
/// hash when it appears, subtract it when it goes. Written as 16 lowercase hex digits.
///
/// ```swift
/// var checksum = StateChecksum.empty
/// checksum.add(record)            // a record became visible
/// checksum.remove(oldRecord)      // a record was hidden or replaced
/// checksum.description            // "9f3c…" (16 hex digits)
/// ```
public struct StateChecksum: Hashable, Sendable, CustomStringConvertible {
    public var value: UInt64

    public static let empty = StateChecksum(value: 0)

    public init(value: UInt64) { self.value = value }

    /// Parses 16 hex digits; `nil` for anything else.
    public init?(_ text: String) {
        guard text.utf8.count == 16, let value = UInt64(text, radix: 16) else { return nil }
        self.value = value
    }

    package mutating func add(hash: UInt64) { value &+= hash }
    package mutating func remove(hash: UInt64) { value &-= hash }
    package mutating func add(_ record: Record) { add(hash: record.hash) }
    package mutating func remove(_ record: Record) { remove(hash: record.hash) }

    public var description: String {
        let hex = String(value, radix: 16)
        return String(repeating: "0", count: 16 - hex.utf8.count) + hex
    }
}
