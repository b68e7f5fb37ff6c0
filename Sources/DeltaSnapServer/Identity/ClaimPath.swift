import Foundation
import JWTKit

/// Where in a token's claims a value is: `sub`, `realm_access.roles` (Keycloak),
/// `cognito:groups` (Cognito), `https://example.com/roles` (Auth0's namespaced claims).
///
/// Dots step into nested objects; a key that itself contains dots (a URL-named claim) is
/// matched whole. At each level the longest prefix of what is left that is a key of the
/// object wins, so `https://example.com/roles` finds the top-level claim of that name, and
/// `https://example.com/app.roles` finds `{"https://example.com/app": {"roles": […]}}`.
///
/// ```swift
/// let roles: ClaimPath = "realm_access.roles"
/// roles.value(in: ["realm_access": .object(["roles": .array([.string("editor")])])])  // ["editor"]
/// ```
public struct ClaimPath: Sendable, Hashable, CustomStringConvertible, ExpressibleByStringLiteral {
    /// The path as written.
    public let description: String

    public init(_ path: String) { description = path }
    public init(stringLiteral value: String) { self.init(value) }

    /// The value at this path in `claims`, or nil when there is none.
    func value(in claims: [String: ClaimValue]) -> ClaimValue? {
        Self.lookup(Substring(description), in: claims)
    }

    private static func lookup(_ path: Substring, in object: [String: ClaimValue]) -> ClaimValue? {
        if let whole = object[String(path)] { return whole }
        // Longest prefix first: a dotted key beats a shorter key with the same start.
        var end = path.endIndex
        while let dot = path[path.startIndex..<end].lastIndex(of: ".") {
            if case .object(let inner)? = object[String(path[path.startIndex..<dot])],
               let found = lookup(path[path.index(after: dot)...], in: inner) {
                return found
            }
            end = dot
        }
        return nil
    }
}

/// A claim's JSON value, as the token carries it.
enum ClaimValue: Sendable, Equatable, Decodable {
    case string(String)
    case number(Double)
    case bool(Bool)
    case null
    case array([ClaimValue])
    case object([String: ClaimValue])

    init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        if container.decodeNil() { self = .null }
        else if let value = try? container.decode(Bool.self) { self = .bool(value) }
        else if let value = try? container.decode(Double.self) { self = .number(value) }
        else if let value = try? container.decode(String.self) { self = .string(value) }
        else if let value = try? container.decode([ClaimValue].self) { self = .array(value) }
        else { self = .object(try container.decode([String: ClaimValue].self)) }
    }

    var string: String? { if case .string(let value) = self { value } else { nil } }
    var number: Double? { if case .number(let value) = self { value } else { nil } }

    /// The audience claim's values: one string or a list of them (RFC 7519 §4.1.3).
    var strings: [String]? {
        switch self {
        case .string(let value): [value]
        case .array(let values): values.compactMap(\.string).count == values.count ? values.compactMap(\.string) : nil
        default: nil
        }
    }
}

/// A token's whole payload, once its signature verified: claims are read from it by
/// ``ClaimMapping`` and checked by ``TokenCheck``. (jwt-kit verifies the signature before it
/// decodes a payload; this payload's own `verify` checks nothing: the checks come after, where
/// each refusal has its reason.)
struct RawClaims: JWTPayload {
    var claims: [String: ClaimValue]

    init(from decoder: any Decoder) throws {
        claims = try decoder.singleValueContainer().decode([String: ClaimValue].self)
    }

    func encode(to encoder: any Encoder) throws {
        throw EncodingError.invalidValue(self, .init(codingPath: [], debugDescription: "verification only"))
    }

    func verify(using algorithm: some JWTAlgorithm) throws {}
}

/// Where a provider puts the claims DeltaSnap reads: the subject, the collections the
/// holder may write and read, its roles and the preview flag. The defaults are DeltaSnap's
/// own claim names (`sub`, `write`, `read`, `roles`, `preview`); an identity provider's
/// tokens name them its own way:
///
/// ```swift
/// var claims = ClaimMapping()
/// claims.roles = "realm_access.roles"          // Keycloak
/// claims.roles = "cognito:groups"              // Amazon Cognito
/// claims.roles = "https://example.com/roles"   // Auth0 (a namespaced claim)
/// ```
public struct ClaimMapping: Sendable, Hashable {
    public var subject: ClaimPath = "sub"
    public var write: ClaimPath = "write"
    public var read: ClaimPath = "read"
    public var roles: ClaimPath = "roles"
    public var preview: ClaimPath = "preview"

    public init() {}

    /// The ``AccessClaims`` of a verified payload. A list claim may be a list of strings or
    /// one string of names separated by spaces or commas (an OAuth `scope`); any other value
    /// refuses the token, as DeltaSnap's own claims always have.
    func accessClaims(_ claims: [String: ClaimValue]) throws(TokenRefusal) -> AccessClaims {
        guard let subject = subject.value(in: claims)?.string else {
            throw TokenRefusal(.claims, "its claims are not DeltaSnap's (it needs \"\(self.subject)\" and \"exp\")")
        }
        guard let exp = claims["exp"]?.number else {
            throw TokenRefusal(.claims, "its claims are not DeltaSnap's (it needs \"\(self.subject)\" and \"exp\")")
        }
        var preview: Bool?
        if case .bool(let flag)? = self.preview.value(in: claims) { preview = flag }
        return AccessClaims(
            sub: SubjectClaim(value: subject), exp: ExpirationClaim(value: Date(timeIntervalSince1970: exp)),
            write: try names(write, claims), read: try names(read, claims), roles: try names(roles, claims), preview: preview)
    }

    private func names(_ path: ClaimPath, _ claims: [String: ClaimValue]) throws(TokenRefusal) -> [String]? {
        switch path.value(in: claims) {
        case nil, .null?: return nil
        case .string(let text)?: return text.split(whereSeparator: { $0 == " " || $0 == "," }).map(String.init)
        case .array(let values)?:
            let names = values.compactMap(\.string)
            if names.count == values.count { return names }
        default: break
        }
        throw TokenRefusal(.claims, "its claim \"\(path)\" is neither a list of names nor one string of them")
    }
}
