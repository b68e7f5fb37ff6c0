/// The server's token format: `<epoch>.<version>`, e.g. `5f3c9a0e12ab34cd.42`.
///
/// Only the server reads it. Clients treat the token (the `ETag` without its quotes) as an
/// opaque string, so the server may change this format at any time.
package struct ServerToken: Hashable, Sendable, CustomStringConvertible {
    /// 16 lowercase hex digits, random for each new collection store.
    package var epoch: String
    /// The collection version: 1 for the first commit, +1 for each commit after it.
    package var version: UInt64

    package init(epoch: String, version: UInt64) {
        self.epoch = epoch
        self.version = version
    }

    /// Parses a token; `nil` for anything not of this format (a client may send garbage),
    /// and for version 0: versions start at 1, so no server ever issued `<epoch>.0`
    /// (docs/PROTOCOL.md §8.3 answers it `bad_token`; §5.1 a full body).
    package init?(_ text: some StringProtocol) {
        let parts = text.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 2, Self.isEpoch(parts[0]),
              parts[1].utf8.count <= 20, parts[1].utf8.allSatisfy({ (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) }),
              // No leading zeros: a parsed token must print back to the same bytes.
              !parts[1].hasPrefix("0"),
              let version = UInt64(parts[1])
        else { return nil }
        self.epoch = String(parts[0])
        self.version = version
    }

    package var description: String { "\(epoch).\(version)" }

    /// Whether `text` is 16 lowercase hex digits.
    package static func isEpoch(_ text: some StringProtocol) -> Bool {
        text.utf8.count == 16 && text.utf8.allSatisfy { (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) || (UInt8(ascii: "a")...UInt8(ascii: "f")).contains($0) }
    }

    /// A new random epoch.
    package static func randomEpoch() -> String {
        var generator = SystemRandomNumberGenerator()
        let hex = String(generator.next() as UInt64, radix: 16)
        return String(repeating: "0", count: 16 - hex.utf8.count) + hex
    }
}
