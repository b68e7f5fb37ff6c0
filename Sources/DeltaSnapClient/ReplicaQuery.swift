import DeltaSnapCore

/// A filter-and-order query over a replica's records, by fields of their JSON, run by
/// SQLite's built-in JSON functions — fast on fields the app indexed with
/// ``DeltaSnapReplica/createIndex(on:)``. Pending local writes are part of what it sees.
///
/// ```swift
/// try await replica.createIndex(on: "city")                     // once, e.g. at first start
/// let lisbon = try await replica.query(ReplicaQuery()
///     .filter("city", .equal, .string("Lisbon"))
///     .filter("price", .lessThan, .number("20"))
///     .order(by: "price")
///     .limit(50))
/// ```
///
/// A field is a dotted path of names (`owner.email`): letters, digits and `_`, not starting
/// with a digit. Comparisons follow SQLite's: numbers compare as numbers, strings by bytes;
/// a record without the field never matches a comparison (`.isNull` finds it).
public struct ReplicaQuery: Sendable, Equatable {
    /// How a field is compared with a value.
    public enum Comparison: String, Sendable, Equatable {
        case equal = "="
        case notEqual = "!="
        case lessThan = "<"
        case lessThanOrEqual = "<="
        case greaterThan = ">"
        case greaterThanOrEqual = ">="
    }

    public enum Condition: Sendable, Equatable {
        case compare(Comparison, JSONValue)
        /// The field is missing or `null`.
        case isNull
    }

    public struct Filter: Sendable, Equatable {
        public var field: String
        public var condition: Condition
    }

    public struct Order: Sendable, Equatable {
        public var field: String
        public var descending: Bool
    }

    /// A field name that cannot be queried.
    public struct InvalidField: Error, CustomStringConvertible {
        public var field: String
        public var description: String {
            "cannot query field \"\(field)\": use dotted names of letters, digits and '_' (e.g. owner.email)"
        }
    }

    /// A filter value that is not a string, number, boolean or null.
    public struct InvalidValue: Error, CustomStringConvertible {
        public var value: JSONValue
        public var description: String { "a query compares fields with strings, numbers, booleans or null, not objects or arrays" }
    }

    public private(set) var filters: [Filter] = []
    public private(set) var orders: [Order] = []
    public private(set) var maximumCount: Int?

    public init() {}

    /// Records whose `field` compares to `value` (a string, number or boolean).
    public func filter(_ field: String, _ comparison: Comparison = .equal, _ value: JSONValue) -> ReplicaQuery {
        var copy = self
        copy.filters.append(Filter(field: field, condition: .compare(comparison, value)))
        return copy
    }

    /// Records where `field` is missing or `null`.
    public func whereNull(_ field: String) -> ReplicaQuery {
        var copy = self
        copy.filters.append(Filter(field: field, condition: .isNull))
        return copy
    }

    /// Orders by `field` (then by id, so the order is total).
    public func order(by field: String, descending: Bool = false) -> ReplicaQuery {
        var copy = self
        copy.orders.append(Order(field: field, descending: descending))
        return copy
    }

    /// At most `count` records.
    public func limit(_ count: Int) -> ReplicaQuery {
        var copy = self
        copy.maximumCount = max(0, count)
        return copy
    }

    /// The SQL expression for `field` in a row whose canonical JSON is `column`: the exact
    /// text an index is created on, so SQLite's planner can use the index. `id` is the
    /// primary key itself.
    static func expression(_ field: String, column: String) throws(InvalidField) -> String {
        guard isValidField(field) else { throw InvalidField(field: field) }
        if field == Record.idKey { return "id" }
        return "json_extract(CAST(\(column) AS TEXT), '$.\(field)')"
    }

    static func isValidField(_ field: String) -> Bool {
        let parts = field.split(separator: ".", omittingEmptySubsequences: false)
        guard !parts.isEmpty, field.utf8.count <= 256 else { return false }
        return parts.allSatisfy { part in
            guard let first = part.utf8.first, !(UInt8(ascii: "0")...UInt8(ascii: "9")).contains(first) else { return false }
            return part.utf8.allSatisfy { byte in
                switch byte {
                case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "_"): true
                default: false
                }
            }
        }
    }
}
