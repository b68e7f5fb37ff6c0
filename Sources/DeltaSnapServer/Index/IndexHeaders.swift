import HTTPTypes
import NIOCore

/// What every answer of `GET /v1/index` carries besides its `ETag`, made once per server:
/// `Content-Type` and `Cache-Control` — a view is one user's, so no cache keeps it
/// (``CacheRule``); a shared cache may keep the public index `--index-max-age` seconds — and the
/// status line and both fields of its `304`, encoded for ``RawPollHandler``.
///
/// ```swift
/// let view = IndexHeaders(isView: true, maxAge: 30)
/// view.fields[.cacheControl]   // "private, no-store"
/// ```
struct IndexHeaders: Sendable {
    let fields: HTTPFields
    /// `HTTP/1.1 304 Not Modified` and ``fields``, CRLF-ended lines (the `ETag` and `Date`
    /// follow).
    let encodedNotModifiedHead: ByteBuffer

    init(isView: Bool, maxAge: Int) {
        let cacheControl = isView ? CacheRule.privateAnswer : "public, max-age=\(maxAge), stale-while-revalidate=\(maxAge)"
        let fields: HTTPFields = [.contentType: "application/json", .cacheControl: cacheControl]
        self.fields = fields
        encodedNotModifiedHead = fields.encodedHead(statusLine: "HTTP/1.1 304 Not Modified")
    }
}
