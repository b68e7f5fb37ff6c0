/// Who may keep an answer, decided in one place for every endpoint (docs/PROTOCOL.md §10.2).
///
/// An answer anyone may read is kept by shared caches (a CDN, nginx) as long as its URL
/// allows. An answer only some callers may read — a partition that is not public, a
/// private collection, a caller's view — is kept by **no** HTTP cache: a device's HTTP
/// cache would go on serving it after the user's access ended (a revoked membership, a
/// logout on a shared device), and the client's replica is its cache already.
///
/// ```swift
/// CacheRule.immutable(isPublic: false)   // "private, no-store"
/// ```
enum CacheRule {
    /// A poll of a public collection: any cache may keep it, revalidating every time.
    static let revalidate = "no-cache"
    /// Any answer only some callers may read.
    static let privateAnswer = "private, no-store"
    /// A URL named by tokens (a delta, a full body, a page), which never changes once answered.
    static let publicImmutable = "public, max-age=31536000, immutable"

    /// The `Cache-Control` of a URL named by tokens.
    static func immutable(isPublic: Bool) -> String {
        isPublic ? publicImmutable : privateAnswer
    }
}
