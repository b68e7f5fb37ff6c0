import DeltaSnapClient
import DeltaSnapCore
import Foundation

/// An attacker on the path (a compromised CDN or mirror): every request goes to the real
/// server, and `rewrite` may replace what comes back, or answer something else entirely.
/// It also records the paths asked for, so a test can count fetches.
///
/// ```swift
/// let mirror = CompromisedMirror()
/// mirror.rewrite = { url, body in url.path.contains("/deltas/") ? forged : nil }
/// let replica = try DeltaSnapReplica(…, transport: mirror, trustedKeys: [key])
/// ```
package final class CompromisedMirror: SyncTransport, @unchecked Sendable {
    private let lock = NSLock()
    private let real = URLSessionTransport()
    private var _rewrite: (@Sendable (URL, [UInt8]) -> [UInt8]?)?
    private var _paths: [String] = []

    package init() {}

    /// Given the URL and the decoded body, the bytes to hand the client instead (nil: as is).
    package var rewrite: (@Sendable (URL, [UInt8]) -> [UInt8]?)? {
        get { lock.withLock { _rewrite } }
        set { lock.withLock { _rewrite = newValue } }
    }

    /// Paths requested so far.
    package var paths: [String] { lock.withLock { _paths } }

    package func resetPaths() { lock.withLock { _paths = [] } }

    package func fetch(_ request: SyncRequest) async throws -> SyncResponse {
        lock.withLock { _paths.append(request.url.path) }
        let response = try await real.fetch(request)
        guard let rewrite, let file = response.bodyFile else { return response }
        var bytes = [UInt8](try Data(contentsOf: file))
        if bytes.starts(with: [0x1F, 0x8B]) { bytes = try GzipDecompressor.decompress(bytes) }
        guard let forged = rewrite(request.url, bytes) else { return response }
        try Data(forged).write(to: file)
        return response
    }

    /// Rewrites a body's records with `change` and fixes `count` and `checksum` the way an
    /// attacker can (the XXH64 sum is no secret): only the signed digest can catch it.
    /// `held` is the state the client holds (id → canonical bytes), for a delta.
    package static func forge(_ body: [UInt8], held: [String: [UInt8]], _ change: (inout [Record]) -> Void) throws -> [UInt8] {
        let reader = BodyReader(bytes: body)
        var header = try reader.readHeader()
        var records: [Record] = []
        while let record = try reader.nextRecord() { records.append(record) }
        change(&records)
        var state = header.kind == .full ? [:] : held
        for record in records {
            if record.isHidden { state[record.id] = nil } else { state[record.id] = record.bytes }
        }
        var checksum = StateChecksum.empty
        for bytes in state.values { checksum.add(hash: XXH64.hash(bytes)) }
        header.checksum = checksum
        header.count = records.count
        var encoder = BodyEncoder(header: header)
        var out = encoder.start()
        for record in records { encoder.append(record, into: &out) }
        encoder.finish(into: &out)
        return out
    }
}
