import Foundation

/// One HTTP request the client wants made: a GET of a collection, or a POST of a batch.
public struct SyncRequest: Sendable, Equatable {
    /// The headers every request of a sync carries: `Accept-Encoding: gzip`, and the bearer
    /// token when there is one (the one place a client builds `Authorization`).
    public static func headers(accessToken: String?) -> [String: String] {
        var headers = ["Accept-Encoding": "gzip"]
        if let accessToken { headers["Authorization"] = "Bearer \(accessToken)" }
        return headers
    }

    public var url: URL
    /// `GET` or `POST`.
    public var method: String
    /// Header fields to send as they are (validators byte for byte).
    public var headers: [String: String]
    /// The request body (a push batch), or nil.
    public var body: [UInt8]?
    /// Fail when no response arrives within this time.
    public var timeout: Duration
    /// Stop, and throw ``SyncBodyOverBudget``, rather than receive a body larger than this
    /// (a metered network's ``NetworkBudget``); nil: any size.
    public var maximumBodyBytes: Int?
    /// When the connection is cut after part of a `200` or `206` body arrived, throw
    /// ``SyncResponseCut`` with those bytes kept, rather than drop them: a download goes on
    /// from there with `Range` (a transport that cannot keep them throws its own error).
    public var keepsCutBody: Bool

    public init(
        url: URL, method: String = "GET", headers: [String: String], body: [UInt8]? = nil, timeout: Duration, maximumBodyBytes: Int? = nil,
        keepsCutBody: Bool = false
    ) {
        self.url = url
        self.method = method
        self.headers = headers
        self.body = body
        self.timeout = timeout
        self.maximumBodyBytes = maximumBodyBytes
        self.keepsCutBody = keepsCutBody
    }
}

/// A `200` or `206` whose connection was cut before its body ended, for a request that
/// asked to keep what arrived (``SyncRequest/keepsCutBody``): ``response`` holds the status,
/// the headers and the bytes received (``SyncResponse/bodyFile``, which the caller deletes).
///
/// ```swift
/// do { response = try await transport.fetch(request) } catch let cut as SyncResponseCut { keep(cut.response) }
/// ```
public struct SyncResponseCut: Error, Sendable, CustomStringConvertible {
    /// What arrived before the cut.
    public var response: SyncResponse
    /// Why the connection ended (the transport's error, described).
    public var reason: String

    public init(response: SyncResponse, reason: String) {
        self.response = response
        self.reason = reason
    }

    public var description: String { "the answer was cut after part of its body: \(reason)" }
}

/// A `200` whose body is over the request's ``SyncRequest/maximumBodyBytes``: its announced
/// `Content-Length` (bytes on the wire) passes the limit, or it announces none (a streamed
/// body, whose size is only known once paid for). The transport received none of it.
public struct SyncBodyOverBudget: Error, Sendable, Equatable, CustomStringConvertible {
    /// The body's size as announced (`Content-Length`), when it was.
    public var announcedBytes: Int?
    /// The limit it passed.
    public var limit: Int

    public init(announcedBytes: Int?, limit: Int) {
        self.announcedBytes = announcedBytes
        self.limit = limit
    }

    public var description: String {
        "the answer (\(announcedBytes.map { "\($0) bytes" } ?? "more bytes")) is over the budget of \(limit) bytes"
    }
}

/// A response, with its body already on disk so any size fits in bounded memory.
public struct SyncResponse: Sendable {
    public var status: Int
    /// Header fields by lowercased name.
    public var headers: [String: String]
    /// The body (possibly still gzip-encoded); the client deletes it when done. `nil` when empty.
    public var bodyFile: URL?

    public init(status: Int, headers: [String: String], bodyFile: URL?) {
        self.status = status
        self.headers = Dictionary(headers.map { ($0.key.lowercased(), $0.value) }, uniquingKeysWith: { first, _ in first })
        self.bodyFile = bodyFile
    }

    public func header(_ name: String) -> String? { headers[name.lowercased()] }
}

/// How the client talks HTTP. ``URLSessionTransport`` is the default; an app can supply its
/// own (a proxying session, a test double).
///
/// ```swift
/// struct MyTransport: SyncTransport {
///     func fetch(_ request: SyncRequest) async throws -> SyncResponse { … }
/// }
/// ```
public protocol SyncTransport: Sendable {
    func fetch(_ request: SyncRequest) async throws -> SyncResponse
}
