import DeltaSnapCore

/// A field's value as SQLite's JSON functions hand it to a comparison: what ``ReplicaQuery``
/// means by "equal", "less than" and "missing", written once more in Swift so a live query can
/// tell — without a read — that a changed record cannot be in its result.
///
/// SQLite's rules, which these follow: `json_extract` gives `NULL` for a missing field and for
/// JSON `null`; an integer for `true`/`false` (1/0) and for an integral number that fits in 64
/// bits; a real for other numbers; text for a string; the JSON text of an object or array.
/// A comparison with `NULL` is never true. Numbers compare by value, and every number sorts
/// before every text; texts compare by their UTF-8 bytes. A filter's value is bound the same
/// way (`true` as 1, a number that is not a finite real as `NULL`).
enum SQLiteJSONValue: Equatable {
    case null
    case integer(Int64)
    case real(Double)
    case text([UInt8])

    /// What `json_extract` gives for `field` (a dotted path) of `record`.
    init(_ record: JSONValue, field: String) {
        var value: JSONValue? = record
        for name in field.split(separator: ".", omittingEmptySubsequences: false) {
            guard case .object = value else {
                value = nil
                break
            }
            value = value?[String(name)]
        }
        self.init(extracted: value)
    }

    private init(extracted value: JSONValue?) {
        switch value {
        case nil, .null?: self = .null
        case .bool(let flag)?: self = .integer(flag ? 1 : 0)
        case .number(let literal)?: self = Self.number(literal)
        case .string(let text)?: self = .text(Array(text.utf8))
        case let composite?: self = .text(CanonicalJSON.bytes(composite))
        }
    }

    /// How ``ReplicaStorage`` binds a filter's value (nil: it cannot be bound, and the query
    /// throws before anything is observed).
    init?(bound value: JSONValue) {
        switch value {
        case .null: self = .null
        case .bool(let flag): self = .integer(flag ? 1 : 0)
        case .string(let text): self = .text(Array(text.utf8))
        case .number(let literal):
            if let integer = Int64(literal) {
                self = .integer(integer)
            } else if let real = Double(literal), !real.isNaN {
                self = .real(real)
            } else {
                self = .null
            }
        case .array, .object: return nil
        }
    }

    private static func number(_ literal: String) -> SQLiteJSONValue {
        if let integer = Int64(literal) { return .integer(integer) }
        return Double(literal).map { $0.isNaN ? .null : .real($0) } ?? .null
    }

    /// The order of two values, or nil when either is `NULL` (the comparison is unknown, so
    /// no filter passes).
    func compare(_ other: SQLiteJSONValue) -> ComparisonResult? {
        switch (self, other) {
        case (.null, _), (_, .null): return nil
        case (.integer(let a), .integer(let b)): return a < b ? .less : a == b ? .same : .greater
        case (.integer, .real), (.real, .integer), (.real, .real):
            let (a, b) = (numeric!, other.numeric!)
            return a < b ? .less : a == b ? .same : .greater
        case (.integer, .text), (.real, .text): return .less
        case (.text, .integer), (.text, .real): return .greater
        case (.text(let a), .text(let b)): return a.lexicographicallyPrecedes(b) ? .less : a == b ? .same : .greater
        }
    }

    private var numeric: Double? {
        switch self {
        case .integer(let value): Double(value)
        case .real(let value): value
        default: nil
        }
    }

    enum ComparisonResult { case less, same, greater }
}

extension ReplicaQuery {
    /// Whether `record` passes every filter, as ``DeltaSnapReplica/query(_:)`` decides it in
    /// SQLite: a live query re-runs only for a changed record that is in its result or passes
    /// its filters now.
    ///
    /// ```swift
    /// let cheap = ReplicaQuery().filter("price", .lessThan, .number("20"))
    /// cheap.matches(try JSONReader(bytes: Array(#"{"id":"a","price":12}"#.utf8)).readValue())   // true
    /// ```
    package func matches(_ record: JSONValue) -> Bool {
        filters.allSatisfy { filter in
            let value = SQLiteJSONValue(record, field: filter.field)
            switch filter.condition {
            case .isNull:
                return value == .null
            case .compare(let comparison, let operand):
                // An operand that cannot be bound makes the query throw; never reached here.
                guard let bound = SQLiteJSONValue(bound: operand), let order = value.compare(bound) else { return false }
                switch comparison {
                case .equal: return order == .same
                case .notEqual: return order != .same
                case .lessThan: return order == .less
                case .lessThanOrEqual: return order != .greater
                case .greaterThan: return order == .greater
                case .greaterThanOrEqual: return order != .less
                }
            }
        }
    }
}
