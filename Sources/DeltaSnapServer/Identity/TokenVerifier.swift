import Foundation
import JWTKit

/// Verifies a bearer JWT against every configured key — the HS256 secret, the PEM public key
/// and the identity providers' key sets — and checks its claims. Each refusal names its
/// ``TokenRefusal/Reason``.
///
/// A token naming a `kid` one of the key sets has is verified with that key, by the key's
/// algorithm: the token's `alg` must be that algorithm (so `none`, or HS256 signed with an
/// RSA public key as its secret, is refused). `iss` and `aud` are checked when configured;
/// `exp`, `nbf` and `iat` of a key set's token with ``leeway`` for clocks that differ. Tokens
/// of the secret or the PEM key keep their checks of before (`exp`, without leeway).
final class TokenVerifier: Sendable {
    /// Seconds a key set's token may be past `exp`, or before `nbf`/`iat`: the clocks of an
    /// identity provider and of this server differ by a little.
    static let leeway: TimeInterval = 60

    /// What a token that verified is, and what keeps it valid.
    struct Verified: Sendable {
        var claims: AccessClaims
        /// Until when it may be answered from memory.
        var until: Date
        /// The key set its key came from, and that set's removal count when it was looked up.
        var keySet: JWKSKeySource?
        var removals: Int
    }

    /// The secret's and the PEM key's collections, tried in turn (a token without a `kid`
    /// then finds its key whichever kind it is). Built once, on first use, because
    /// `JWTKeyCollection` is an actor.
    private let staticKeys: Task<[JWTKeyCollection], Never>
    private let hasStaticKeys: Bool
    private let keySets: [JWKSKeySource]
    private let issuers: Set<String>
    private let audiences: Set<String>
    private let mapping: ClaimMapping

    init(staticKeys: Task<[JWTKeyCollection], Never>, hasStaticKeys: Bool, policy: AccessPolicy) {
        self.staticKeys = staticKeys
        self.hasStaticKeys = hasStaticKeys
        keySets = policy.keySets
        issuers = Set(policy.issuers)
        audiences = Set(policy.audiences)
        mapping = policy.claims
    }

    func verify(_ token: String, now: Date = Date()) async throws(TokenRefusal) -> Verified {
        guard let header = Self.header(token) else { throw TokenRefusal(.malformed, "it is not a well-formed JWT") }
        if header.alg?.lowercased() == "none" {
            throw TokenRefusal(.wrongAlgorithm, "its alg is \"none\": unsigned tokens are refused")
        }
        if let kid = header.kid, !keySets.isEmpty {
            for keySet in keySets {
                let removals = keySet.removals
                if let key = keySet.key(kid, now: now) { return try await verify(token, header, with: key, kid: kid, from: keySet, removals: removals, now: now) }
            }
            // A rotation: the provider signs with a key published since the last fetch.
            for keySet in keySets where await keySet.refresh(forUnknown: kid, now: now) {
                let removals = keySet.removals
                if let key = keySet.key(kid, now: now) { return try await verify(token, header, with: key, kid: kid, from: keySet, removals: removals, now: now) }
            }
            if !hasStaticKeys {
                throw TokenRefusal(.unknownKid, "its kid \"\(kid)\" is in no configured key set (fetched again for an unknown kid at most every 30 s)")
            }
        }
        if hasStaticKeys { return try await verifyWithStaticKeys(token, now: now) }
        if !keySets.isEmpty { throw TokenRefusal(.unknownKid, "it names no key (its header has no \"kid\")") }
        throw TokenRefusal(.noKeys, "it is not the admin token, and this server accepts no JWTs")
    }

    private func verify(
        _ token: String, _ header: Header, with key: VerificationKeys.Key, kid: String, from keySet: JWKSKeySource, removals: Int, now: Date
    ) async throws(TokenRefusal) -> Verified {
        guard header.alg == key.algorithm else {
            throw TokenRefusal(.wrongAlgorithm, "its alg \"\(header.alg ?? "")\" is not \(key.algorithm), the algorithm of key \"\(kid)\"")
        }
        let raw: RawClaims
        do {
            raw = try await key.keys.verify(token, as: RawClaims.self)
        } catch {
            throw Self.refusal(error)
        }
        let claims = try mapping.accessClaims(raw.claims)
        try checkIssuerAndAudience(raw.claims)
        let exp = claims.exp.value.timeIntervalSince1970
        guard now.timeIntervalSince1970 < exp + Self.leeway else { throw TokenRefusal(.expired, "it has expired") }
        for name in ["nbf", "iat"] {
            guard let value = raw.claims[name] else { continue }
            guard let seconds = value.number else { throw TokenRefusal(.claims, "its \"\(name)\" is not a number") }
            if now.timeIntervalSince1970 < seconds - Self.leeway {
                throw TokenRefusal(.notYetValid, name == "nbf" ? "it is not valid yet (nbf)" : "it was issued in the future (iat)")
            }
        }
        return Verified(claims: claims, until: Date(timeIntervalSince1970: exp + Self.leeway), keySet: keySet, removals: removals)
    }

    private func verifyWithStaticKeys(_ token: String, now: Date) async throws(TokenRefusal) -> Verified {
        var failure: TokenRefusal?
        for keys in await staticKeys.value {
            let raw: RawClaims
            do {
                raw = try await keys.verify(token, as: RawClaims.self)
            } catch {
                if failure == nil { failure = Self.refusal(error) }
                continue
            }
            let claims = try mapping.accessClaims(raw.claims)
            guard claims.exp.value > now else { throw TokenRefusal(.expired, "it has expired") }
            try checkIssuerAndAudience(raw.claims)
            return Verified(claims: claims, until: claims.exp.value, keySet: nil, removals: 0)
        }
        throw failure ?? TokenRefusal(.noKeys, "it is not the admin token, and this server accepts no JWTs")
    }

    private func checkIssuerAndAudience(_ claims: [String: ClaimValue]) throws(TokenRefusal) {
        if !issuers.isEmpty {
            let issuer = claims["iss"]?.string
            guard let issuer, issuers.contains(issuer) else {
                throw TokenRefusal(.wrongIssuer, "its issuer \(issuer.map { "\"\($0)\"" } ?? "(none)") is not one this server accepts")
            }
        }
        if !audiences.isEmpty {
            let audience = claims["aud"]?.strings ?? []
            guard audience.contains(where: audiences.contains) else {
                throw TokenRefusal(.wrongAudience, "its audience \(audience.isEmpty ? "(none)" : audience.map { "\"\($0)\"" }.joined(separator: ", ")) is not one this server accepts")
            }
        }
    }

    private static func refusal(_ error: any Error) -> TokenRefusal {
        if let refusal = error as? TokenRefusal { return refusal }
        guard let jwtError = error as? JWTError else {
            return error is DecodingError
                ? TokenRefusal(.claims, "its claims are not DeltaSnap's (it needs \"sub\" and \"exp\")")
                : TokenRefusal(.malformed, "it is not a valid JWT")
        }
        switch jwtError.errorType {
        case .signatureVerificationFailed: return TokenRefusal(.badSignature, "its signature does not verify")
        case .malformedToken: return TokenRefusal(.malformed, "it is not a well-formed JWT")
        default: return TokenRefusal(.badSignature, "it is not a valid JWT for this server (it needs \"sub\" and \"exp\" claims and the configured key's signature)")
        }
    }

    struct Header: Decodable {
        var alg: String?
        var kid: String?
    }

    /// The header of `token`, unverified (to choose its key).
    static func header(_ token: String) -> Header? {
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3, let data = base64URLDecoded(parts[0]) else { return nil }
        return try? JSONDecoder().decode(Header.self, from: data)
    }

    /// `kid`, `iss` and `aud` of a refused token, unverified, for the debug log (never the token).
    static func describedFields(_ token: String) -> (kid: String, iss: String, aud: String) {
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        let kid = header(token)?.kid ?? "-"
        guard parts.count == 3, let data = base64URLDecoded(parts[1]),
              let claims = try? JSONDecoder().decode([String: ClaimValue].self, from: data)
        else { return (kid, "-", "-") }
        return (kid, claims["iss"]?.string ?? "-", claims["aud"]?.strings?.joined(separator: ",") ?? "-")
    }

    private static func base64URLDecoded(_ text: Substring) -> Data? {
        guard text.count <= 64 * 1024 else { return nil }
        var base64 = text.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        base64 += String(repeating: "=", count: (4 - base64.count % 4) % 4)
        return Data(base64Encoded: base64)
    }
}
