import DeltaSnapCore

/// The request shapes answered from raw bytes, before NIO's HTTP decoder: a poll,
/// `GET /v1/collections/NAME HTTP/1.1` or `GET /v1/index HTTP/1.1` (a user's view when it
/// carries `Authorization`), with exactly one `If-None-Match`, or a download
/// `GET /v1/collections/NAME/attachments/HASH HTTP/1.1` without `Range`; no body and no
/// connection management. Anything else — another method, target or version, a query, a header this
/// parser does not let through, a byte HTTP does not allow where it stands — is not a poll
/// (`parse` returns nil) and goes to NIO's decoder untouched, which refuses or accepts it as
/// it always has.
///
/// Hand-written because it exists to skip the general parser: it accepts a strict subset of
/// RFC 9112 (CRLF line ends only, no obs-fold, token header names) and nothing it is not
/// sure of.
///
/// ```swift
/// let head = PollRequestHead.parse(Array("GET /v1/collections/countries HTTP/1.1\r\nHost: x\r\nIf-None-Match: \"t.1\"\r\n\r\n".utf8)[...])
/// head?.target        // .collection("countries")
/// head?.ifNoneMatch   // "\"t.1\""
/// ```
struct PollRequestHead: Equatable {
    /// What a poll asks for.
    enum Target: Equatable {
        /// `/v1/collections/NAME`: a collection (never a partition: those are private).
        case collection(String)
        /// `/v1/index`: the public index, or the caller's view.
        case index
        /// `/v1/collections/NAME/attachments/HASH`: a download (no `Range`, no `If-Range`:
        /// those are the router's), `If-None-Match` optional.
        case attachment(collection: String, sha256: String)
    }

    var target: Target
    /// Empty for a download that sent none.
    var ifNoneMatch: String
    var requestID: String?
    var acceptEncoding: [String] = []
    /// The one `Authorization` value, if any: it names a view's user.
    var authorization: String?

    /// The request's path, as a log line names it.
    var path: String {
        switch target {
        case .collection(let name): "/v1/collections/\(name)"
        case .index: "/v1/index"
        case .attachment(let name, let sha256): "/v1/collections/\(name)/attachments/\(sha256)"
        }
    }

    static let prefix = Array("GET /v1/collections/".utf8)
    static let indexLine = Array("GET /v1/index HTTP/1.1\r\n".utf8)
    static let version = Array(" HTTP/1.1\r\n".utf8)
    /// Header fields that change framing or the connection: their requests are the router's.
    static let refused = ["connection", "content-length", "transfer-encoding", "upgrade", "expect", "te", "trailer"].map { Array($0.utf8) }
    static let ifNoneMatchName = Array("if-none-match".utf8)
    static let requestIDName = Array("x-request-id".utf8)
    static let acceptEncodingName = Array("accept-encoding".utf8)
    static let authorizationName = Array("authorization".utf8)
    /// Header fields a download from raw bytes does not answer (a range is the router's).
    static let refusedForDownloads = ["range", "if-range"].map { Array($0.utf8) }

    /// Parses one complete request head (through its empty line), or nil when it is not a
    /// plain poll.
    /// Generic so that the handler parses the connection's buffer in place, without a copy.
    static func parse<Bytes: RandomAccessCollection>(_ bytes: Bytes) -> PollRequestHead? where Bytes.Element == UInt8, Bytes.Index == Int {
        let target: Target
        var index = bytes.startIndex
        if bytes.starts(with: indexLine) {
            target = .index
            index += indexLine.count
        } else {
            guard bytes.starts(with: prefix) else { return nil }
            index += prefix.count
            let nameStart = index
            while index < bytes.endIndex, bytes[index] != UInt8(ascii: " ") { index += 1 }
            guard index < bytes.endIndex else { return nil }
            guard bytes[index...].starts(with: version) else { return nil }
            // The server's one URL grammar; partitions are private, so the router's.
            switch RequestTarget.underCollections(Substring(decoding: bytes[nameStart..<index], as: UTF8.self)) {
            case .collection(let path) where path.key == nil: target = .collection(path.name)
            case .attachment(let path, let sha256) where path.key == nil: target = .attachment(collection: path.name, sha256: sha256)
            default: return nil
            }
            index += version.count
        }
        let isDownload = if case .attachment = target { true } else { false }

        var ifNoneMatch: String?
        var requestID: String?
        var acceptEncoding: [String] = []
        var authorization: String?
        while true {
            guard let lineEnd = lineEnd(in: bytes, from: index) else { return nil }
            if lineEnd == index { break }  // the empty line ends the head
            guard let colon = bytes[index..<lineEnd].firstIndex(of: UInt8(ascii: ":")), colon > index,
                  bytes[index..<colon].allSatisfy(isTokenByte)
            else { return nil }
            // Compared byte by byte, case-insensitively: no String per header line.
            let fieldName = bytes[index..<colon]
            var valueStart = colon + 1
            var valueEnd = lineEnd
            while valueStart < valueEnd, bytes[valueStart] == UInt8(ascii: " ") || bytes[valueStart] == UInt8(ascii: "\t") { valueStart += 1 }
            while valueEnd > valueStart, bytes[valueEnd - 1] == UInt8(ascii: " ") || bytes[valueEnd - 1] == UInt8(ascii: "\t") { valueEnd -= 1 }
            let value = bytes[valueStart..<valueEnd]
            guard value.allSatisfy(isFieldValueByte) else { return nil }
            if named(fieldName, ifNoneMatchName) {
                guard ifNoneMatch == nil else { return nil }
                ifNoneMatch = String(decoding: value, as: UTF8.self)
            } else if named(fieldName, requestIDName) {
                guard requestID == nil else { return nil }
                requestID = String(decoding: value, as: UTF8.self)
            } else if named(fieldName, acceptEncodingName) {
                acceptEncoding.append(String(decoding: value, as: UTF8.self))
            } else if named(fieldName, authorizationName) {
                guard authorization == nil else { return nil }
                authorization = String(decoding: value, as: UTF8.self)
            } else if refused.contains(where: { named(fieldName, $0) }) {
                return nil
            } else if isDownload, refusedForDownloads.contains(where: { named(fieldName, $0) }) {
                return nil
            }
            index = lineEnd + 2
        }
        guard ifNoneMatch != nil || isDownload, index + 2 == bytes.endIndex else { return nil }
        return PollRequestHead(
            target: target, ifNoneMatch: ifNoneMatch ?? "", requestID: requestID, acceptEncoding: acceptEncoding, authorization: authorization)
    }

    /// The index of the CR of the CRLF ending the line that starts at `start`; nil for a
    /// bare CR or LF, a control byte, or no line end.
    private static func lineEnd<Bytes: RandomAccessCollection>(in bytes: Bytes, from start: Int) -> Int? where Bytes.Element == UInt8, Bytes.Index == Int {
        var index = start
        while index < bytes.endIndex {
            switch bytes[index] {
            case UInt8(ascii: "\r"):
                return index + 1 < bytes.endIndex && bytes[index + 1] == UInt8(ascii: "\n") ? index : nil
            case UInt8(ascii: "\n"):
                return nil
            default:
                index += 1
            }
        }
        return nil
    }

    /// Whether the token `name` is `lowercased` (ASCII letters and `-`, any case). On token
    /// bytes, `| 0x20` folds only `A`–`Z` onto a letter or `-`.
    private static func named<Bytes: Collection>(_ name: Bytes, _ lowercased: [UInt8]) -> Bool where Bytes.Element == UInt8 {
        name.count == lowercased.count && zip(name, lowercased).allSatisfy { ($0 | 0x20) == $1 || $0 == $1 }
    }

    /// RFC 9110 `tchar`.
    private static func isTokenByte(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"): true
        case UInt8(ascii: "!"), UInt8(ascii: "#"), UInt8(ascii: "$"), UInt8(ascii: "%"), UInt8(ascii: "&"), UInt8(ascii: "'"),
            UInt8(ascii: "*"), UInt8(ascii: "+"), UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "^"), UInt8(ascii: "_"),
            UInt8(ascii: "`"), UInt8(ascii: "|"), UInt8(ascii: "~"): true
        default: false
        }
    }

    /// Visible ASCII, space and tab: RFC 9110 `field-vchar` without obs-text, which (like any
    /// doubt) is left to NIO's parser. Every value read here is therefore exact ASCII.
    private static func isFieldValueByte(_ byte: UInt8) -> Bool {
        byte == UInt8(ascii: "\t") || (0x20...0x7E).contains(byte)
    }
}
