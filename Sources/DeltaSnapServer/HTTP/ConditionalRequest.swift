import DeltaSnapCore

/// The validators a collection request carries, parsed (RFC 9110 §13.1).
///
/// `If-None-Match` wins over `If-Modified-Since` when both are present.
///
/// ```swift
/// ConditionalRequest(ifNoneMatch: "\"5f3c9a0e12ab34cd.4\"", ifModifiedSince: nil)
/// // .entityTags(["5f3c9a0e12ab34cd.4"])
/// ```
package enum ConditionalRequest: Equatable, Sendable {
    /// No validator: the client wants everything.
    case unconditional
    /// `If-None-Match: *`.
    case anyEntityTag
    /// `If-None-Match` with these opaque tags (quotes and `W/` removed).
    case entityTags([String])
    /// Only `If-Modified-Since`, as seconds since 1970.
    case modifiedSince(Int64)
    /// Only `If-Modified-Since`, but not a valid HTTP date: treated as unconditional.
    case invalidModifiedSince

    package init(ifNoneMatch: String?, ifModifiedSince: String?) {
        if let ifNoneMatch, !ifNoneMatch.allSatisfy({ $0 == " " || $0 == "\t" }) {
            let tags = Self.entityTags(in: ifNoneMatch)
            self = tags == ["*"] ? .anyEntityTag : .entityTags(tags)
        } else if let ifModifiedSince {
            self = HTTPDate.parse(ifModifiedSince.trimmingSpaces).map(ConditionalRequest.modifiedSince) ?? .invalidModifiedSince
        } else {
            self = .unconditional
        }
    }

    /// Whether `If-None-Match` names `tag` (quoted, as sent in `ETag`), by the weak
    /// comparison RFC 9110 §13.1.2 prescribes for it, or is `*`.
    func matches(entityTag tag: String) -> Bool {
        switch self {
        case .anyEntityTag: true
        case .entityTags(let tags): tags.contains(Self.entityTags(in: tag).first ?? tag)
        case .unconditional, .modifiedSince, .invalidModifiedSince: false
        }
    }

    /// Splits an `If-None-Match` list into tags: `"a", W/"b"` → `["a", "b"]`. Lenient with
    /// unquoted values, which are taken as they are (and will simply not match).
    static func entityTags(in header: String) -> [String] {
        var tags: [String] = []
        var current = ""
        var inQuotes = false
        for character in header {
            if character == "\"" {
                inQuotes.toggle()
            } else if character == "," && !inQuotes {
                tags.append(current)
                current = ""
            } else {
                current.append(character)
            }
        }
        tags.append(current)
        return tags.map { tag in
            var tag = tag.trimmingSpaces
            if tag.hasPrefix("W/") { tag.removeFirst(2) }
            return tag
        }.filter { !$0.isEmpty }
    }
}

extension String {
    var trimmingSpaces: String {
        String(Substring(Substring(self).utf8.trimmingSpaces))
    }
}

extension Substring.UTF8View {
    /// Without the spaces and tabs around it. By bytes, not characters: a bearer token is
    /// trimmed on every poll of a view.
    var trimmingSpaces: Substring.UTF8View {
        var view = self
        while let first = view.first, first == 0x20 || first == 0x09 { view.removeFirst() }
        while let last = view.last, last == 0x20 || last == 0x09 { view.removeLast() }
        return view
    }
}
