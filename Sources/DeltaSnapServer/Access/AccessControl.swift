import DeltaSnapCore
import Foundation
import Hummingbird
import JWTKit
import Logging
import NIOConcurrencyHelpers

/// Who may read and write which collection.
///
/// Two kinds of bearer token are accepted: the data owner's admin token (`--write-token`),
/// which may do everything, and per-user JWTs signed by the app's own auth service —
/// HS256 with a shared secret, EdDSA (Ed25519) / ES256 with a public key, or any key of an
/// identity provider's published key sets (``keySets``: RS256, PS256, ES256, EdDSA…) —
/// whose claims name the collections the holder may write and, for private collections, read.
/// Collections are public to read unless listed in ``privateCollections``.
///
/// ```swift
/// var access = AccessPolicy(adminToken: "owner-secret")
/// access.jwtSecret = "shared-with-the-auth-service"
/// access.privateCollections = ["notes"]
/// ```
public struct AccessPolicy: Sendable {
    /// The data owner's token: every right on every collection. `nil`: no admin token.
    public var adminToken: String?
    /// The HS256 secret per-user JWTs are signed with.
    public var jwtSecret: String?
    /// A PEM public key (Ed25519 for EdDSA, P-256 for ES256) per-user JWTs are signed with.
    public var jwtPublicKeyPEM: String?
    /// Collections only token holders whose `read` (or `write`) claim names them may read.
    public var privateCollections: Set<String>
    /// Per-collection rules and partitions (`serve --rules FILE`); collections they do not
    /// name follow the settings above.
    public var rules: AccessRules
    /// Identity providers' key sets (`serve --jwks-url`, `--jwks-file`): a token naming one
    /// of their `kid`s is verified with that key, by the key's algorithm alone.
    public var keySets: [JWKSKeySource] = []
    /// Accepted `iss` values; empty: not checked.
    public var issuers: [String] = []
    /// Accepted `aud` values (a token's `aud` must name one); empty: not checked.
    public var audiences: [String] = []
    /// Where the subject, roles, read and write lists are in a token's claims.
    public var claims = ClaimMapping()
    /// Where refused tokens are logged (at debug, with their `kid`, `iss` and `aud`, never
    /// the token) and key-set refreshes that failed (at warning).
    public var tokenLogger = Logger(label: "deltasnap.tokens")

    public init(
        adminToken: String? = nil, jwtSecret: String? = nil, jwtPublicKeyPEM: String? = nil, privateCollections: Set<String> = [],
        rules: AccessRules = AccessRules()
    ) {
        self.adminToken = adminToken
        self.jwtSecret = jwtSecret
        self.jwtPublicKeyPEM = jwtPublicKeyPEM
        self.privateCollections = privateCollections
        self.rules = rules
    }

    /// Whether any token can write.
    package var acceptsWrites: Bool { adminToken != nil || jwtSecret != nil || jwtPublicKeyPEM != nil || !keySets.isEmpty }

    /// Whether every collection is public to read: then no poll needs its token checked.
    package var everythingPublic: Bool { privateCollections.isEmpty && !rules.hasNonPublicReads }

    /// Whether `GET /v1/index` answers every caller the same public index: without rules or
    /// private collections a token is not even looked at there (as before views existed).
    package var indexIgnoresTokens: Bool { everythingPublic && rules.collections.isEmpty }

    /// Whether anyone may read `path` without a token.
    package func isPublicRead(_ path: CollectionPath) -> Bool {
        if let rule = rules[path.name] { return rule.read == .public }
        return !privateCollections.contains(path.description) && !privateCollections.contains(path.name)
    }

    /// Whether a refusal to read `path` must look like a partition that does not exist: the
    /// partitions of a non-public partitioned collection never reveal that they exist.
    func hidesRefusals(_ path: CollectionPath) -> Bool {
        guard let rule = rules[path.name] else { return false }
        return rule.partitioned && rule.read != .public
    }
}

/// The claims of a DeltaSnap access token: `sub`, `exp` (required), the collections the
/// holder may `write` and `read` (`"*"` means every collection), the `roles` a reviewed
/// collection's rule names (editors, reviewers), and `preview`.
///
/// ```json
/// {"sub":"alice","exp":1767229200,"write":["notes","answers"],"read":["notes"],"roles":["editor"]}
/// ```
public struct AccessClaims: JWTPayload, Equatable {
    public var sub: SubjectClaim
    public var exp: ExpirationClaim
    public var write: [String]?
    public var read: [String]?
    /// Roles a rule's `review` names (`editor`, `reviewer`, as the app's auth service calls them).
    public var roles: [String]?
    /// A preview device's token: it reads reviewed collections' workspaces as if published.
    public var preview: Bool?

    /// `expires` is rounded down to a whole second: RFC 7519 allows a fractional `exp`, but
    /// many JWT libraries read only integers.
    public init(subject: String, expires: Date, write: [String], read: [String], roles: [String] = [], preview: Bool = false) {
        sub = SubjectClaim(value: subject)
        exp = ExpirationClaim(value: Date(timeIntervalSince1970: expires.timeIntervalSince1970.rounded(.down)))
        self.write = write.isEmpty ? nil : write
        self.read = read.isEmpty ? nil : read
        self.roles = roles.isEmpty ? nil : roles
        self.preview = preview ? true : nil
    }

    /// Claims as read by a ``ClaimMapping``, kept as they are.
    init(sub: SubjectClaim, exp: ExpirationClaim, write: [String]?, read: [String]?, roles: [String]?, preview: Bool?) {
        self.sub = sub
        self.exp = exp
        self.write = write
        self.read = read
        self.roles = roles
        self.preview = preview
    }

    private enum CodingKeys: String, CodingKey { case sub, exp, write, read, roles, preview }

    /// `write` and `read` may also be one string of names separated by spaces or commas
    /// (how OAuth-style `scope` claims are often written by auth services).
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        sub = try container.decode(SubjectClaim.self, forKey: .sub)
        exp = try container.decode(ExpirationClaim.self, forKey: .exp)
        write = try Self.names(container, .write)
        read = try Self.names(container, .read)
        roles = try Self.names(container, .roles)
        preview = try? container.decodeIfPresent(Bool.self, forKey: .preview)
    }

    /// Whether the holder has `role` (the `roles` claim).
    func has(role: String) -> Bool { roles?.contains(role) ?? false }

    private static func names(_ container: KeyedDecodingContainer<CodingKeys>, _ key: CodingKeys) throws -> [String]? {
        if let list = try? container.decodeIfPresent([String].self, forKey: key) { return list }
        guard let text = try container.decodeIfPresent(String.self, forKey: key) else { return nil }
        return text.split(whereSeparator: { $0 == " " || $0 == "," }).map(String.init)
    }

    public func verify(using algorithm: some JWTAlgorithm) throws {
        try exp.verifyNotExpired()
    }

    func mayWrite(_ collection: String) -> Bool { Self.names(write, collection) }
    func mayRead(_ collection: String) -> Bool { Self.names(read, collection) || mayWrite(collection) }

    /// Whether these claims give `right` on `path`: a claim may name the collection (every
    /// partition of it) or one partition.
    func allow(_ right: AccessControl.Right, on path: CollectionPath) -> Bool {
        [path.name, path.description].contains { right == .write ? mayWrite($0) : mayRead($0) }
    }

    private static func names(_ list: [String]?, _ collection: String) -> Bool {
        list?.contains { $0 == collection || $0 == "*" } ?? false
    }

    /// Signs claims as an HS256 JWT: what `deltasnap token` prints (for development and tests;
    /// in production the app's auth service mints them).
    ///
    /// ```swift
    /// let jwt = try await AccessClaims(subject: "alice", expires: .now + 3600, write: ["notes"], read: [])
    ///     .signed(secret: "dev-secret")
    /// ```
    public func signed(secret: String) async throws -> String {
        // Whole seconds on the wire (`"exp":1795456797`): JWTKit's default writes a Double.
        let encoder = JSONEncoder()
        encoder.dateEncodingStrategy = .integerSecondsSince1970
        let keys = JWTKeyCollection(defaultJWTSerializer: DefaultJWTSerializer(jsonEncoder: encoder))
        await keys.add(hmac: AccessControl.hmacKey(secret), digestAlgorithm: .sha256)
        return try await keys.sign(self)
    }

    /// Signs claims with a private key in PEM form — RSA (RS256) or P-256 (ES256) — under
    /// `kid`: a provider's token for development, verified by `serve --jwks-file` or
    /// `--jwks-url` with the public half of the key in a key set.
    ///
    /// ```swift
    /// let jwt = try await AccessClaims(subject: "alice", expires: .now + 3600, write: ["notes"], read: [])
    ///     .signed(privateKeyPEM: pem, kid: "dev-1")
    /// ```
    public func signed(privateKeyPEM pem: String, kid: String) async throws -> String {
        let encoder = JSONEncoder()
        encoder.dateEncodingStrategy = .integerSecondsSince1970
        let keys = JWTKeyCollection(defaultJWTSerializer: DefaultJWTSerializer(jsonEncoder: encoder))
        let identifier = JWKIdentifier(string: kid)
        if let key = try? ES256PrivateKey(pem: pem) {
            await keys.add(ecdsa: key, kid: identifier)
        } else if let key = try? Insecure.RSA.PrivateKey(pem: pem) {
            await keys.add(rsa: key, digestAlgorithm: .sha256, kid: identifier)
        } else {
            throw AccessControlError.unsupportedPrivateKey
        }
        return try await keys.sign(self, kid: identifier)
    }
}

/// Who a request acts as, once its token is checked.
struct Principal: Sendable {
    /// The JWT's `sub`, or "admin" for the admin token, or "anonymous".
    var subject: String
    var claims: AccessClaims?
    var isAdmin: Bool

    static let anonymous = Principal(subject: "anonymous", claims: nil, isAdmin: false)

    /// Whether the request carried no token.
    var isAnonymous: Bool { claims == nil && !isAdmin }
}

/// Checks bearer tokens against an ``AccessPolicy``. Every refusal is an ``APIError``
/// (401 for a missing or invalid token, 403 for a valid one without the right).
final class AccessControl: Sendable {
    let policy: AccessPolicy
    /// Every configured key: the secret's, the PEM key's and the key sets'.
    private let verifier: TokenVerifier
    /// Tokens that verified, until they expire (bounded).
    private let verified = VerifiedTokens()
    /// Refused tokens by reason; nil for a policy checked outside a service.
    private let metrics: TokenMetrics?

    init(policy: AccessPolicy, metrics: TokenMetrics? = nil) throws {
        self.policy = policy
        self.metrics = metrics
        var hmac: HMACKey?
        if let secret = policy.jwtSecret {
            guard !secret.isEmpty else { throw AccessControlError.emptySecret }
            hmac = Self.hmacKey(secret)
        }
        var eddsa: EdDSA.PublicKey?
        var ecdsa: ES256PublicKey?
        if let pem = policy.jwtPublicKeyPEM {
            if let key = try? EdDSA.PublicKey(pem: pem) {
                eddsa = key
            } else if let key = try? ES256PublicKey(pem: pem) {
                ecdsa = key
            } else {
                throw AccessControlError.unsupportedPublicKey
            }
        }
        // One key collection per configured key, tried in turn: a token without a `kid` then
        // still finds its key whichever kind it is. Built once, on first use, because
        // `JWTKeyCollection` is an actor; the keys themselves are parsed (and refused) above.
        let staticKeys = Task { [hmac, eddsa, ecdsa] in
            var sets: [JWTKeyCollection] = []
            if let hmac { sets.append(await JWTKeyCollection().add(hmac: hmac, digestAlgorithm: .sha256)) }
            if let eddsa { sets.append(await JWTKeyCollection().add(eddsa: eddsa)) }
            if let ecdsa { sets.append(await JWTKeyCollection().add(ecdsa: ecdsa)) }
            return sets
        }
        verifier = TokenVerifier(staticKeys: staticKeys, hasStaticKeys: hmac != nil || eddsa != nil || ecdsa != nil, policy: policy)
    }

    /// The HS256 key of `secret`. jwt-kit traps on keys under 32 bytes; HMAC pads every key
    /// shorter than its 64-byte block with zeros (RFC 2104 §2), so padding to 32 bytes here
    /// yields the very same MACs: tokens signed elsewhere with the raw secret still verify.
    static func hmacKey(_ secret: String) -> HMACKey {
        var bytes = Array(secret.utf8)
        if bytes.count < 32 { bytes += [UInt8](repeating: 0, count: 32 - bytes.count) }
        return HMACKey(from: bytes)
    }

    enum Right { case read, write }

    /// The principal `request` acts as, if it may exercise `right` on `path` (a collection or
    /// a partition). A refusal on a partition the caller may not read is the `404` of a
    /// partition that does not exist, whatever the reason (no token, another user's, a
    /// revoked membership): nothing tells whether it exists.
    func authorize(_ request: Request, path: CollectionPath, for right: Right, memberships: MembershipDirectory) async throws -> Principal {
        guard let rule = policy.rules[path.name] else {
            return try await authorize(request, unruled: path, for: right)
        }
        // A rule says whether the collection has partitions: the other form does not exist.
        guard rule.partitioned == (path.key != nil) else { throw APIError.unknownCollection(path.description) }
        let audience = right == .read ? rule.read : rule.write
        if right == .read && audience == .public { return .anonymous }
        if right == .write && !policy.acceptsWrites {
            throw APIError.writesDisabled
        }
        let hidden = policy.hidesRefusals(path)
        guard let token = Self.bearerToken(request) else {
            if hidden { throw APIError.unknownCollection(path.description) }
            throw APIError.missingToken(right == .write ? "writes need" : "collection \"\(path)\" is private: reading it needs")
        }
        let principal = try await verify(token)
        if principal.isAdmin { return principal }
        if right == .write, let review = rule.review {
            // A reviewed collection's writers are its editors: their writes go to its workspace.
            if principal.claims?.has(role: review.editors) == true { return principal }
            throw APIError(.forbidden, "forbidden", "\"\(path)\" is reviewed: only its editors (JWT role \"\(review.editors)\") and the admin token write it")
        }
        if try await grants(audience, right, on: path, to: principal, memberships: memberships) { return principal }
        // A writer who may read it knows it exists: 403. Anyone else learns nothing.
        if hidden {
            let mayRead = right == .write ? try await grants(rule.read, .read, on: path, to: principal, memberships: memberships) : false
            if !mayRead { throw APIError.unknownCollection(path.description) }
        }
        throw APIError(.forbidden, "forbidden", "the token of \"\(principal.subject)\" does not allow \(right == .write ? "writing" : "reading") \"\(path)\"")
    }

    /// Whether `audience` includes `principal` for `right` on `path` (the admin is handled before).
    private func grants(
        _ audience: AccessRules.Audience, _ right: Right, on path: CollectionPath, to principal: Principal, memberships: MembershipDirectory,
        roles: [String: MembershipDirectory.Role]? = nil
    ) async throws -> Bool {
        switch audience {
        case .public: return true
        case .admin: return false
        case .owner: return path.key == principal.subject
        case .member:
            let role = if let roles { roles[path.description] } else { try await memberships.role(of: principal.subject, in: path) }
            guard let role else { return false }
            return right == .read || role == .write
        case .claims:
            guard let claims = principal.claims else { return false }
            return claims.allow(right, on: path)
        }
    }

    /// Who `request`'s bearer token is, for a view: anonymous without one; a `401` for a
    /// token that does not verify.
    func principal(of request: Request) async throws -> Principal {
        guard let token = Self.bearerToken(request) else { return .anonymous }
        return try await verify(token)
    }

    /// Whether `principal` may read `path`, for building a view (never throws for a refusal).
    /// `roles`: the principal's memberships, when the caller read them once for many paths.
    func mayRead(
        _ path: CollectionPath, as principal: Principal, memberships: MembershipDirectory, roles: [String: MembershipDirectory.Role]? = nil
    ) async throws -> Bool {
        if principal.isAdmin { return true }
        guard let rule = policy.rules[path.name] else {
            if policy.isPublicRead(path) { return true }
            return principal.claims?.allow(.read, on: path) ?? false
        }
        guard rule.partitioned == (path.key != nil) else { return false }
        return try await grants(rule.read, .read, on: path, to: principal, memberships: memberships, roles: roles)
    }

    /// The principal `request` acts as, if it may exercise `right` on `path` by the settings
    /// of ``AccessPolicy`` alone (a collection no rule names, or a partition of one).
    private func authorize(_ request: Request, unruled path: CollectionPath, for right: Right) async throws -> Principal {
        if right == .read && policy.isPublicRead(path) { return .anonymous }
        if right == .write && !policy.acceptsWrites {
            throw APIError.writesDisabled
        }
        guard let token = Self.bearerToken(request) else {
            throw APIError.missingToken(right == .write ? "writes need" : "collection \"\(path)\" is private: reading it needs")
        }
        let principal = try await verify(token)
        if principal.isAdmin { return principal }
        guard principal.claims?.allow(right, on: path) == true else {
            throw APIError(.forbidden, "forbidden", "the token of \"\(principal.subject)\" does not allow \(right == .write ? "writing" : "reading") collection \"\(path)\"")
        }
        return principal
    }

    private func verify(_ token: String) async throws -> Principal {
        if let known = knownPrincipal(token) { return known }
        do {
            let result = try await verifier.verify(token)
            let principal = Principal(subject: result.claims.sub.value, claims: result.claims, isAdmin: false)
            verified.remember(token, as: principal, until: result.until, keySet: result.keySet, removals: result.removals)
            return principal
        } catch {
            metrics?.count(error.reason)
            let logger = policy.tokenLogger
            if logger.logLevel <= .debug {
                // What an operator needs to see a wrong issuer, audience or key set; never the token.
                let fields = TokenVerifier.describedFields(token)
                logger.debug("bearer token refused: \(error.message)", metadata: [
                    "reason": "\(error.reason.rawValue)", "kid": "\(fields.kid)", "iss": "\(fields.iss)", "aud": "\(fields.aud)",
                ])
            }
            throw APIError(.unauthorized, "invalid_token", "the bearer token was refused: \(error.message)",
                           headers: [.wwwAuthenticate: "Bearer error=\"invalid_token\""])
        }
    }

    /// Who `token` is, when memory alone can tell: the admin token, or a JWT that verified
    /// before and has not expired (the fast path answers such a user's view poll). A token
    /// verified before is the same bytes with the same claims: a poll repeats it, so it is
    /// checked once (its expiry on every use), not parsed and re-signed each time.
    func knownPrincipal(_ token: String) -> Principal? {
        if let admin = policy.adminToken, Self.constantTimeEqual(token, admin) {
            return Principal(subject: "admin", claims: nil, isAdmin: true)
        }
        return verified.principal(for: token, now: Date())
    }

    static func bearerToken(_ request: Request) -> String? {
        bearerToken(request.headers[.authorization])
    }

    /// The token of an `Authorization: Bearer …` header value (the scheme in any case).
    static func bearerToken(_ value: String?) -> String? {
        guard let value else { return nil }
        // Byte by byte: this runs on every poll of a view, and Foundation's
        // `trimmingCharacters` goes through UTF-16 on Linux (a third of a view's 304).
        let bytes = value.utf8
        let scheme = "bearer ".utf8
        guard bytes.count > scheme.count,
              zip(bytes, scheme).allSatisfy({ byte, expected in (byte >= 0x41 && byte <= 0x5A ? byte | 0x20 : byte) == expected })
        else { return nil }
        let token = bytes.dropFirst(scheme.count).trimmingSpaces
        return token.isEmpty ? nil : String(Substring(token))
    }

    static func constantTimeEqual(_ a: String, _ b: String) -> Bool {
        let x = Array(a.utf8)
        let y = Array(b.utf8)
        var difference = x.count ^ y.count
        for index in 0..<max(x.count, y.count) {
            difference |= Int((index < x.count ? x[index] : 0) ^ (index < y.count ? y[index] : 0))
        }
        return difference == 0
    }
}

/// A key setting the server cannot use; reported at start-up.
public enum AccessControlError: Error, CustomStringConvertible {
    case emptySecret
    case unsupportedPublicKey
    case unsupportedPrivateKey

    public var description: String {
        switch self {
        case .emptySecret: "the JWT secret is empty"
        case .unsupportedPublicKey: "the JWT public key is neither an Ed25519 (EdDSA) nor a P-256 (ES256) key in PEM form"
        case .unsupportedPrivateKey: "the private key is neither an RSA (RS256) nor a P-256 (ES256) key in PEM form"
        }
    }
}

extension APIError {
    static let writesDisabled = APIError(
        .forbidden, "writes_disabled", "this server was started without a write token or JWT key, so it accepts no writes")

    /// `401` for a request without a bearer token; `what` says what needed it.
    static func missingToken(_ what: String) -> APIError {
        APIError(.unauthorized, "unauthorized", "\(what) the header 'Authorization: Bearer <token>'", headers: [.wwwAuthenticate: "Bearer"])
    }
}

/// JWTs that verified, with who they are and until when: a bounded cache (``BoundedCache``),
/// so memory grows with the active users only.
final class VerifiedTokens: Sendable {
    private let entries: NIOLockedValueBox<BoundedCache<String, Verified>>

    private struct Verified: Sendable {
        var principal: Principal
        var expires: Date
        /// A key set's token: verified again once that set has dropped a key since.
        var keySet: JWKSKeySource?
        var removals: Int
    }

    init(capacity: Int = 10_000) {
        entries = NIOLockedValueBox(BoundedCache(capacity: capacity))
    }

    func principal(for token: String, now: Date) -> Principal? {
        entries.withLockedValue { cache in
            guard let entry = cache.value(forKey: token) else { return nil }
            guard entry.expires > now, entry.keySet.map({ $0.removals == entry.removals }) ?? true else {
                cache.removeValue(forKey: token)
                return nil
            }
            return entry.principal
        }
    }

    func remember(_ token: String, as principal: Principal, until expires: Date, keySet: JWKSKeySource? = nil, removals: Int = 0) {
        entries.withLockedValue { $0.set(Verified(principal: principal, expires: expires, keySet: keySet, removals: removals), forKey: token) }
    }
}
