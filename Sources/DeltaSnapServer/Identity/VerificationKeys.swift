import Foundation
import JWTKit

/// The usable signing keys of one JSON Web Key Set, by `kid`, each with the one algorithm
/// it verifies (the key's `alg`, or the only one its type allows): a token's own `alg`
/// never chooses it.
struct VerificationKeys: Sendable {
    struct Key: Sendable {
        /// `RS256`, `PS256`, `ES256`, `EdDSA`…: a token whose `alg` differs is refused.
        let algorithm: String
        /// A collection of this key alone: jwt-kit falls back to a collection's default key
        /// for a `kid` it lacks, so every lookup by `kid` happens here, before it.
        let keys: JWTKeyCollection
    }

    let byKid: [String: Key]
    /// Keys left out, with why (an encryption key, an unsupported type…), for the log.
    let skipped: [String]

    /// The algorithms a key set may name for a signing key.
    static let signingAlgorithms: Set<String> = ["RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"]
    /// At most this many keys are read from one set (providers publish 1–4).
    static let maximumKeys = 100

    /// The keys of a JWKS document. One unusable key (an `enc` key, a type jwt-kit does not
    /// know) is skipped, not the whole set; a set with no usable key is an error.
    static func parse(_ data: Data) async throws(KeySetError) -> VerificationKeys {
        let document: LenientSet
        do {
            document = try JSONDecoder().decode(LenientSet.self, from: data)
        } catch {
            throw KeySetError("is not a JSON Web Key Set (an object with a \"keys\" list)")
        }
        var byKid: [String: Key] = [:]
        var skipped: [String] = []
        for entry in document.keys.prefix(maximumKeys) {
            let name = entry.kid.map { "kid \"\($0)\"" } ?? "a key without kid"
            guard let kid = entry.kid, !kid.isEmpty else { skipped.append("\(name): no kid"); continue }
            guard entry.use == nil || entry.use == "sig" else { skipped.append("\(name): use \"\(entry.use ?? "")\""); continue }
            guard var jwk = entry.jwk else { skipped.append("\(name): a key type jwt-kit cannot read"); continue }
            if jwk.algorithm == nil { jwk.algorithm = impliedAlgorithm(jwk) }
            guard let algorithm = jwk.algorithm?.rawValue, signingAlgorithms.contains(algorithm) else {
                skipped.append("\(name): not a signing algorithm (\(jwk.algorithm?.rawValue ?? "none"))")
                continue
            }
            do {
                let keys = JWTKeyCollection()
                try await keys.add(jwks: JWKS(keys: [jwk]))
                // The signer is made now: a key that does not parse is skipped here, not at the first token.
                _ = try await keys.getKey(for: JWKIdentifier(string: kid))
                byKid[kid] = Key(algorithm: algorithm, keys: keys)
            } catch {
                skipped.append("\(name): \(algorithm) key does not parse")
            }
        }
        guard !byKid.isEmpty else {
            throw KeySetError("has no signing key DeltaSnap can use (RS256/384/512, PS256/384/512, ES256/384/512, EdDSA, each with a kid)"
                + (skipped.isEmpty ? "" : ": " + skipped.joined(separator: "; ")))
        }
        return VerificationKeys(byKid: byKid, skipped: skipped)
    }

    /// The algorithm a key without `alg` can only be for (Microsoft's sets omit `alg`): RSA
    /// keys RS256 (PS256 must be named), EC keys by curve, OKP keys EdDSA.
    private static func impliedAlgorithm(_ jwk: JWK) -> JWK.Algorithm? {
        switch jwk.keyType {
        case .rsa: return .rs256
        case .ecdsa:
            switch jwk.curve?.rawValue {
            case "P-256": return .es256
            case "P-384": return .es384
            case "P-521": return .es512
            default: return nil
            }
        case .octetKeyPair: return .eddsa
        default: return nil
        }
    }

    private struct LenientSet: Decodable {
        var keys: [LenientKey]
    }

    /// One entry of `keys`, read whether or not jwt-kit knows its type.
    private struct LenientKey: Decodable {
        var kid: String?
        var use: String?
        var jwk: JWK?

        private enum CodingKeys: String, CodingKey { case kid, use }

        init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: CodingKeys.self)
            kid = try? container.decodeIfPresent(String.self, forKey: .kid)
            use = try? container.decodeIfPresent(String.self, forKey: .use)
            jwk = try? JWK(from: decoder)
        }
    }
}

/// A key set that cannot be used: the location and what is wrong, on one line (`serve`
/// prints it and exits 1 when the set cannot be had at start).
public struct KeySetError: Error, CustomStringConvertible, Sendable {
    /// What is wrong, after the set's location.
    public var reason: String
    /// The `--jwks-url` or `--jwks-file` it concerns, once known.
    public var location: String?

    init(_ reason: String, location: String? = nil) {
        self.reason = reason
        self.location = location
    }

    public var description: String {
        "the key set \(location ?? "") \(reason)".replacingOccurrences(of: "  ", with: " ")
    }
}
