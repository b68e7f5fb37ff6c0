import DeltaSnapCore
import Foundation

/// A polling client that applies bodies the way the protocol says (docs/PROTOCOL.md), and
/// checks as it goes: a delta's base is the token held, counts and checksums match, tokens
/// never move backwards.
package final class ProtocolPoller: @unchecked Sendable {
    package var records: [String: [UInt8]] = [:]
    package var token: String?
    package var lastVersion: UInt64 = 0
    package var applied = (full: 0, delta: 0, notModified: 0)
    package var problems: [String] = []

    package init() {}

    /// One conditional GET of `items` and, on a 200, the body applied.
    package func sync(_ connection: RawHTTPClient) throws {
        var headers = ["Accept-Encoding": "gzip"]
        if let token { headers["If-None-Match"] = "\"\(token)\"" }
        let response = try connection.request("GET", "/v1/collections/items", headers: headers)
        if response.status == 304 {
            applied.notModified += 1
            return
        }
        guard response.status == 200 else {
            problems.append("status \(response.status)")
            return
        }
        let reader = BodyReader(bytes: try response.decodedBody())
        let header = try reader.readHeader()
        switch header.kind {
        case .full:
            records.removeAll()
            applied.full += 1
        case .delta:
            if header.base != token { problems.append("delta on base \(header.base ?? "nil") while holding \(token ?? "nil")") }
            applied.delta += 1
        }
        var count = 0
        while let record = try reader.nextRecord() {
            count += 1
            if record.isHidden { records[record.id] = nil } else { records[record.id] = record.bytes }
        }
        if count != header.count { problems.append("count \(count) != \(header.count)") }
        var checksum = StateChecksum.empty
        for bytes in records.values { checksum.add(hash: XXH64.hash(bytes)) }
        if checksum != header.checksum { problems.append("checksum mismatch at \(header.token)") }
        if let version = ServerToken(header.token)?.version {
            if version < lastVersion { problems.append("token moved backwards: \(lastVersion) -> \(version)") }
            lastVersion = version
        }
        token = header.token
    }

    /// The records held, as `export` prints them.
    package var export: String {
        records.keys.sorted { $0.utf8Precedes($1) }.map { String(decoding: records[$0]!, as: UTF8.self) + "\n" }.joined()
    }
}

