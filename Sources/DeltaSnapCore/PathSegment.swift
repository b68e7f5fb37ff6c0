extension StringProtocol {
    /// The string as one URL path segment (RFC 3986 §3.3): every UTF-8 byte outside the
    /// unreserved characters `A–Z a–z 0–9 - . _ ~` written as `%XX` (upper-case hex), `/`
    /// included. Tokens and record ids are opaque, so a client encodes them whole
    /// (docs/PROTOCOL.md §8.3); the server decodes the segment before reading it.
    ///
    /// ```swift
    /// "5f3c9a0e12ab34cd.42".percentEncodedPathSegment   // unchanged
    /// "a/b c".percentEncodedPathSegment                  // "a%2Fb%20c"
    /// ```
    package var percentEncodedPathSegment: String {
        var out: [UInt8] = []
        out.reserveCapacity(utf8.count)
        let hex = Array("0123456789ABCDEF".utf8)
        for byte in utf8 {
            switch byte {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
                UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "~"):
                out.append(byte)
            default:
                out += [UInt8(ascii: "%"), hex[Int(byte >> 4)], hex[Int(byte & 0x0F)]]
            }
        }
        return String(decoding: out, as: UTF8.self)
    }
}
