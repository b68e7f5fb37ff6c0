import Foundation
import Metrics

/// Why a bearer JWT was refused, for the `401`'s message, the refusals counter and the
/// debug log line. ``Reason`` is the `reason` label of `deltasnap_token_refusals_total`.
struct TokenRefusal: Error, Sendable {
    enum Reason: String, CaseIterable, Sendable {
        /// Not three base64url parts of JSON.
        case malformed
        /// A `kid` no configured key set has (after a refetch, at most one per 30 s), or no `kid` where only key sets are configured.
        case unknownKid = "unknown_kid"
        /// `alg` is not the algorithm of the key its `kid` names (`none`, HS256 against an RSA key…).
        case wrongAlgorithm = "wrong_algorithm"
        case badSignature = "bad_signature"
        case wrongIssuer = "wrong_issuer"
        case wrongAudience = "wrong_audience"
        case expired
        /// `nbf` or `iat` later than now (beyond the leeway).
        case notYetValid = "not_yet_valid"
        /// The claims DeltaSnap reads are missing or of the wrong type.
        case claims
        /// Not the admin token, and no JWT key configured.
        case noKeys = "no_keys"
    }

    var reason: Reason
    var message: String

    init(_ reason: Reason, _ message: String) {
        self.reason = reason
        self.message = message
    }
}

/// `deltasnap_token_refusals_total{reason}`: refused bearer JWTs by reason, so an operator
/// sees a wrong `--jwt-audience` or a key set that stopped refreshing before users report it.
/// Handles are made once, one per reason.
struct TokenMetrics: Sendable {
    private let refusals: [TokenRefusal.Reason: Metrics.Counter]

    init(factory: any MetricsFactory) {
        var refusals: [TokenRefusal.Reason: Metrics.Counter] = [:]
        for reason in TokenRefusal.Reason.allCases {
            refusals[reason] = Metrics.Counter(label: "deltasnap_token_refusals_total", dimensions: [("reason", reason.rawValue)], factory: factory)
        }
        self.refusals = refusals
    }

    func count(_ reason: TokenRefusal.Reason) {
        refusals[reason]?.increment()
    }
}
